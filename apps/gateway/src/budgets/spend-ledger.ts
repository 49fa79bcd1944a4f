import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { SpendCap } from './budget-config.js';

/** What the ledger needs of Redis: commands (node-redis's `sendCommand`). */
export interface LedgerRedis {
  sendCommand(args: string[]): Promise<unknown>;
}

/** Spend and savings of one scope (a key's name, or `*` for all) in one period. */
export interface SpendTotals {
  /** USD, in billionths: sums of integers stay exact. */
  spentNano: number;
  savedNano: number;
}

export const NANO = 1e9;

/** `day:2026-11-30` or `month:2026-11` (UTC). */
export function periodKey(period: SpendCap['period'], now: number): string {
  const iso = new Date(now).toISOString();
  return period === 'day' ? `day:${iso.slice(0, 10)}` : `month:${iso.slice(0, 7)}`;
}

const PERIODS: SpendCap['period'][] = ['day', 'month'];
// Long enough to read last period's figures, short enough that Redis forgets them.
const EXPIRE_SECONDS = { day: 3 * 86_400, month: 62 * 86_400 };

/**
 * Spend and money saved per key and in all, per UTC day and month. Kept in
 * memory and, so that a restart does not reset a cap, in Redis (shared by
 * replicas: totals are read there before each capped request, bounded in
 * time) or in a local file (written atomically, at most once a second).
 */
export class SpendLedger {
  private readonly totals = new Map<string, SpendTotals>();
  private flushTimer?: NodeJS.Timeout;
  private redisDown = false;

  constructor(
    private readonly options: {
      redis?: LedgerRedis;
      prefix?: string;
      opTimeoutMs?: number;
      file?: string;
      now?: () => number;
      log?: (line: string) => void;
    } = {},
  ) {
    if (options.file) this.load(options.file);
  }

  private get now(): number {
    return (this.options.now ?? Date.now)();
  }

  /** Records an answer's cost (and what joined or cached copies of it saved). */
  record(scope: string | undefined, spentNano: number, savedNano: number): void {
    if (spentNano === 0 && savedNano === 0) return;
    const now = this.now;
    for (const period of PERIODS) {
      const p = periodKey(period, now);
      for (const s of scope === undefined ? ['*'] : ['*', scope]) {
        const id = `${p}:${s}`;
        const totals = this.totals.get(id) ?? { spentNano: 0, savedNano: 0 };
        totals.spentNano += spentNano;
        totals.savedNano += savedNano;
        this.totals.set(id, totals);
        if (this.options.redis) {
          if (spentNano) void this.command(['INCRBY', this.redisKey(id, 'spent'), String(spentNano)], period);
          if (savedNano) void this.command(['INCRBY', this.redisKey(id, 'saved'), String(savedNano)], period);
        }
      }
    }
    this.scheduleFlush();
  }

  /** USD (in billionths) spent by `scope` in the cap's current period; the fleet's total when shared through Redis. */
  async spent(scope: string, cap: SpendCap): Promise<number> {
    const id = `${periodKey(cap.period, this.now)}:${scope}`;
    const local = this.totals.get(id)?.spentNano ?? 0;
    if (!this.options.redis) return local;
    const shared = await this.command(['GET', this.redisKey(id, 'spent')]);
    return shared === undefined ? local : Math.max(local, Number(shared ?? 0));
  }

  /** This process's view of the totals in the current day and month (for /health and the docs' examples). */
  snapshot(): Record<string, SpendTotals> {
    const now = this.now;
    const current = new Set(PERIODS.map((p) => periodKey(p, now)));
    return Object.fromEntries([...this.totals].filter(([id]) => current.has(id.slice(0, id.lastIndexOf(':')))));
  }

  close(): void {
    if (this.flushTimer) {
      clearTimeout(this.flushTimer);
      this.flushTimer = undefined;
      this.flush();
    }
  }

  private redisKey(id: string, what: 'spent' | 'saved'): string {
    return `${this.options.prefix ?? 'npo'}:spend:${what}:${id}`;
  }

  private async command(args: string[], period?: SpendCap['period']): Promise<unknown> {
    const redis = this.options.redis!;
    const ms = this.options.opTimeoutMs ?? 200;
    try {
      const result = await new Promise<unknown>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no answer from Redis within ${ms} ms`)), ms);
        timer.unref();
        redis.sendCommand(args).then(
          (value) => (clearTimeout(timer), resolve(value)),
          (error: unknown) => (clearTimeout(timer), reject(error)),
        );
      });
      if (period) void redis.sendCommand(['EXPIRE', args[1], String(EXPIRE_SECONDS[period])]).catch(() => undefined);
      if (this.redisDown) {
        this.redisDown = false;
        this.options.log?.('spend totals: Redis is back');
      }
      return result;
    } catch (error) {
      if (!this.redisDown) {
        this.redisDown = true;
        this.options.log?.(`spend totals: Redis unavailable (${((error as Error).message ?? '').slice(0, 120)}); caps use this replica's own count until it is back`);
      }
      return undefined;
    }
  }

  private load(file: string): void {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw new Error(`--spend-file ${file}: cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
    }
    let data: unknown;
    try {
      data = JSON.parse(text);
    } catch {
      this.options.log?.(`--spend-file ${file}: not valid JSON; starting from zero`);
      return;
    }
    const totals = (data as { totals?: unknown } | null)?.totals;
    if (typeof totals !== 'object' || totals === null) return;
    for (const [id, value] of Object.entries(totals)) {
      const v = value as Partial<SpendTotals> | null;
      if (/^(day|month):[\d-]+:.{1,64}$/.test(id) && Number.isSafeInteger(v?.spentNano) && Number.isSafeInteger(v?.savedNano)) {
        this.totals.set(id, { spentNano: v!.spentNano!, savedNano: v!.savedNano! });
      }
    }
  }

  private scheduleFlush(): void {
    if (!this.options.file || this.flushTimer) return;
    this.flushTimer = setTimeout(() => {
      this.flushTimer = undefined;
      this.flush();
    }, 1_000);
    this.flushTimer.unref();
  }

  /** Atomic: a crash mid-write leaves the previous file, never half of one. */
  private flush(): void {
    const file = this.options.file;
    if (!file) return;
    try {
      mkdirSync(dirname(file), { recursive: true });
      const temporary = `${file}.${process.pid}.tmp`;
      writeFileSync(temporary, JSON.stringify({ version: 1, totals: this.snapshot() }));
      renameSync(temporary, file);
    } catch (error) {
      this.options.log?.(`--spend-file ${file}: not written (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
    }
  }
}
