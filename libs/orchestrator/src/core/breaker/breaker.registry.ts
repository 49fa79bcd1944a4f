import type { BreakerCoordinator } from '../cluster/coordination.js';
import { withDefaults } from '../options.js';
import { BREAKER_FIELDS, FAILURE_RATE_FIELDS, type BreakerOptions } from './breaker.options.js';
import { CircuitBreaker, type BreakerSnapshot, type BreakerState } from './circuit-breaker.js';
import { isUpstreamFailure } from './failure-classifier.js';

/**
 * The breakers of a process, one per upstream name. A breaker's settings are
 * fixed when it is first used: defaults, then the module's `breaker`, then
 * the module's `breakers[name]`, then the decorator's own.
 */
export class BreakerRegistry {
  private readonly breakers = new Map<string, CircuitBreaker>();
  private transitions?: (name: string, from: BreakerState, to: BreakerState, at: number, remote: boolean) => void;

  constructor(
    private readonly defaults: BreakerOptions = {},
    private readonly named: Record<string, BreakerOptions> = {},
    /** Shares every breaker's state across the app's replicas. */
    private readonly fleet?: BreakerCoordinator,
  ) {}

  get(name: string, overrides: BreakerOptions = {}): CircuitBreaker {
    return this.breakers.get(name) ?? this.replace(name, overrides);
  }

  /**
   * A new breaker under that name, which `get` returns from now on: an upstream added at run time starts with a
   * history of its own, even where one of that name is still finishing its calls (and keeps its own breaker).
   */
  replace(name: string, overrides: BreakerOptions = {}): CircuitBreaker {
    const o = withDefaults(BREAKER_FIELDS, this.defaults, this.named[name], overrides);
    const breaker = new CircuitBreaker(
      name,
      {
        ...o,
        failureRate: o.failureRate && withDefaults(FAILURE_RATE_FIELDS, o.failureRate),
        isFailure: o.isFailure ?? isUpstreamFailure,
      },
      this.fleet,
    );
    breaker.onTransition = this.transitions;
    this.breakers.set(name, breaker);
    return breaker;
  }

  /** Shuts a breaker down (its upstream is gone) and forgets it, unless another has taken its name since. */
  release(breaker: CircuitBreaker): void {
    breaker.shutdown();
    if (this.breakers.get(breaker.name) === breaker) this.breakers.delete(breaker.name);
  }

  /** Tells `listener` of every breaker's changes of state, those created later included (`undefined`: nobody). */
  onTransition(
    listener: ((name: string, from: BreakerState, to: BreakerState, at: number, remote: boolean) => void) | undefined,
  ): void {
    this.transitions = listener;
    for (const breaker of this.breakers.values()) breaker.onTransition = listener;
  }

  /** The breaker of that name, if it was ever used. */
  find(name: string): CircuitBreaker | undefined {
    return this.breakers.get(name);
  }

  snapshot(): BreakerSnapshot[] {
    return [...this.breakers.values()].map((breaker) => breaker.snapshot());
  }

  shutdown(): void {
    for (const breaker of this.breakers.values()) breaker.shutdown();
    this.breakers.clear();
  }
}
