import type { BreakerState } from './breaker/circuit-breaker.js';
import type { StoreState } from './dedup/answer-window.js';
import type { DedupOutcome } from './dedup/single-flight.js';
import type { UpstreamTimeoutError } from './errors.js';

/** How a request under a policy was answered: a dedup outcome, or `none` when it was not deduplicated. */
export type RequestOutcome = DedupOutcome | 'none';

/** Why a call was answered without reaching the upstream. */
export type RefusalReason = 'circuit_open' | 'overloaded' | 'queue_timeout' | 'shutting_down' | 'no_upstream_available';

/**
 * How a call held for an upstream to come into rotation left the hold: one came back (`served`: the call goes on),
 * the hold ran out (`expired`: refused), or every caller left (`left`).
 */
export type HoldOutcome = 'served' | 'expired' | 'left';

/** How one attempt at the upstream ended: it answered (its first byte), it failed, or it ran out of time. */
export type UpstreamResult = 'ok' | 'error' | 'timeout';

/**
 * What the orchestrator tells whoever watches it (metrics, logs, a status
 * page). Every method is optional and gets plain values only, so that
 * observing costs no allocation. `upstream` is the breaker's name (else the
 * limiter's, else the policy's): the thing being protected. `route` is the
 * policy's name.
 *
 * Methods run synchronously on the request's path: keep them cheap (count,
 * push to a buffer) and never throw.
 */
export interface OrchestratorObserver {
  /** A request was started under a policy, and how it is answered. */
  request?(route: string, upstream: string, outcome: RequestOutcome): void;
  /**
   * A breaker changed state (`at`: epoch ms). `remote`: this replica applied another's change (a shared breaker,
   * `--workers` or a fleet): the change was made, counted and logged where it was decided.
   */
  breakerTransition?(name: string, from: BreakerState, to: BreakerState, at: number, remote?: boolean): void;
  /** A call was refused without reaching the upstream. */
  refused?(upstream: string, reason: RefusalReason): void;
  /** An attempt timed out (before its first byte, or a stream stalled). */
  timedOut?(upstream: string, phase: UpstreamTimeoutError['phase']): void;
  /** An attempt is retried (after its back-off). */
  retried?(upstream: string): void;
  /** A call got its concurrency slot after `ms` (0 when one was free at once). */
  queueWait?(upstream: string, ms: number): void;
  /** A call held while no upstream of `pool` was in rotation left the hold (see `UpstreamPoolOptions.hold`). */
  held?(pool: string, outcome: HoldOutcome): void;
  /** An attempt at the upstream ended, `ms` after it started (to its first event: a value, or a stream's first chunk). */
  upstreamCall?(upstream: string, ms: number, result: UpstreamResult): void;
  /** The answer window's shared store became unreachable (`degraded`, once per outage) or is back (`ok`). */
  storeState?(state: StoreState, error?: string): void;
}

/**
 * Fans events out to the observers. The orchestrator holds one only while
 * somebody observes (`undefined` otherwise), so that an unobserved
 * orchestrator pays one property check per event and nothing else. An
 * observer that throws is skipped for that event; it never breaks a call.
 */
export class ObserverHub implements Required<OrchestratorObserver> {
  private observers: OrchestratorObserver[] = [];

  get size(): number {
    return this.observers.length;
  }

  add(observer: OrchestratorObserver): void {
    this.observers = [...this.observers, observer];
  }

  remove(observer: OrchestratorObserver): void {
    this.observers = this.observers.filter((o) => o !== observer);
  }

  request(route: string, upstream: string, outcome: RequestOutcome): void {
    for (const o of this.observers) {
      try {
        o.request?.(route, upstream, outcome);
      } catch {
        // An observer's bug never breaks a call.
      }
    }
  }

  breakerTransition(name: string, from: BreakerState, to: BreakerState, at: number, remote = false): void {
    for (const o of this.observers) {
      try {
        o.breakerTransition?.(name, from, to, at, remote);
      } catch {
        // An observer's bug never breaks a call.
      }
    }
  }

  refused(upstream: string, reason: RefusalReason): void {
    for (const o of this.observers) {
      try {
        o.refused?.(upstream, reason);
      } catch {
        // An observer's bug never breaks a call.
      }
    }
  }

  timedOut(upstream: string, phase: UpstreamTimeoutError['phase']): void {
    for (const o of this.observers) {
      try {
        o.timedOut?.(upstream, phase);
      } catch {
        // An observer's bug never breaks a call.
      }
    }
  }

  retried(upstream: string): void {
    for (const o of this.observers) {
      try {
        o.retried?.(upstream);
      } catch {
        // An observer's bug never breaks a call.
      }
    }
  }

  queueWait(upstream: string, ms: number): void {
    for (const o of this.observers) {
      try {
        o.queueWait?.(upstream, ms);
      } catch {
        // An observer's bug never breaks a call.
      }
    }
  }

  held(pool: string, outcome: HoldOutcome): void {
    for (const o of this.observers) {
      try {
        o.held?.(pool, outcome);
      } catch {
        // An observer's bug never breaks a call.
      }
    }
  }

  upstreamCall(upstream: string, ms: number, result: UpstreamResult): void {
    for (const o of this.observers) {
      try {
        o.upstreamCall?.(upstream, ms, result);
      } catch {
        // An observer's bug never breaks a call.
      }
    }
  }

  storeState(state: StoreState, error?: string): void {
    for (const o of this.observers) {
      try {
        o.storeState?.(state, error);
      } catch {
        // An observer's bug never breaks a call.
      }
    }
  }
}
