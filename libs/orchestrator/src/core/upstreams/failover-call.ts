import { Observable, type Subscription } from 'rxjs';
import { guardedCall, type CallWork, type GuardedCallOptions } from '../call.js';
import type { CallEvent } from '../events.js';
import type { RoutePolicy } from '../policy.js';
import type { Upstream, UpstreamPool } from './upstream-pool.js';

/** How a policy spreads its calls over a pool of upstreams: the pool, and the policy of each member (by index). */
export interface FailoverPlan {
  readonly pool: UpstreamPool;
  readonly policies: readonly RoutePolicy[];
}

/**
 * The guarded call of a policy: over its pool when it has several upstreams
 * (`failoverCall`), else the one guarded call, with nothing in between.
 */
export function upstreamCall<T>(policy: RoutePolicy, work: CallWork<T>, options: GuardedCallOptions = {}): Observable<CallEvent<T>> {
  return policy.failover ? failoverCall(policy.failover, work, options) : guardedCall(policy, work, options);
}

/**
 * One call over a pool: the guarded call (breaker, slot, timed attempt) of
 * the first upstream in `pool.order()`, and while it fails before its first
 * byte with an error the pool fails over on, the next one's, each upstream at
 * most once. Never after the first byte: from then on the caller has part of
 * one upstream's answer, and another's would not continue it. A stream's head
 * (its content type) is held back until its first chunk, so that a failed
 * attempt leaves no trace in what the caller sees.
 *
 * Each upstream's own breaker counts its own failures; the last error (or the
 * first that is not worth failing over on) is the call's.
 */
export function failoverCall<T>(plan: FailoverPlan, work: CallWork<T>, options: GuardedCallOptions = {}): Observable<CallEvent<T>> {
  return new Observable<CallEvent<T>>((subscriber) => {
    const order: Upstream[] = plan.pool.order();
    let next = 0;
    let answered = false;
    let attempt: Subscription | undefined;
    let left = false;
    const tryNext = (): void => {
      const member = order[next++];
      let head: CallEvent<T> | undefined;
      attempt = guardedCall(plan.policies[member.index], work, options).subscribe({
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
          if (!answered && !left && next < order.length && plan.pool.shouldFailover(error)) return tryNext();
          subscriber.error(error);
        },
        complete: () => {
          if (!answered && head) subscriber.next(head);
          subscriber.complete();
        },
      });
    };
    tryNext();
    return () => {
      left = true;
      attempt?.unsubscribe();
    };
  });
}
