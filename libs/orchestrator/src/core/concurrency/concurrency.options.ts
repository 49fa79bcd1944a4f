import type { Fields } from '../options.js';
import type { AdaptiveLimitOptions } from './adaptive-limit.js';

export interface ConcurrencyOptions {
  /**
   * Limiter name: calls under one name share the limit. Default: the controller's class name, or
   * `Class.method` for a route whose own decorator sets a limit (or other settings).
   */
  name?: string;
  /** Calls in flight at once; with `adaptive`, the most the learnt limit may reach. Default 16. */
  limit?: number;
  /**
   * Learn the limit from the upstream's latency, 429s and 503s (see
   * `AdaptiveLimit`), up to `limit`. Default off: the limit is fixed.
   */
  adaptive?: boolean | AdaptiveLimitOptions;
  /** Callers allowed to wait; more are refused at once with 429. Default 1 000. */
  queueSize?: number;
  /** Longest wait for a slot in ms, then 429. Default 60 000. */
  maxWaitMs?: number;
  /** `Retry-After` seconds sent with an overload refusal. Default 1. */
  retryAfterSeconds?: number;
  /**
   * Slots one tenant may hold at once (the tenant is `dedup.tenant`'s identity).
   * Default: no cap of its own; the wait queue is shared fairly across tenants either way.
   */
  perTenantLimit?: number;
  /** Share the wait queue across tenants in turn (true), or serve it first come, first served (false). Default true. */
  fairQueue?: boolean;
  /**
   * Calls kept running after every caller left (so their answer lands in the
   * window) run in a budget of their own, apart from the callers' slots; past it,
   * an abandoned call is cancelled. Default: a quarter of `limit`, at least 1.
   */
  detachedLimit?: number;
}

export const CONCURRENCY_FIELDS = {
  name: { check: 'string' },
  limit: { check: 'positiveInt', default: 16 },
  adaptive: { check: 'booleanOrObject' },
  queueSize: { check: 'nonNegativeInt', default: 1_000 },
  maxWaitMs: { check: 'positive', default: 60_000 },
  retryAfterSeconds: { check: 'positiveInt', default: 1 },
  perTenantLimit: { check: 'positiveInt' },
  fairQueue: { check: 'boolean', default: true },
  detachedLimit: { check: 'nonNegativeInt' },
} as const satisfies Fields<ConcurrencyOptions>;
