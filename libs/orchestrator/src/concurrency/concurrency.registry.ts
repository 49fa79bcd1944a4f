import { DEFAULT_CONCURRENCY, type ConcurrencyOptions } from '../orchestrator.options.js';
import { ConcurrencyLimiter } from './concurrency-limiter.js';

export interface LimiterSnapshot {
  name: string;
  limit: number;
  inFlight: number;
  queued: number;
}

/** The concurrency limiters of a process, one per name; settings fixed at first use. */
export class ConcurrencyRegistry {
  private readonly limiters = new Map<string, ConcurrencyLimiter>();

  constructor(
    private readonly defaults: ConcurrencyOptions = {},
    private readonly named: Record<string, ConcurrencyOptions> = {},
  ) {}

  get(name: string, overrides: ConcurrencyOptions = {}): ConcurrencyLimiter {
    let limiter = this.limiters.get(name);
    if (!limiter) {
      const o = { ...this.defaults, ...this.named[name], ...overrides };
      limiter = new ConcurrencyLimiter(name, {
        limit: o.limit ?? DEFAULT_CONCURRENCY.limit,
        queueSize: o.queueSize ?? DEFAULT_CONCURRENCY.queueSize,
        maxWaitMs: o.maxWaitMs ?? DEFAULT_CONCURRENCY.maxWaitMs,
        retryAfterSeconds: o.retryAfterSeconds ?? DEFAULT_CONCURRENCY.retryAfterSeconds,
      });
      this.limiters.set(name, limiter);
    }
    return limiter;
  }

  snapshot(): LimiterSnapshot[] {
    return [...this.limiters.values()].map((l) => ({ name: l.name, limit: l.limit, inFlight: l.inFlight, queued: l.queued }));
  }
}
