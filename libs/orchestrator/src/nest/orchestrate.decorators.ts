import { SetMetadata, UseFilters, applyDecorators, createParamDecorator, type ExecutionContext } from '@nestjs/common';
import type { BreakerOptions } from '../core/breaker/breaker.options.js';
import type { ConcurrencyOptions } from '../core/concurrency/concurrency.options.js';
import type { DedupOptions } from '../core/dedup/dedup.options.js';
import {
  CAPABILITIES,
  normalizeBreaker,
  normalizeConcurrency,
  normalizeDedup,
  normalizeOrchestrate,
  normalizeRetry,
  normalizeTimeout,
  type OrchestrateOptions,
} from '../core/policy.js';
import type { RetryOptions } from '../core/retry/retry.options.js';
import type { TimeoutOptions } from '../core/timeout/timeout.options.js';
import { CALL_SIGNAL, CALL_UPSTREAM, FALLBACK_METADATA, METADATA } from './constants.js';
import { OrchestratorModuleCheck } from './route-check.js';
import { currentCallSignal } from './contexts/call-scope.js';
import { normalizeFallback, type FallbackAnswer } from './contexts/fallback.js';
import type { Upstream } from '../core/upstreams/upstream-pool.js';

/**
 * Writes a capability's settings, and registers the start-up check that warns
 * when the app does not import `OrchestratorModule` (see `OrchestratorModuleCheck`).
 */
function setting(key: string, value: unknown) {
  return applyDecorators(SetMetadata(key, value), UseFilters(OrchestratorModuleCheck));
}

/**
 * Identical concurrent requests share one call. Finished answers of GET, HEAD
 * and OPTIONS routes are reused for a window; on POST and the other methods
 * only when the route asks for it with `windowMs` (or `cacheAnswers: true`),
 * since replaying them would skip their side effect. `@Dedup(false)` turns it
 * off for a route of a deduplicated class.
 *
 * @example
 * ```ts
 * @Post('summaries') @Dedup({ windowMs: 60_000 })
 * summarize(@Body() body: SummaryRequest) { ... }
 * ```
 */
export const Dedup = (options: boolean | DedupOptions = true) =>
  setting(METADATA.dedup, normalizeDedup(options, '@Dedup()'));

/**
 * Guards the route with a circuit breaker: after consecutive failures, calls
 * are refused at once with 503. Each route has its own (named
 * `Controller.handler`) unless a name is given: routes that give the same name
 * share one breaker, and must then give it the same settings (or none, and set
 * them in the module's `breakers` option); otherwise start-up fails.
 *
 * @example `@CircuitBreaker('payments')` or `@CircuitBreaker({ name: 'payments', failureThreshold: 3 })`
 */
export const CircuitBreaker = (nameOrOptions: boolean | string | BreakerOptions = true) =>
  setting(METADATA.breaker, normalizeBreaker(nameOrOptions, '@CircuitBreaker()'));

/**
 * Limits calls in flight (`limit`: calls running at once, not requests per
 * period as in @nestjs/throttler), with a bounded wait queue. Each route has
 * its own limiter (`Controller.handler`) unless a name is given; routes sharing
 * a name must agree on its settings (or set them in the module's `limits`).
 * `@Concurrency(8)` or `@Concurrency({ name, limit, queueSize, maxWaitMs })`.
 */
export const Concurrency = (limitOrOptions: boolean | number | ConcurrencyOptions = true) =>
  setting(METADATA.concurrency, normalizeConcurrency(limitOrOptions, '@Concurrency()'));

/**
 * Time limit of the upstream call, in ms: total for a plain answer, first
 * chunk and idle gap for a stream. The call is aborted when it is exceeded.
 * `@CallTimeout(5_000)`, `@CallTimeout({ ms: 30_000, firstChunkMs: 5_000, idleMs: 10_000 })`, or
 * `@CallTimeout(true)` to use the module's `timeout` option.
 */
export const CallTimeout = (msOrOptions: boolean | number | TimeoutOptions) =>
  setting(METADATA.timeout, normalizeTimeout(msOrOptions, '@CallTimeout()'));

/**
 * The same decorator as `@CallTimeout`, under its earlier name. Prefer
 * `@CallTimeout`: `@Timeout` clashes with `@nestjs/schedule`'s decorator of
 * that name (a different thing: it runs a method once after a delay).
 */
export const Timeout = CallTimeout;

/**
 * Retries transient upstream failures (502/503/504, connection errors) before
 * the first chunk, with exponential back-off and full jitter. Each attempt is
 * measured by the breaker, and none is made while it is open.
 * `@Retry(2)` or `@Retry({ retries: 2, baseDelayMs: 200 })`.
 */
export const Retry = (retriesOrOptions: boolean | number | RetryOptions = true) =>
  setting(METADATA.retry, normalizeRetry(retriesOrOptions, '@Retry()'));

/** What `@Orchestrate` takes: the capabilities, and the answer when the call cannot give one (see `@Fallback`). */
export interface OrchestrateDecoratorOptions extends OrchestrateOptions {
  fallback?: FallbackAnswer;
}

/**
 * All in one decorator. Their order of effect is fixed whatever the order
 * written: dedup, breaker refusal, concurrency slot, timed call.
 *
 * @example
 * ```ts
 * @Orchestrate({ dedup: true, breaker: 'openai', concurrency: 16, timeout: 30_000, fallback: { answer: null } })
 * ```
 */
export const Orchestrate = (options: OrchestrateDecoratorOptions) => {
  const { fallback, ...capabilities } = options ?? {};
  const settings = normalizeOrchestrate(
    options === null || typeof options !== 'object' ? options : capabilities,
    '@Orchestrate()',
  );
  return applyDecorators(
    ...CAPABILITIES.filter((c) => settings[c] !== undefined).map((c) => SetMetadata(METADATA[c], settings[c])),
    ...('fallback' in (options ?? {})
      ? [SetMetadata(FALLBACK_METADATA, normalizeFallback(fallback, '@Orchestrate() fallback'))]
      : []),
    UseFilters(OrchestratorModuleCheck),
  );
};

/**
 * What the call answers when it cannot answer itself: the breaker is open,
 * the time limit passed, the concurrency queue refused it, or the call failed
 * with a server-side error (5xx-class, or an error without a status). Never for
 * the caller's own mistakes: a 4xx `HttpException` (validation errors
 * included), an `RpcException` or `WsException` the handler threw, or a
 * GraphQL error whose code says the input is wrong propagate as they are.
 *
 * The handler gets the cause and the arguments: a provider method's own
 * arguments, and for a route, resolver or message handler the arguments Nest
 * gives interceptors (`context.getArgs()`: `[request, response, next]` over
 * HTTP, `[data, context]` for microservices, `[client, data, pattern]` for
 * WebSockets, `[root, args, context, info]` for GraphQL).
 *
 * @example
 * ```ts
 * @CircuitBreaker('openai') @Fallback((cause, docId: string) => ({ docId, summary: null, degraded: true }))
 * async summarize(docId: string) { ... }
 * ```
 */
export const Fallback = (answer: FallbackAnswer) =>
  setting(FALLBACK_METADATA, normalizeFallback(answer, '@Fallback()'));

/**
 * Injects the AbortSignal of the current upstream call: pass it to `fetch` so
 * that a timeout (or the call's cancellation) really stops the request. With
 * dedup, it belongs to the shared call, not to the one client.
 *
 * The interceptor puts the signal on the request just before it subscribes to
 * the handler, and Nest resolves handler parameters at that subscription
 * (`next.handle()` defers the handler call), so the parameter sees it. In a
 * GraphQL resolver, a microservice or a WebSocket handler it is the call's
 * `currentCallSignal()`.
 */
export const CallSignal = createParamDecorator((_: unknown, ctx: ExecutionContext): AbortSignal | undefined =>
  ctx.getType() === 'http' ? callSignalOf(ctx.switchToHttp().getRequest<object>()) : currentCallSignal(),
);

/** What `@CallSignal()` injects, for code that has the request at hand (e.g. a parameter decorator of its own). */
export function callSignalOf(request: object): AbortSignal | undefined {
  return (request as Record<symbol, AbortSignal | undefined>)[CALL_SIGNAL];
}

/**
 * The upstream of a pool the current attempt goes to (a route whose breaker
 * names a pool, see `OrchestratorOptions.upstreams`), for the handler to send
 * its request there; `undefined` on other routes.
 */
export function callUpstreamOf<Target = unknown>(request: object): Upstream<Target> | undefined {
  return (request as Record<symbol, Upstream<Target> | undefined>)[CALL_UPSTREAM];
}
