import type { ThrottlerStorage } from '@nestjs/throttler';

/** What `ThrottlerStorage.increment` resolves with (the package does not export its name). */
export type ThrottlerStorageRecord = Awaited<ReturnType<ThrottlerStorage['increment']>>;

/**
 * A `ThrottlerStorage` (the contract of `@nestjs/throttler`) that can also add
 * an amount to a window's count: requests are counted one by one, tokens by
 * the number the provider reported.
 */
export interface WindowCounters extends ThrottlerStorage {
  /** Adds `amount` (0 reads) to the count of `key`'s current window of `ttlMs`. */
  add(key: string, ttlMs: number, amount: number): Promise<WindowCount>;
}

/** A window's count and the seconds until it ends. */
export interface WindowCount {
  total: number;
  timeToExpire: number;
}

interface Window {
  hits: number;
  expiresAt: number;
  blockedUntil: number;
}

/**
 * Fixed windows in this process's memory: one `Map` entry per key in use,
 * swept as windows end, so memory follows the keys active in the last window.
 */
export class MemoryWindowCounters implements WindowCounters {
  private readonly windows = new Map<string, Window>();
  private nextSweep = 0;

  constructor(private readonly now: () => number = Date.now) {}

  async increment(
    key: string,
    ttl: number,
    limit: number,
    blockDuration: number,
    throttlerName: string,
  ): Promise<ThrottlerStorageRecord> {
    return this.incrementNow(`${throttlerName}:${key}`, ttl, limit, blockDuration);
  }

  /** `increment` without the promise (used as the fallback of the shared counters). */
  incrementNow(key: string, ttl: number, limit: number, blockDuration: number): ThrottlerStorageRecord {
    const now = this.now();
    const window = this.window(key, ttl, now);
    if (window.blockedUntil > now) return record(window, now, true);
    window.hits += 1;
    if (window.hits > limit) {
      // No block of its own: refused until the window ends.
      window.blockedUntil = blockDuration > 0 ? now + blockDuration : window.expiresAt;
      return record(window, now, true);
    }
    return record(window, now, false);
  }

  async add(key: string, ttlMs: number, amount: number): Promise<WindowCount> {
    return this.addNow(key, ttlMs, amount);
  }

  addNow(key: string, ttlMs: number, amount: number): WindowCount {
    const now = this.now();
    const window = this.window(`add:${key}`, ttlMs, now);
    window.hits += amount;
    return { total: window.hits, timeToExpire: seconds(window.expiresAt - now) };
  }

  private window(key: string, ttl: number, now: number): Window {
    if (now >= this.nextSweep) this.sweep(now, ttl);
    let window = this.windows.get(key);
    if (!window || (window.expiresAt <= now && window.blockedUntil <= now)) {
      window = { hits: 0, expiresAt: now + ttl, blockedUntil: 0 };
      this.windows.set(key, window);
    }
    return window;
  }

  private sweep(now: number, ttl: number): void {
    for (const [key, window] of this.windows) {
      if (window.expiresAt <= now && window.blockedUntil <= now) this.windows.delete(key);
    }
    this.nextSweep = now + Math.max(ttl, 1_000);
  }
}

function record(window: Window, now: number, isBlocked: boolean): ThrottlerStorageRecord {
  return {
    totalHits: window.hits,
    timeToExpire: seconds(window.expiresAt - now),
    isBlocked,
    timeToBlockExpire: isBlocked ? seconds(window.blockedUntil - now) : 0,
  };
}

/** Whole seconds, rounded up (a `Retry-After` of 0 would invite an immediate retry that is refused again). */
function seconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}
