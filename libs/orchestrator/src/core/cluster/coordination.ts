import type { Observable } from 'rxjs';
import type { BreakerState } from '../breaker/breaker-state.js';
import { OrchestratorError, isOrchestratorError, type OrchestratorErrorCode } from '../errors.js';
import type { CallEvent } from '../events.js';

/**
 * How replicas of one app share what would otherwise be per process: one
 * upstream call for identical requests across the fleet, and one breaker
 * state. One protocol relays a call from its leader to its followers (`relay.ts`), over Redis or IPC; without
 * a coordinator everything works per replica.
 */

/** This replica won the call: run it, and every event goes out to the replicas that follow it. */
export interface LeadClaim {
  role: 'lead';
  /** Wraps the call's events: each is published as it passes, the end (or the error) last; the lease is held meanwhile. */
  publish<T>(events: Observable<CallEvent<T>>): Observable<CallEvent<T>>;
}

/** Another replica runs the call: its events, from the first, then live; on its death, a takeover (or an error). */
export interface FollowClaim<T> {
  role: 'follow';
  events: Observable<CallEvent<T>>;
  /** The leader's span (a W3C `traceparent`) when it was traced and told with its claim: joiners here link to it. */
  leader?: string;
}

/** What a claim may carry besides its key. */
export interface ClaimOptions {
  /** This request's span (a W3C `traceparent`): if it wins, replicas that follow it link their requests to it. */
  trace?: string;
}

export interface FlightCoordinator {
  /**
   * Claims the one call for `key` across the fleet. `undefined` when
   * coordination is unavailable right now (the store is down): the replica
   * then acts alone. `lead` is what a follower runs if the leader dies before
   * anything reached its callers.
   */
  claim<T>(
    key: string,
    lead: () => Observable<CallEvent<T>>,
    options?: ClaimOptions,
  ): Promise<LeadClaim | FollowClaim<T> | undefined>;
  /** Whether coordination works right now (`degraded`: each replica acts alone), for health reports. */
  health?(): { state: 'ok' | 'degraded'; error?: string };
}

/** A breaker transition another replica made, to apply here. */
export interface SharedBreakerState {
  state: Extract<BreakerState, 'open' | 'closed'>;
  /** For `open`: how long the breaker stays open before its next probe. */
  openMs?: number;
  /**
   * For `open`: it opened on the upstream's own failures while its health route answered (a partial outage), so the
   * health probe cannot close it; only the half-open request can.
   */
  probeBlind?: boolean;
}

export interface BreakerCoordinator {
  /** Counts one upstream failure fleet-wide; resolves with the fleet's current run of consecutive failures. */
  countFailure(name: string): Promise<number | undefined>;
  /** A success ends the fleet's run of failures (only called when one may be running). */
  resetFailures(name: string): Promise<void>;
  /** Tells the fleet this replica opened or closed the breaker. */
  announce(name: string, state: SharedBreakerState): Promise<void>;
  /** What other replicas announce, and the state the fleet is in right now (for a replica that starts late). */
  watch(name: string, onChange: (state: SharedBreakerState) => void): Promise<SharedBreakerState | undefined>;
  /** Whether this replica is the one that probes the upstream while the breaker is open (one prober per fleet). */
  isProber(name: string): Promise<boolean>;
}

/** An error from another replica's call, as much of it as crosses the wire. */
export class RemoteCallError extends Error {
  override name = 'RemoteCallError';

  constructor(
    message: string,
    readonly status?: number,
    readonly code?: string,
  ) {
    super(message);
  }
}

/**
 * An orchestrator error another replica's call ended with (its time limit, its breaker, its queue), as its followers
 * answer it: the same code, status, message, `Retry-After` and retry advice as the leader's callers got.
 */
export class RelayedOrchestratorError extends OrchestratorError {
  override name = 'RelayedOrchestratorError';

  constructor(
    readonly code: OrchestratorErrorCode,
    readonly status: number,
    readonly type: string,
    message: string,
    override readonly retryAfterSeconds: number | undefined,
    override readonly retryable: boolean,
  ) {
    super(message);
  }
}

/**
 * The orchestrator errors a follower is given as they are. Not a caller hanging up: that is the leader's own
 * caller's affair (its followers take the call over), never an answer to send.
 */
const RELAYED_CODES: ReadonlySet<string> = new Set<OrchestratorErrorCode>([
  'circuit_open',
  'overloaded',
  'queue_timeout',
  'upstream_timeout',
  'shutting_down',
  'no_upstream_available',
]);

/** A message crosses the wire bounded (never a stack: only `message` is read). */
const MAX_MESSAGE = 1_000;

/** Turns errors into what crosses the wire and back; an app can carry more of its own errors (see the gateway). */
export interface ErrorCodec {
  encode(error: unknown): Record<string, unknown>;
  decode(data: Record<string, unknown>): Error;
}

export const DEFAULT_ERROR_CODEC: ErrorCodec = {
  encode(error) {
    const e = error as { message?: unknown; status?: unknown; statusCode?: unknown };
    const message =
      typeof e?.message === 'string' ? e.message.slice(0, MAX_MESSAGE) : 'The call failed on another replica.';
    if (isOrchestratorError(error)) {
      // `o` marks the fields a follower needs to answer as the leader did; `message`, `status` and `code` alone are
      // what a replica of an earlier version reads.
      const retryAfter = error.retryAfterSeconds;
      return {
        message,
        status: error.status,
        code: error.code,
        o: { type: error.type, retryable: error.retryable, ...(retryAfter === undefined ? {} : { retryAfter }) },
      };
    }
    const status =
      typeof e?.status === 'number' ? e.status : typeof e?.statusCode === 'number' ? e.statusCode : undefined;
    const code = codeOf(error);
    return { message, ...(status !== undefined ? { status } : {}), ...(code !== undefined ? { code } : {}) };
  },
  decode(data) {
    const message = String(data.message ?? 'The call failed on another replica.').slice(0, MAX_MESSAGE);
    const status =
      typeof data.status === 'number' && Number.isInteger(data.status) && data.status >= 400 && data.status <= 599
        ? data.status
        : undefined;
    const code = typeof data.code === 'string' ? data.code : undefined;
    const o = data.o as { type?: unknown; retryable?: unknown; retryAfter?: unknown } | undefined;
    if (o && status !== undefined && code !== undefined && RELAYED_CODES.has(code) && typeof o.type === 'string') {
      const retryAfter =
        typeof o.retryAfter === 'number' && Number.isFinite(o.retryAfter) && o.retryAfter >= 0
          ? o.retryAfter
          : undefined;
      return new RelayedOrchestratorError(
        code as OrchestratorErrorCode,
        status,
        o.type.slice(0, 100),
        message,
        retryAfter,
        o.retryable === true,
      );
    }
    return new RemoteCallError(message, status, code);
  },
};

/**
 * The error's code (`ECONNRESET`, ...), from it or the first of its causes that has one: a connection error wrapped
 * by the HTTP client is still one on the follower's side.
 */
function codeOf(error: unknown): string | undefined {
  let cause: unknown = error;
  for (let depth = 0; depth < 4 && typeof cause === 'object' && cause !== null; depth++) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === 'string') return code.slice(0, 100);
    cause = (cause as { cause?: unknown }).cause;
  }
  return undefined;
}
