import type { BreakerOptions } from '../breaker/breaker.options.js';
import type { BreakerRegistry } from '../breaker/breaker.registry.js';
import type { ConcurrencyOptions } from '../concurrency/concurrency.options.js';
import type { ConcurrencyRegistry } from '../concurrency/concurrency.registry.js';
import { defaultShouldFailover, Upstream, UpstreamPool, type UpstreamSnapshot } from './upstream-pool.js';
import type { UpstreamMemberOptions, UpstreamPoolOptions } from './upstreams.options.js';

/** What a member added at run time is given beyond its name and target. */
export interface AddedMemberOptions {
  /** Its breaker's settings, over the module's `breaker` (and `breakers[name]`). */
  breaker?: BreakerOptions;
  /** Its limiter's settings, over the module's `concurrency` (and `limits[name]`). */
  concurrency?: ConcurrencyOptions;
  /** When the pool does not exist yet, it is made (dynamic) with this failover test. Default: `defaultShouldFailover`. */
  shouldFailover?: (error: unknown) => boolean;
}

/** The pools of upstreams of an orchestrator, built on first use from its breakers and limiters. */
export class UpstreamRegistry {
  private readonly pools = new Map<string, UpstreamPool>();
  /** Pools configured but not built yet (built on first use, so that their breakers exist once something uses them). */
  private readonly configured: Map<string, UpstreamPoolOptions>;

  /** @internal */
  constructor(
    options: Record<string, UpstreamPoolOptions> = {},
    private readonly breakers: BreakerRegistry,
    private readonly limiters: ConcurrencyRegistry,
  ) {
    this.configured = new Map(Object.entries(options));
  }

  /** The pool of that name, or `undefined` when none is configured under it. */
  get(name: string): UpstreamPool | undefined {
    let pool = this.pools.get(name);
    if (pool) return pool;
    const options = this.configured.get(name);
    if (!options) return undefined;
    this.configured.delete(name);
    const members = options.members.map(
      (m, index) => new Upstream(m.name, name, index, m.target, this.breakers.get(m.name), this.limiters.get(m.name)),
    );
    pool = new UpstreamPool(name, members, options.shouldFailover, options.hold, options.dynamic === true);
    this.pools.set(name, pool);
    return pool;
  }

  /** Every pool (built if it was not yet). */
  all(): UpstreamPool[] {
    for (const name of [...this.configured.keys()]) this.get(name);
    return [...this.pools.values()];
  }

  snapshot(): UpstreamSnapshot[] {
    return this.all().flatMap((pool) => pool.snapshot());
  }

  /**
   * Adds a member to a dynamic pool (made when there is none of that name), with a breaker and a limiter of its
   * own, new even when a member of that name is still draining. It waits out of rotation until a health check
   * says it is up (`Upstream.setHealth`). `index` is its place in the order of preference (default: last).
   */
  add(pool: string, member: UpstreamMemberOptions & { index?: number }, options: AddedMemberOptions = {}): Upstream {
    let found = this.get(pool);
    if (!found) {
      found = new UpstreamPool(pool, [], options.shouldFailover ?? defaultShouldFailover, undefined, true);
      this.pools.set(pool, found);
    }
    const index = member.index ?? found.members.reduce((n, m) => Math.max(n, m.index + 1), 0);
    const upstream = new Upstream(
      member.name,
      pool,
      index,
      member.target,
      this.breakers.replace(member.name, options.breaker),
      this.limiters.replace(member.name, options.concurrency),
    );
    found.add(upstream);
    return upstream;
  }

  /**
   * Takes a member out of a dynamic pool: no new calls from now on. Resolves once its calls under way have ended
   * and its breaker and limiter are released (a pool left without members is forgotten). Resolves at once when
   * the pool has no such member.
   */
  async remove(pool: string, name: string): Promise<void> {
    const found = this.pools.get(pool) ?? this.get(pool);
    const member = found?.member(name);
    const drained = found?.remove(name);
    if (!found || !member || !drained) return;
    await drained;
    this.breakers.release(member.breaker);
    this.limiters.release(member.limiter);
    if (found.members.length === 0 && this.pools.get(pool) === found) this.pools.delete(pool);
  }
}
