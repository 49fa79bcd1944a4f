import { SetMetadata, applyDecorators, createParamDecorator, type ExecutionContext } from '@nestjs/common';
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
import { CALL_SIGNAL, CALL_UPSTREAM, METADATA } from './constants.js';
import type { Upstream } from '../core/upstreams/upstream-pool.js';

/**
 * Identical concurrent requests share one call; finished answers are reused
 * for a window. `@Dedup(false)` turns it off for a route of a deduplicated class.
 *
 * @example
 * ```ts
 * @Post('summaries') @Dedup({ windowMs: 60_000 })
 * summarize(@Body() body: SummaryRequest) { ... }
 * ```
 */
export const Dedup = (options: boolean | DedupOptions = true) => SetMetadata(METADATA.dedup, normalizeDedup(options, '@Dedup()'));

/**
 * Guards the route with the named circuit breaker (default: one per controller
 * class): after consecutive failures, calls are refused at once with 503.
 *
 * @example `@CircuitBreaker('payments')` or `@CircuitBreaker({ name: 'payments', failureThreshold: 3 })`
 */
export const CircuitBreaker = (nameOrOptions: boolean | string | BreakerOptions = true) =>
  SetMetadata(METADATA.breaker, normalizeBreaker(nameOrOptions, '@CircuitBreaker()'));

/**
 * Limits calls in flight under a name (default: the controller class, or
 * `Class.method` for a route that sets its own limit), with a bounded wait
 * queue. `@Concurrency(8)` or `@Concurrency({ name, limit, queueSize, maxWaitMs })`.
 */
export const Concurrency = (limitOrOptions: boolean | number | ConcurrencyOptions = true) =>
  SetMetadata(METADATA.concurrency, normalizeConcurrency(limitOrOptions, '@Concurrency()'));

/**
 * Time limit of the upstream call, in ms: total for a plain answer, first
 * chunk and idle gap for a stream. The call is aborted when it is exceeded.
 * `@Timeout(5_000)`, `@Timeout({ ms: 30_000, firstChunkMs: 5_000, idleMs: 10_000 })`, or
 * `@Timeout(true)` to use the module's `timeout` option.
 * Also exported as `@CallTimeout`, for apps that use `@nestjs/schedule`'s `@Timeout`.
 */
export const Timeout = (msOrOptions: boolean | number | TimeoutOptions) =>
  SetMetadata(METADATA.timeout, normalizeTimeout(msOrOptions, '@Timeout()'));

/** `@Timeout` under a name that does not clash with `@nestjs/schedule`'s. */
export const CallTimeout = Timeout;

/**
 * Retries transient upstream failures (502/503/504, connection errors) before
 * the first chunk, with exponential back-off and full jitter. Each attempt is
 * measured by the breaker, and none is made while it is open.
 * `@Retry(2)` or `@Retry({ retries: 2, baseDelayMs: 200 })`.
 */
export const Retry = (retriesOrOptions: boolean | number | RetryOptions = true) =>
  SetMetadata(METADATA.retry, normalizeRetry(retriesOrOptions, '@Retry()'));

/**
 * All in one decorator. Their order of effect is fixed whatever the order
 * written: dedup, breaker refusal, concurrency slot, timed call.
 *
 * @example
 * ```ts
 * @Orchestrate({ dedup: true, breaker: 'openai', concurrency: 16, timeout: 30_000 })
 * ```
 */
export const Orchestrate = (options: OrchestrateOptions) => {
  const settings = normalizeOrchestrate(options, '@Orchestrate()');
  return applyDecorators(
    ...CAPABILITIES.filter((c) => settings[c] !== undefined).map((c) => SetMetadata(METADATA[c], settings[c])),
  );
};

/**
 * Injects the AbortSignal of the current upstream call: pass it to `fetch` so
 * that a timeout (or the call's cancellation) really stops the request. With
 * dedup, it belongs to the shared call, not to the one client.
 *
 * The interceptor puts the signal on the request just before it subscribes to
 * the handler, and Nest resolves handler parameters at that subscription
 * (`next.handle()` defers the handler call), so the parameter sees it.
 */
export const CallSignal = createParamDecorator((_: unknown, ctx: ExecutionContext): AbortSignal | undefined =>
  callSignalOf(ctx.switchToHttp().getRequest<object>()),
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
