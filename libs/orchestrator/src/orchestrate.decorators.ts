import { SetMetadata, applyDecorators, createParamDecorator, type ExecutionContext } from '@nestjs/common';
import {
  BREAKER_METADATA,
  CALL_SIGNAL,
  CONCURRENCY_METADATA,
  DEDUP_METADATA,
  TIMEOUT_METADATA,
  RETRY_METADATA,
} from './orchestrator.constants.js';
import {
  normalizeBreaker,
  normalizeConcurrency,
  normalizeDedup,
  normalizeOrchestrate,
  normalizeTimeout,
  normalizeRetry,
  type OrchestrateOptions,
} from './orchestrate.options.js';
import type { BreakerOptions, ConcurrencyOptions, DedupOptions, RetryOptions, TimeoutOptions } from './orchestrator.options.js';

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
export const Dedup = (options: boolean | DedupOptions = true) =>
  SetMetadata(DEDUP_METADATA, normalizeDedup(options, '@Dedup()'));

/**
 * Guards the route with the named circuit breaker (default: one per controller
 * class): after consecutive failures, calls are refused at once with 503.
 *
 * @example `@CircuitBreaker('payments')` or `@CircuitBreaker({ name: 'payments', failureThreshold: 3 })`
 */
export const CircuitBreaker = (nameOrOptions: boolean | string | BreakerOptions = true) =>
  SetMetadata(BREAKER_METADATA, normalizeBreaker(nameOrOptions, '@CircuitBreaker()'));

/**
 * Limits calls in flight under a name (default: the controller class, or
 * `Class.method` for a route that sets its own limit), with a bounded wait queue. `@Concurrency(8)` or `@Concurrency({ name, limit, queueSize, maxWaitMs })`.
 */
export const Concurrency = (limitOrOptions: boolean | number | ConcurrencyOptions = true) =>
  SetMetadata(CONCURRENCY_METADATA, normalizeConcurrency(limitOrOptions, '@Concurrency()'));

/**
 * Time limit of the upstream call, in ms: total for a plain answer, first
 * chunk and idle gap for a stream. The call is aborted when it is exceeded.
 * `@Timeout(5_000)`, `@Timeout({ ms: 30_000, firstChunkMs: 5_000, idleMs: 10_000 })`, or
 * `@Timeout(true)` to use the module's `timeout` option.
 */
export const Timeout = (msOrOptions: boolean | number | TimeoutOptions) =>
  SetMetadata(TIMEOUT_METADATA, normalizeTimeout(msOrOptions, '@Timeout()'));

/**
 * Retries transient upstream failures (502/503/504, connection errors) before
 * the first chunk, with exponential back-off and full jitter. Each attempt is
 * measured by the breaker, and none is made while it is open.
 * `@Retry(2)` or `@Retry({ retries: 2, baseDelayMs: 200 })`.
 */
export const Retry = (retriesOrOptions: boolean | number | RetryOptions = true) =>
  SetMetadata(RETRY_METADATA, normalizeRetry(retriesOrOptions, '@Retry()'));

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
  const o = normalizeOrchestrate(options, '@Orchestrate()');
  const decorators = [];
  if (o.dedup !== undefined) decorators.push(SetMetadata(DEDUP_METADATA, o.dedup));
  if (o.breaker !== undefined) decorators.push(SetMetadata(BREAKER_METADATA, o.breaker));
  if (o.concurrency !== undefined) decorators.push(SetMetadata(CONCURRENCY_METADATA, o.concurrency));
  if (o.timeout !== undefined) decorators.push(SetMetadata(TIMEOUT_METADATA, o.timeout));
  if (o.retry !== undefined) decorators.push(SetMetadata(RETRY_METADATA, o.retry));
  return applyDecorators(...decorators);
};

/**
 * Injects the AbortSignal of the current upstream call: pass it to `fetch` so
 * that a timeout (or the call's cancellation) really stops the request. With
 * dedup, it belongs to the shared call, not to the one client.
 */
export const CallSignal = createParamDecorator((_: unknown, ctx: ExecutionContext): AbortSignal | undefined => {
  const request = ctx.switchToHttp().getRequest<Record<symbol, AbortSignal | undefined>>();
  return request[CALL_SIGNAL];
});
