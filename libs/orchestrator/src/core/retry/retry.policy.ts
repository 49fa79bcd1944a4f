import { withDefaults } from '../options.js';
import { isTransientFailure } from '../breaker/failure-classifier.js';
import { RETRY_FIELDS, type RetryOptions } from './retry.options.js';

/** What a policy needs to know about the call it runs in: whether it was cancelled, and a signal that says so. */
export interface CallControl {
  readonly cancelled: boolean;
  /** Created on first use: most calls never wait, and never need one. */
  signal(): AbortSignal;
}

/**
 * Retries of transient failures before the first chunk, with exponential
 * back-off and full jitter. `beforeRetry` runs after each back-off (the
 * breaker uses it to wait, within the back-off's bound, for a probe to close it).
 */
export class RetryPolicy {
  readonly retries: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly shouldRetry: (error: unknown) => boolean;

  constructor(options: RetryOptions = {}) {
    const o = withDefaults(RETRY_FIELDS, options);
    this.retries = o.retries;
    this.baseDelayMs = o.baseDelayMs;
    this.maxDelayMs = o.maxDelayMs;
    this.shouldRetry = o.shouldRetry ?? isTransientFailure;
  }

  /** `failed`: the first attempt was already made (elsewhere) and failed with this error; the retries go on from it. */
  async execute<T>(
    attempt: () => Promise<T>,
    call: CallControl,
    beforeRetry?: (signal: AbortSignal) => Promise<void>,
    failed?: { error: unknown },
  ): Promise<T> {
    for (let retries = 0; ; retries++) {
      try {
        if (retries === 0 && failed) throw failed.error;
        return await attempt();
      } catch (error) {
        if (retries >= this.retries || !this.shouldRetry(error) || call.cancelled) throw error;
        // The upstream said when to come back: sooner is pointless, and later than our bound is the client's call.
        const asked = retryAfterMsOf(error);
        if (asked !== undefined && asked > this.maxDelayMs) throw error;
        await this.backOff(retries, call.signal(), asked);
        await beforeRetry?.(call.signal());
      }
    }
  }

  /** Waits `min(maxDelayMs, baseDelayMs * 2^n)` with full jitter (at least what the upstream asked), or until cancelled. */
  private backOff(retries: number, signal: AbortSignal, atLeastMs = 0): Promise<void> {
    const delay = Math.max(atLeastMs, Math.random() * Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** retries));
    return new Promise<void>((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const onAbort = () => {
        clearTimeout(timer);
        reject(signal.reason);
      };
      const timer = setTimeout(() => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      }, delay);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}

/**
 * How long an error says to wait before trying again: its `retryAfterMs`, or
 * its `retryAfter` (seconds, or an HTTP date, as the `Retry-After` header).
 */
export function retryAfterMsOf(error: unknown): number | undefined {
  const e = error as { retryAfterMs?: unknown; retryAfter?: unknown } | undefined;
  if (typeof e?.retryAfterMs === 'number' && Number.isFinite(e.retryAfterMs)) return Math.max(0, e.retryAfterMs);
  if (typeof e?.retryAfter !== 'string' || e.retryAfter.trim() === '') return undefined;
  const seconds = Number(e.retryAfter);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(e.retryAfter);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}
