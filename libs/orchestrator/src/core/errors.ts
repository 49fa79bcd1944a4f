/**
 * Errors the orchestrator itself produces. Each carries a stable `code` (used in
 * the OpenAI-shaped error body), the HTTP status it maps to, and, where waiting
 * would help, how many seconds a client should wait before trying again.
 *
 * They are branded rather than checked with `instanceof` alone, so that two
 * copies of the package in one process (a common npm accident) still recognise
 * each other's errors.
 */
const BRAND = Symbol.for('nest-prompt-orchestrator.error');

export type OrchestratorErrorCode =
  | 'circuit_open'
  | 'overloaded'
  | 'queue_timeout'
  | 'upstream_timeout'
  | 'shutting_down'
  | 'no_upstream_available'
  | 'client_closed_request';

export abstract class OrchestratorError extends Error {
  readonly [BRAND] = true;
  abstract readonly code: OrchestratorErrorCode;
  /** HTTP status that answers this error. */
  abstract readonly status: number;
  /** OpenAI error `type`. */
  abstract readonly type: string;
  /** Seconds until retrying makes sense; sent as `Retry-After` when set. */
  readonly retryAfterSeconds?: number;
  /**
   * Whether the client should try again on its own. Most of these errors say
   * no (`x-should-retry: false`): the orchestrator already decided. A replica
   * shutting down says yes: another one will answer.
   */
  readonly retryable: boolean = false;
}

export function isOrchestratorError(value: unknown): value is OrchestratorError {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
}

/** The breaker is open (or half-open with its single probe already out): refused without calling. */
export class CircuitOpenError extends OrchestratorError {
  readonly code = 'circuit_open' as const;
  readonly status = 503;
  readonly type = 'circuit_open';
  constructor(
    readonly breaker: string,
    override readonly retryAfterSeconds: number,
  ) {
    super(
      `The upstream "${breaker}" is failing; requests are refused for about ${retryAfterSeconds} s while it recovers.`,
    );
    this.name = 'CircuitOpenError';
  }
}

/** The concurrency queue is full: answered at once rather than queued without bound. */
export class OverloadedError extends OrchestratorError {
  readonly code = 'overloaded' as const;
  readonly status = 429;
  readonly type = 'overloaded';
  constructor(
    readonly limiter: string,
    override readonly retryAfterSeconds: number,
  ) {
    super(`Too many requests are waiting for "${limiter}"; try again in about ${retryAfterSeconds} s.`);
    this.name = 'OverloadedError';
  }
}

/** A request waited its maximum time for a concurrency slot. */
export class QueueTimeoutError extends OrchestratorError {
  readonly code = 'queue_timeout' as const;
  readonly status = 429;
  readonly type = 'overloaded';
  constructor(
    readonly limiter: string,
    readonly waitedMs: number,
    override readonly retryAfterSeconds: number,
  ) {
    super(`No slot for "${limiter}" became free within ${waitedMs} ms; try again in about ${retryAfterSeconds} s.`);
    this.name = 'QueueTimeoutError';
  }
}

/** The upstream did not answer (or stalled mid-stream) within its time limit. */
export class UpstreamTimeoutError extends OrchestratorError {
  readonly code = 'upstream_timeout' as const;
  readonly status = 504;
  readonly type = 'timeout';
  constructor(
    readonly phase: 'total' | 'first_chunk' | 'idle',
    readonly limitMs: number,
  ) {
    super(
      phase === 'total'
        ? `The upstream did not answer within ${limitMs} ms.`
        : phase === 'first_chunk'
          ? `The upstream sent no data within ${limitMs} ms.`
          : `The upstream stream stalled for more than ${limitMs} ms.`,
    );
    this.name = 'UpstreamTimeoutError';
  }
}

/**
 * No upstream of a pool is in rotation (each one's health check says it is
 * down or loading) and none came back within the pool's hold: refused without
 * calling any, with the time worth waiting before trying again.
 */
export class NoUpstreamAvailableError extends OrchestratorError {
  readonly code = 'no_upstream_available' as const;
  readonly status = 503;
  readonly type = 'service_unavailable';
  override readonly retryAfterSeconds: number;
  constructor(
    readonly pool: string,
    /** How long the call waited for one (0: refused at once). */
    readonly heldMs: number,
  ) {
    // Whatever kept the upstreams out (a model loading, a restart) is likely to take about as long again.
    const retryAfter = Math.max(1, Math.ceil(heldMs / 1000));
    super(
      heldMs > 0
        ? `No upstream of "${pool}" came into rotation within ${heldMs} ms (each is down or loading); try again in about ${retryAfter} s.`
        : `No upstream of "${pool}" is in rotation (each is down or loading); try again in about ${retryAfter} s.`,
    );
    this.retryAfterSeconds = retryAfter;
    this.name = 'NoUpstreamAvailableError';
  }
}

/** The app is shutting down: calls in flight finish, new ones are refused so that the client retries elsewhere. */
export class ShuttingDownError extends OrchestratorError {
  readonly code = 'shutting_down' as const;
  readonly status = 503;
  readonly type = 'service_unavailable';
  override readonly retryable = true;
  override readonly retryAfterSeconds = 1;
  constructor() {
    super('This server is shutting down; try again (another instance will answer).');
    this.name = 'ShuttingDownError';
  }
}

/** The caller went away; nothing is sent, but the pipeline unwinds with this reason. */
export class ClientClosedError extends OrchestratorError {
  readonly code = 'client_closed_request' as const;
  readonly status = 499;
  readonly type = 'client_closed_request';
  constructor() {
    super('The client closed the request.');
    this.name = 'ClientClosedError';
  }
}
