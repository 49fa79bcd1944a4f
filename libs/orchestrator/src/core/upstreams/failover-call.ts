import { Observable, type Subscription } from 'rxjs';
import { guardedCall, type CallWork, type GuardedCallOptions } from '../call.js';
import { CircuitOpenError, NoUpstreamAvailableError } from '../errors.js';
import type { CallEvent } from '../events.js';
import type { ObserverHub } from '../observer.js';
import type { FailoverPlan, MemberTemplate, RoutePolicy } from '../policy.js';
import type { Upstream, UpstreamPool } from './upstream-pool.js';

// The plan types live beside `RoutePolicy` (they refer to each other), so the policy need not import this module.
export type { FailoverPlan, MemberTemplate } from '../policy.js';

/** The plan of a policy over `pool`: each member's policy made once, on the first call that goes there. */
export function planOver(pool: UpstreamPool, template: MemberTemplate): FailoverPlan {
  const shared = new WeakMap<Upstream, RoutePolicy>();
  const sole = new WeakMap<Upstream, RoutePolicy>();
  return {
    pool,
    template,
    policyOf(upstream, alone) {
      const retry = alone ? template.retry : undefined;
      const cache = retry ? sole : shared;
      let policy = cache.get(upstream);
      if (!policy) {
        policy = {
          ...template.base,
          retry,
          breaker: upstream.breaker,
          limiter: template.limited ? upstream.limiter : undefined,
          upstream,
        };
        cache.set(upstream, policy);
      }
      return policy;
    },
  };
}

/**
 * The guarded call of a policy: over its pool when it has several upstreams
 * (`failoverCall`), else the one guarded call, with nothing in between; held
 * first while no upstream it may go to is in rotation, when its pool says so
 * (`UpstreamPool.hold`).
 */
export function upstreamCall<T>(
  policy: RoutePolicy,
  work: CallWork<T>,
  options: GuardedCallOptions = {},
): Observable<CallEvent<T>> {
  const plan = policy.failover;
  const pool = plan?.pool ?? policy.upstream?.group;
  // The common case allocates nothing: no hold, or an upstream in rotation now.
  if (pool?.hold !== undefined && !pool.inRotation) {
    const call = () => (plan ? failoverCall(plan, work, options) : guardedCall(policy, work, options));
    const pools = plan?.fallbacks ? [pool, ...plan.fallbacks.map((f) => f.pool)] : [pool];
    if (!pools.some((p) => p.inRotation)) return heldCall(pools, options.observer, call);
  }
  return plan ? failoverCall(plan, work, options) : guardedCall(policy, work, options);
}

/**
 * `call` once one of `pools` has an upstream in rotation again. Until then it
 * waits, up to the first pool's hold, counted in that pool (`held`), then is
 * refused with `NoUpstreamAvailableError`: at once with a hold of 0, or when
 * the pool already holds as many calls as it may. The subscriber leaving (every
 * caller gone) ends the wait. An open breaker is not waited for: its upstream
 * is in rotation by health, and the call is refused by the breaker at once.
 */
function heldCall<T>(
  pools: readonly UpstreamPool[],
  observer: ObserverHub | undefined,
  call: () => Observable<CallEvent<T>>,
): Observable<CallEvent<T>> {
  const pool = pools[0];
  const ms = pool.hold!.ms;
  return new Observable<CallEvent<T>>((subscriber) => {
    const refuse = (heldMs: number) => {
      observer?.refused(pool.name, 'no_upstream_available');
      subscriber.error(new NoUpstreamAvailableError(pool.name, heldMs));
    };
    if (pools.some((p) => p.inRotation)) return call().subscribe(subscriber);
    if (ms === 0 || !pool.enterHold()) {
      refuse(0);
      return undefined;
    }
    let holding = true;
    let running: Subscription | undefined;
    const stops: Array<() => void> = [];
    const leave = (outcome: 'served' | 'expired' | 'left') => {
      holding = false;
      clearTimeout(timer);
      for (const stop of stops) stop();
      pool.leaveHold();
      observer?.held(pool.name, outcome);
    };
    // Node's timers take at most 2^31 - 1 ms; a longer hold would fire at once.
    const timer = setTimeout(
      () => {
        leave('expired');
        refuse(ms);
      },
      Math.min(ms, 2_147_483_647),
    );
    const check = () => {
      if (!holding || !pools.some((p) => p.inRotation)) return;
      leave('served');
      running = call().subscribe(subscriber);
    };
    for (const p of pools) stops.push(p.watchHealth(check));
    return () => {
      if (holding) leave('left');
      running?.unsubscribe();
    };
  });
}

/**
 * One call over a pool: the guarded call (breaker, slot, timed attempt) of
 * the first upstream in `pool.order()`, and while it fails before its first
 * byte with an error the pool fails over on, the next one's, each upstream at
 * most once. Once the pool has none left, the same goes on over each of the
 * plan's `fallbacks` in turn (each pool's order is taken when the call gets to
 * it: its load then, not at the start). Never after the first byte: from then
 * on the caller has part of one upstream's answer, and another's would not
 * continue it. A stream's head (its content type) is held back until its
 * first chunk, so that a failed attempt leaves no trace in what the caller sees.
 *
 * Each upstream's own breaker counts its own failures; the last error (or the
 * first that is not worth failing over on) is the call's.
 */
export function failoverCall<T>(
  plan: FailoverPlan,
  work: CallWork<T>,
  options: GuardedCallOptions = {},
): Observable<CallEvent<T>> {
  return new Observable<CallEvent<T>>((subscriber) => {
    const stages = plan.fallbacks ? [plan, ...plan.fallbacks] : [plan];
    let stage = 0;
    let order: Upstream[] = plan.pool.order();
    let next = 0;
    let answered = false;
    let attempt: Subscription | undefined;
    let left = false;
    /** Moves to the next member a new call may go to (one taken out of its pool meanwhile is passed over), stage after stage. */
    const advance = (): boolean => {
      for (;;) {
        while (next < order.length && !order[next].routable) next++;
        if (next < order.length) return true;
        if (stage + 1 >= stages.length) return false;
        stage++;
        order = stages[stage].pool.order();
        next = 0;
      }
    };
    const tryNext = (): void => {
      const current = stages[stage];
      const member = order[next++];
      let head: CallEvent<T> | undefined;
      attempt = guardedCall(current.policyOf(member, order.length === 1), work, options).subscribe({
        next: (event) => {
          if (answered) return subscriber.next(event);
          if (event.kind === 'head') {
            head = event;
            return;
          }
          answered = true;
          if (head) subscriber.next(head);
          subscriber.next(event);
        },
        error: (error: unknown) => {
          if (!answered && !left && current.pool.shouldFailover(error) && advance()) return tryNext();
          subscriber.error(error);
        },
        complete: () => {
          if (!answered && head) subscriber.next(head);
          subscriber.complete();
        },
      });
    };
    // Every member is out of its pool (removed, or added and not let in yet): refused, as an open breaker refuses.
    if (!advance()) subscriber.error(new CircuitOpenError(plan.pool.name, 1));
    else tryNext();
    return () => {
      left = true;
      attempt?.unsubscribe();
    };
  });
}

/**
 * A policy over `primary` (the pool its breaker names) that, when every upstream
 * of that pool failed before the first byte (or refused: breaker open, queue
 * full), goes on to the upstreams of `fallbacks`, in that order: e.g. another
 * provider's deployment of a model when one provider is down. Everything but
 * where the calls go is the policy's own (dedup, time limits): identical
 * requests still share one flight, whichever pool serves it. Across pools,
 * failing over is the retry: a fallback's attempt is not repeated on the
 * upstream that just failed it (a sole primary upstream keeps the retries it
 * had). Without fallbacks, the policy as it is.
 */
export function withFallbacks(
  policy: RoutePolicy,
  primary: UpstreamPool,
  fallbacks: readonly UpstreamPool[],
): RoutePolicy {
  if (fallbacks.length === 0) return policy;
  if (policy.failover ? policy.failover.pool !== primary : policy.upstream !== primary.members[0]) {
    throw new Error(`withFallbacks: policy "${policy.name}" does not send its calls to pool "${primary.name}"`);
  }
  // Where the calls go is the plan's: the chain itself has no breaker, limiter or upstream of its own.
  const {
    breaker: _breaker,
    limiter: _limiter,
    upstream: _upstream,
    retry: _retry,
    failover: _failover,
    ...rest
  } = policy;
  const own: FailoverPlan = policy.failover ?? {
    pool: primary,
    template: { base: rest, limited: policy.limiter !== undefined, retry: policy.retry },
    // A pool of one fixed member: its policy as it is (with the retries it had).
    policyOf: () => policy,
  };
  const template: MemberTemplate = { ...own.template, retry: undefined };
  const plans = fallbacks.map((pool) => planOver(pool, template));
  return { ...rest, failover: { ...own, fallbacks: plans } };
}
