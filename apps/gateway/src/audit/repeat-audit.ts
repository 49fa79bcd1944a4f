import { createHash } from 'node:crypto';

/** The windows the audit reports: how long a finished answer would have been kept. */
export const WINDOWS = [
  ['1m', 60_000],
  ['5m', 300_000],
  ['1h', 3_600_000],
  ['24h', 86_400_000],
  ['all', Infinity],
] as const;

export type WindowName = (typeof WINDOWS)[number][0];

/** One turn as the audit sees it: when, who, what (a hash) and what its answer cost. */
export interface Turn {
  time: number;
  user: string;
  key: string;
  /** USD the answer cost when it was paid for (0 when unknown). */
  cost: number;
}

export interface AuditReport {
  turns: number;
  /** Share of turns that repeat an earlier turn exactly within each window (fractions). */
  repeatShare: Record<WindowName, number>;
  /** Of all exact repeats, the share whose previous occurrence came from the same user. */
  sameUserShare: number;
  /** The same, per window. */
  sameUserShareByWindow: Record<WindowName, number>;
  /**
   * What a dedup window of each length would have saved: calls not made, and their price. A window keeps an answer
   * for its length from the call that paid for it, so a request repeated every 4 minutes is saved by a 5-minute
   * window only every other time (each repeat counts in `repeatShare`, measured from the previous occurrence).
   */
  savings: Record<WindowName, { calls: number; usd: number }>;
  /** USD of every turn in the input (the total the savings compare to). */
  totalUsd: number;
  distinctKeys: number;
  /**
   * The most repeated requests, by their hash (never their content): for a
   * request log, the first 12 characters of its lines' own `key` (so that
   * `grep` finds them there); for chat turns, of the audit's hash of the turn.
   */
  topKeys: { key: string; count: number }[];
  users: number;
  firstTime: string | null;
  lastTime: string | null;
  /** Lines that were not a turn (not JSON, no time, ...), oversized ones included. */
  malformedLines: number;
  oversizedLines: number;
  /** Turns whose time is earlier than the previous turn of the same request (the input is not in time order). */
  outOfOrder: number;
  /** Request-log lines saying how many lines the gateway dropped (a slow disk). */
  droppedByGateway: number;
}

interface Seen {
  time: number;
  user: string;
  count: number;
  /** Per window: when the answer a window of that length would be replaying was paid for. */
  paid: number[];
}

const KEY_CHARS = 22;
/** A digest as the request log writes it: base64url, at least 128 bits. */
const LOG_KEY = /^[\w-]{22,86}$/;

/**
 * Exact repeats in a stream of turns, one pass, memory proportional to the
 * number of distinct requests (each kept as a 128-bit hash). A turn repeats
 * within a window when the same request was last seen no longer ago than it.
 */
export class RepeatAudit {
  private readonly seen = new Map<string, Seen>();
  private readonly users = new Set<string>();
  private turns = 0;
  private readonly repeats = Object.fromEntries(WINDOWS.map(([w]) => [w, 0])) as Record<WindowName, number>;
  private readonly sameUser = Object.fromEntries(WINDOWS.map(([w]) => [w, 0])) as Record<WindowName, number>;
  private readonly savedCalls = Object.fromEntries(WINDOWS.map(([w]) => [w, 0])) as Record<WindowName, number>;
  private readonly usd = Object.fromEntries(WINDOWS.map(([w]) => [w, 0])) as Record<WindowName, number>;
  private totalUsd = 0;
  private first = Infinity;
  private last = -Infinity;
  malformed = 0;
  oversized = 0;
  private outOfOrder = 0;
  private dropped = 0;

  /** Reads one line of input (a request-log line, or `{time, user, messages}`); bad lines are counted, never thrown. */
  addLine(line: string): void {
    const trimmed = line.trim();
    if (trimmed === '') return;
    let value: unknown;
    try {
      value = JSON.parse(trimmed);
    } catch {
      this.malformed++;
      return;
    }
    if (
      typeof value === 'object' &&
      value !== null &&
      typeof (value as { dropped?: unknown }).dropped === 'number' &&
      !('key' in value)
    ) {
      this.dropped += (value as { dropped: number }).dropped;
      return;
    }
    const turn = toTurn(value);
    if (!turn) this.malformed++;
    else this.add(turn);
  }

  add(turn: Turn): void {
    this.turns++;
    this.totalUsd += turn.cost;
    if (this.users.size < 10_000_000) this.users.add(turn.user);
    this.first = Math.min(this.first, turn.time);
    this.last = Math.max(this.last, turn.time);
    const previous = this.seen.get(turn.key);
    if (!previous) {
      this.seen.set(turn.key, { time: turn.time, user: turn.user, count: 1, paid: WINDOWS.map(() => turn.time) });
      return;
    }
    if (turn.time < previous.time) this.outOfOrder++;
    const gap = Math.abs(turn.time - previous.time);
    const same = previous.user === turn.user;
    WINDOWS.forEach(([name, ms], i) => {
      // A repeat: the same request was last seen no longer ago than the window.
      if (gap <= ms) {
        this.repeats[name]++;
        if (same) this.sameUser[name]++;
      }
      // A saving: a window of this length, kept from the last paid answer, would still hold it (else this call pays).
      if (Math.abs(turn.time - previous.paid[i]) <= ms) {
        this.savedCalls[name]++;
        this.usd[name] += turn.cost;
      } else previous.paid[i] = turn.time;
    });
    previous.count++;
    if (turn.time >= previous.time) {
      previous.time = turn.time;
      previous.user = turn.user;
    }
  }

  report(top = 10): AuditReport {
    const share = (n: number, of: number) => (of === 0 ? 0 : n / of);
    const byWindow = <T>(f: (name: WindowName) => T) =>
      Object.fromEntries(WINDOWS.map(([w]) => [w, f(w)])) as Record<WindowName, T>;
    const topKeys: { key: string; count: number }[] = [];
    for (const [key, seen] of this.seen) {
      if (seen.count < 2) continue;
      if (topKeys.length < top || seen.count > topKeys[topKeys.length - 1].count) {
        topKeys.push({ key: key.slice(0, 12), count: seen.count });
        topKeys.sort((a, b) => b.count - a.count);
        if (topKeys.length > top) topKeys.pop();
      }
    }
    return {
      turns: this.turns,
      repeatShare: byWindow((w) => share(this.repeats[w], this.turns)),
      sameUserShare: share(this.sameUser.all, this.repeats.all),
      sameUserShareByWindow: byWindow((w) => share(this.sameUser[w], this.repeats[w])),
      savings: byWindow((w) => ({ calls: this.savedCalls[w], usd: round(this.usd[w]) })),
      totalUsd: round(this.totalUsd),
      distinctKeys: this.seen.size,
      topKeys,
      users: this.users.size,
      firstTime: Number.isFinite(this.first) ? new Date(this.first).toISOString() : null,
      lastTime: Number.isFinite(this.last) ? new Date(this.last).toISOString() : null,
      malformedLines: this.malformed + this.oversized,
      oversizedLines: this.oversized,
      outOfOrder: this.outOfOrder,
      droppedByGateway: this.dropped,
    };
  }
}

function round(usd: number): number {
  return Math.round(usd * 1e6) / 1e6;
}

/** A time: an ISO string, or a number of seconds (or milliseconds, above 1e11) since the epoch. */
function timeOf(value: unknown): number | undefined {
  if (typeof value === 'number' && Number.isFinite(value) && value >= 0) return value > 1e11 ? value : value * 1000;
  if (typeof value === 'string' && value.length <= 64) {
    const t = Date.parse(value);
    return Number.isFinite(t) ? t : undefined;
  }
  return undefined;
}

/**
 * A request-log line (`key`, `tenant`, `cost` + `saved`), or a chat turn
 * (`messages`, `user`; an optional `model` is part of what must match).
 */
export function toTurn(value: unknown): Turn | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const v = value as Record<string, unknown>;
  const time = timeOf(v.time ?? v.timestamp);
  if (time === undefined) return undefined;
  const number = (n: unknown) => (typeof n === 'number' && Number.isFinite(n) && n >= 0 ? n : 0);
  if (typeof v.key === 'string' && v.key.length > 0) {
    // An answer that failed is not one a window would have kept.
    if (typeof v.status === 'number' && (v.status < 200 || v.status >= 300)) return undefined;
    // The request log's key is already a SHA-256 (base64url): kept as the log has it, so that the report's keys are
    // the log's own (hashing it again would give digests nobody can look up). Anything else is hashed.
    const key = LOG_KEY.test(v.key) ? v.key.slice(0, KEY_CHARS) : hashed(v.key);
    return { time, user: String(v.tenant ?? v.user ?? ''), key, cost: number(v.cost) + number(v.saved) };
  }
  if (Array.isArray(v.messages)) {
    const user = typeof v.user === 'string' || typeof v.user === 'number' ? String(v.user) : '';
    const what = v.model === undefined ? v.messages : { model: v.model, messages: v.messages };
    return { time, user, key: hashed(canonical(what)), cost: number(v.cost) };
  }
  return undefined;
}

function hashed(text: string): string {
  return createHash('sha256').update(text).digest('base64url').slice(0, KEY_CHARS);
}

/** JSON with object keys sorted: the same conversation, the same text. */
export function canonical(value: unknown, depth = 0): string {
  if (depth > 64) return '"…"';
  if (Array.isArray(value)) return `[${value.map((v) => canonical(v, depth + 1)).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k], depth + 1)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}
