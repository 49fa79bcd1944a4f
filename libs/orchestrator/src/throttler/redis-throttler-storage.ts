import type { ThrottlerStorageRecord } from './window-counters.js';
import { MemoryWindowCounters, type WindowCount, type WindowCounters } from './window-counters.js';
import { withTimeout } from '../core/bounded.js';

/** What the storage needs of a Redis client: commands (node-redis's `sendCommand` has this shape). */
export interface ThrottlerRedisClient {
  sendCommand(args: string[]): Promise<unknown>;
}

export interface RedisThrottlerStorageOptions {
  client: ThrottlerRedisClient;
  /** Namespace of every key. Default `npo`. */
  prefix?: string;
  /** Longest one Redis operation may take; slower counts as an outage. Default 200 ms. */
  opTimeoutMs?: number;
  /** After a failure, Redis is skipped (counts are kept in this process) for this long. Default 1 000 ms. */
  retryMs?: number;
  /** Redis failed (once per outage) or is back. */
  onState?: (state: 'ok' | 'degraded', error?: unknown) => void;
  /**
   * While Redis is away: `count-locally` (default) keeps counts in this process; `throw` rejects with a
   * `CountersUnavailableError`, so that the caller decides (refuse, or enforce a share of the limit).
   */
  whenUnavailable?: 'count-locally' | 'throw';
}

/** The shared counts could not be read or written (Redis away), with `whenUnavailable: 'throw'`. */
export class CountersUnavailableError extends Error {
  constructor(cause?: unknown) {
    super('rate limit counters in Redis are unavailable', { cause });
  }
}

// One round trip, atomic: every replica sees the same count, and the window's expiry is set with its first hit.
const INCREMENT = `local blocked = redis.call('PTTL', KEYS[2])
if blocked > 0 then
  return {tonumber(redis.call('GET', KEYS[1]) or '0'), redis.call('PTTL', KEYS[1]), 1, blocked}
end
local hits = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) ttl = tonumber(ARGV[1]) end
if hits > tonumber(ARGV[2]) then
  local block = tonumber(ARGV[3])
  if block <= 0 then block = ttl end
  redis.call('SET', KEYS[2], '1', 'PX', block)
  return {hits, ttl, 1, block}
end
return {hits, ttl, 0, 0}`;
const ADD = `local total = redis.call('INCRBY', KEYS[1], ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) ttl = tonumber(ARGV[1]) end
return {total, ttl}`;

/**
 * A `@nestjs/throttler` storage shared by every replica through Redis: each
 * hit is one atomic script (count, expiry, block). Every operation is
 * bounded in time; while Redis is away, counts are kept in this process's
 * memory (each replica limits alone, as it would without Redis), the outage
 * is reported once, and Redis is used again once it answers.
 *
 * ```ts
 * ThrottlerModule.forRoot({ throttlers: [{ ttl: 60_000, limit: 100 }], storage: new RedisThrottlerStorage({ client }) })
 * ```
 */
export class RedisThrottlerStorage implements WindowCounters {
  private readonly prefix: string;
  private readonly opTimeoutMs: number;
  private readonly retryMs: number;
  private readonly local = new MemoryWindowCounters();
  private degradedUntil = 0;
  private degraded = false;

  constructor(private readonly options: RedisThrottlerStorageOptions) {
    this.prefix = options.prefix ?? 'npo';
    this.opTimeoutMs = options.opTimeoutMs ?? 200;
    this.retryMs = options.retryMs ?? 1_000;
  }

  async increment(
    key: string,
    ttl: number,
    limit: number,
    blockDuration: number,
    throttlerName: string,
  ): Promise<ThrottlerStorageRecord> {
    // The count and its block share a hash tag (one Redis Cluster slot for the script).
    const id = `${this.prefix}:throttle:{t:${throttlerName}:${key}}`;
    if (!this.available())
      return this.unavailable(() => this.local.incrementNow(`${throttlerName}:${key}`, ttl, limit, blockDuration));
    try {
      const [hits, ttlMs, blocked, blockMs] = (await this.eval(
        INCREMENT,
        [id, `${id}:block`],
        [String(Math.max(1, Math.round(ttl))), String(limit), String(Math.round(blockDuration))],
      )) as number[];
      return {
        totalHits: Number(hits),
        timeToExpire: seconds(Number(ttlMs)),
        isBlocked: Number(blocked) === 1,
        timeToBlockExpire: Number(blocked) === 1 ? seconds(Number(blockMs)) : 0,
      };
    } catch (error) {
      this.degrade(error);
      return this.unavailable(
        () => this.local.incrementNow(`${throttlerName}:${key}`, ttl, limit, blockDuration),
        error,
      );
    }
  }

  async add(key: string, ttlMs: number, amount: number): Promise<WindowCount> {
    if (!this.available()) return this.unavailable(() => this.local.addNow(key, ttlMs, amount));
    try {
      const [total, ttl] = (await this.eval(
        ADD,
        [`${this.prefix}:count:${key}`],
        [String(Math.max(1, Math.round(ttlMs))), String(Math.round(amount))],
      )) as number[];
      return { total: Number(total), timeToExpire: seconds(Number(ttl)) };
    } catch (error) {
      this.degrade(error);
      return this.unavailable(() => this.local.addNow(key, ttlMs, amount), error);
    }
  }

  private unavailable<T>(locally: () => T, error?: unknown): T {
    if (this.options.whenUnavailable === 'throw') throw new CountersUnavailableError(error);
    return locally();
  }

  private available(): boolean {
    return !this.degraded || Date.now() >= this.degradedUntil;
  }

  private degrade(error: unknown): void {
    this.degradedUntil = Date.now() + this.retryMs;
    if (this.degraded) return;
    this.degraded = true;
    this.options.onState?.('degraded', error);
  }

  private async eval(script: string, keys: string[], args: string[]): Promise<unknown> {
    const result = await withTimeout(
      this.options.client.sendCommand(['EVAL', script, String(keys.length), ...keys, ...args]),
      this.opTimeoutMs,
      'no answer from Redis',
    );
    if (this.degraded) {
      this.degraded = false;
      this.options.onState?.('ok');
    }
    return result;
  }
}

function seconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}
