import type { BreakerRegistry } from '../breaker/breaker.registry.js';
import type { ConcurrencyRegistry } from '../concurrency/concurrency.registry.js';
import { Upstream, UpstreamPool, type UpstreamSnapshot } from './upstream-pool.js';
import type { UpstreamPoolOptions } from './upstreams.options.js';

/** The pools of upstreams of an orchestrator, built on first use from its breakers and limiters. */
export class UpstreamRegistry {
  private readonly pools = new Map<string, UpstreamPool>();

  /** @internal */
  constructor(
    private readonly options: Record<string, UpstreamPoolOptions> = {},
    private readonly breakers: BreakerRegistry,
    private readonly limiters: ConcurrencyRegistry,
  ) {}

  /** The pool of that name, or `undefined` when none is configured under it. */
  get(name: string): UpstreamPool | undefined {
    let pool = this.pools.get(name);
    if (pool) return pool;
    const options = this.options[name];
    if (!options) return undefined;
    const members = options.members.map(
      (m, index) => new Upstream(m.name, name, index, m.target, this.breakers.get(m.name), this.limiters.get(m.name)),
    );
    pool = new UpstreamPool(name, members, options.shouldFailover, options.hold);
    this.pools.set(name, pool);
    return pool;
  }

  /** Every configured pool (built if it was not yet). */
  all(): UpstreamPool[] {
    return Object.keys(this.options).map((name) => this.get(name)!);
  }

  snapshot(): UpstreamSnapshot[] {
    return this.all().flatMap((pool) => pool.snapshot());
  }
}
