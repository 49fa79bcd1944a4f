import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { DedupOutcome, RequestSpan } from 'nest-prompt-orchestrator/core';
import type { ClientApi, GatewayRoute } from '../providers/provider.js';
import type { Usage } from '../budgets/prices.js';
import type { Hold, ScopedCap } from '../budgets/spend-ledger.js';

const REQUEST_CONTEXT = Symbol('gateway.request-context');

/** What one upstream call used, and cost (USD in billionths). */
export interface Settled {
  usage: Usage;
  costNano: number;
}

/**
 * What the request that leads a call tells the requests that reuse its answer
 * (the call's `CallRequest.tag`): the few fields of its body that features
 * read, so that they need not read their own, and, once the answer is in,
 * what the call used and cost, so that what they saved is known. Kept with
 * the flight and with the answer in the window (plain data: a shared store
 * holds it too), one object for every request that shares the answer.
 */
export interface CallTag {
  readonly body: Record<string, unknown>;
  settled?: Settled;
}

/** Per-request facts the gateway keeps, set once and read wherever they are needed. */
export interface RequestContext {
  id: string;
  /** The id came from the client (`x-request-id`): it is the client's text, redacted before it is logged. */
  idGiven?: boolean;
  /** performance.now() at arrival. */
  startedAt: number;
  /** The route that matched (set by the guard; absent for a request no route serves). */
  route?: GatewayRoute;
  /** The API the client speaks: the format of every error it gets. Until a route matched, OpenAI's. */
  api: ClientApi;
  /** Who the caller is: the one credential that names it (see `identityOf`), hashed by the plugin before any use. */
  identity?: string;
  /** The request's dedup key, computed in the same walk as the body's depth check (absent: not deduplicated). */
  dedupKey?: string;
  /** A short hash (12 base64url characters) of `identity`: how logs, metrics and rate limits name the caller. */
  tenantHash?: string;
  /** The virtual key's name, when keys are on. */
  keyName?: string;
  /** What the request's rates are counted under (the key's name, else the caller's hash). */
  rateKey?: string;
  /** The request's hash (method, URL, credential, body), computed whether or not it is deduplicated. */
  requestHash?: string;
  /** The spend caps this request is under (set on admission; absent: none). */
  caps?: ScopedCap[];
  /** Money held against those caps while this request's own upstream call is in flight. */
  hold?: Hold;
  /** Usage and price of this request's own upstream call, once its answer ended. */
  settled?: Settled;
  /**
   * The call's tag (see `CallTag`): this request's own when it leads its call, its leader's when it joined the call
   * or replayed its answer (absent when the leader gave none, e.g. another replica's).
   */
  tag?: CallTag;
  /** What a reused answer's call used, read from the answer itself when its tag did not say (see `CallTag.settled`). */
  reusedUsage?: Usage;
  /** When this request's own upstream call started (absent if it joined another or was answered from the window). */
  upstreamStartedAt?: number;
  /** The pool member its last attempt went to, when there are several (its breaker is the request line's). */
  upstream?: string;
  /**
   * The model its last attempt asked for, when a fallback group was asked for another than the client's: what its
   * usage is priced as, and what the request line says served it.
   */
  servedModel?: string;
  /** When the provider's response headers arrived. */
  upstreamAnsweredAt?: number;
  /** When the first chunk of a streamed answer was written to this client (its time to first token). */
  firstChunkAt?: number;
  /** What the provider said when it refused or failed this request's call (redacted, bounded): the root cause, for the log. */
  upstreamErrorBody?: string;
  /** The parsed request body (set by the guard): its model for metrics, and the prompt only if the operator asked. */
  body?: unknown;
  /** Tokens the provider reported for this request's own call. */
  usage?: Usage;
  /** The error code this request was answered with (set where errors are rendered). */
  errorCode?: string;
  /** How dedup answered it (absent: not deduplicated). */
  outcome?: DedupOutcome;
  /** The request's server span (with tracing on): started on arrival, ended with the response. */
  span?: RequestSpan;
}

/**
 * A request's context with every field there from the start: contexts then share one shape, and the many places
 * that read them (the data plane, the telemetry, the budgets) read each field at one fixed place instead of
 * looking it up among the shapes that fields added in different orders would make.
 */
export function newContext(
  id: string,
  idGiven: boolean,
  api: ClientApi,
  route: GatewayRoute | undefined,
): RequestContext {
  return {
    id,
    idGiven,
    startedAt: performance.now(),
    route,
    api,
    identity: undefined,
    dedupKey: undefined,
    tenantHash: undefined,
    keyName: undefined,
    rateKey: undefined,
    requestHash: undefined,
    caps: undefined,
    hold: undefined,
    settled: undefined,
    tag: undefined,
    reusedUsage: undefined,
    upstreamStartedAt: undefined,
    upstream: undefined,
    servedModel: undefined,
    upstreamAnsweredAt: undefined,
    firstChunkAt: undefined,
    upstreamErrorBody: undefined,
    body: undefined,
    usage: undefined,
    errorCode: undefined,
    outcome: undefined,
    span: undefined,
  };
}

// A propagated id is echoed in headers and logs: accept only a short, plain token.
const REQUEST_ID = /^[\w.:-]{1,128}$/;

/** The request's id and whether the client gave it: its `x-request-id` when that is a short, plain token, else a new one. */
export function requestIdOf(headers: IncomingHttpHeaders): { id: string; given: boolean } {
  const incoming = headers['x-request-id'];
  return typeof incoming === 'string' && REQUEST_ID.test(incoming)
    ? { id: incoming, given: true }
    : { id: randomUUID(), given: false };
}

type WithContext = IncomingMessage & { [REQUEST_CONTEXT]?: RequestContext; raw?: WithContext };

export function attachContext(request: IncomingMessage, context: RequestContext): void {
  (request as WithContext)[REQUEST_CONTEXT] = context;
}

/** The context of a Node request, or of the Node request under a Fastify one. */
export function contextOf(request: unknown): RequestContext {
  const r = request as WithContext;
  const context = r[REQUEST_CONTEXT] ?? r.raw?.[REQUEST_CONTEXT];
  if (!context) throw new Error('request context missing: RequestContextMiddleware did not run');
  return context;
}

/** The context if the middleware ran (it has not for a request rejected before routing). */
export function findContext(request: unknown): RequestContext | undefined {
  const r = request as WithContext;
  return r[REQUEST_CONTEXT] ?? r.raw?.[REQUEST_CONTEXT];
}

/** `Server-Timing`: time queued (dedup, breaker check, concurrency slot), time upstream, and total. */
export function serverTiming(context: RequestContext, now: number): string {
  const total = `total;dur=${(now - context.startedAt).toFixed(1)}`;
  const upstreamAt = context.upstreamStartedAt;
  if (upstreamAt === undefined) return total;
  return `queue;dur=${(upstreamAt - context.startedAt).toFixed(1)}, upstream;dur=${((context.upstreamAnsweredAt ?? now) - upstreamAt).toFixed(1)}, ${total}`;
}

/** A URL's path, without its query string (which may carry anything), bounded: what logs and spans may name. */
export function pathOfUrl(url: string | undefined): string {
  const path = url ?? '';
  const end = path.indexOf('?');
  return (end < 0 ? path : path.slice(0, end)).slice(0, 200);
}
