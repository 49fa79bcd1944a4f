import { withDefaults } from '../options.js';
import { CONCURRENCY_FIELDS, type ConcurrencyOptions } from './concurrency.options.js';
import { ConcurrencyLimiter } from './concurrency-limiter.js';

export interface LimiterSnapshot {
  name: string;
  /** Calls allowed in flight right now. */
  limit: number;
  /** How the limit is set: the upstream's own capacity (slots), learnt from latency, or fixed. */
  mode: 'capacity' | 'adaptive' | 'fixed';
  /** The most the limit can be. */
  ceiling: number;
  inFlight: number;
  queued: number;
  /** Calls allowed to wait at once (more are refused as overloaded). */
  queueSize: number;
  /** Calls still running with no caller left (in their own budget). */
  detached: number;
}

/** The concurrency limiters of a process, one per name; settings fixed at first use. */
export class ConcurrencyRegistry {
  private readonly limiters = new Map<string, ConcurrencyLimiter>();

  constructor(
    private readonly defaults: ConcurrencyOptions = {},
    private readonly named: Record<string, ConcurrencyOptions> = {},
  ) {}

  get(name: string, overrides: ConcurrencyOptions = {}): ConcurrencyLimiter {
    return this.limiters.get(name) ?? this.replace(name, overrides);
  }

  /** A new limiter under that name, which `get` returns from now on (see `BreakerRegistry.replace`). */
  replace(name: string, overrides: ConcurrencyOptions = {}): ConcurrencyLimiter {
    const o = withDefaults(CONCURRENCY_FIELDS, this.defaults, this.named[name], overrides);
    const limiter = new ConcurrencyLimiter(name, {
      ...o,
      detachedLimit: o.detachedLimit ?? Math.max(1, Math.ceil(o.limit / 4)),
    });
    this.limiters.set(name, limiter);
    return limiter;
  }

  /** Forgets a limiter whose upstream is gone (its calls have ended), unless another has taken its name since. */
  release(limiter: ConcurrencyLimiter): void {
    if (this.limiters.get(limiter.name) === limiter) this.limiters.delete(limiter.name);
  }

  snapshot(): LimiterSnapshot[] {
    return [...this.limiters.values()].map((l) => ({
      name: l.name,
      limit: l.limit,
      mode: l.mode,
      ceiling: l.ceiling,
      inFlight: l.inFlight,
      queued: l.queued,
      queueSize: l.queueSize,
      detached: l.detachedInFlight,
    }));
  }
}
