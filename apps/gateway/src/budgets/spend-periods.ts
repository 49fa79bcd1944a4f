import type { SpendCap } from '../config/spend-cap.js';

/** `day:2026-11-30` of `day:2026-11-30:<scope>` (the scope may hold `:`). */
export function periodOf(id: string): string {
  return id.slice(0, id.indexOf(':', id.indexOf(':') + 1));
}

/** The scope of `day:2026-11-30:<scope>`. */
export function scopeOf(id: string): string {
  return id.slice(periodOf(id).length + 1);
}

export function groupBy<T>(items: T[], by: (item: T) => string): T[][] {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const key = by(item);
    const group = groups.get(key);
    if (group) group.push(item);
    else groups.set(key, [item]);
  }
  return [...groups.values()];
}

/** `day:2026-11-30` or `month:2026-11` (UTC). */
export function periodKey(period: SpendCap['period'], now: number): string {
  return periodKeys(now).keys[period];
}

// Every answer is counted under both periods, and under each period's `*`: the day's keys are made once a day, not
// per answer (a herd's joiners each record what they saved).
export function periodKeys(now: number): typeof periodCache {
  const day = Math.floor(now / 86_400_000);
  if (day !== periodCache.day) {
    const iso = new Date(day * 86_400_000).toISOString();
    const keys = { day: `day:${iso.slice(0, 10)}`, month: `month:${iso.slice(0, 7)}` };
    periodCache.day = day;
    periodCache.keys = keys;
    periodCache.all = { day: `${keys.day}:*`, month: `${keys.month}:*` };
  }
  return periodCache;
}

const periodCache: { day: number; keys: Record<SpendCap['period'], string>; all: Record<SpendCap['period'], string> } =
  {
    day: Number.NaN,
    keys: { day: '', month: '' },
    all: { day: '', month: '' },
  };

export const PERIODS: SpendCap['period'][] = ['day', 'month'];
// Long enough to read last period's figures, short enough that Redis forgets them.
export const EXPIRE_SECONDS = { day: 3 * 86_400, month: 62 * 86_400 };
