/**
 * `nest-prompt-orchestrator/core`: the framework-free engine (dedup, circuit
 * breakers, concurrency limits, timeouts and retries), for scripts, queue
 * workers and servers without Nest: it needs none of Nest's packages.
 */
export {
  Orchestrator,
  type OrchestratorOptions,
  type OrchestratorHooks,
  type OrchestratorHealth,
  type RunOptions,
  type RunCall,
  type FlightSnapshot,
} from './orchestrator.js';
export type { OrchestrateOptions, RoutePolicy } from './policy.js';
export {
  Upstream,
  UpstreamPool,
  defaultShouldFailover,
  type UpstreamHealth,
  type UpstreamHold,
  type UpstreamSnapshot,
} from './upstreams/upstream-pool.js';
export type { UpstreamRegistry } from './upstreams/upstream.registry.js';
export type { UpstreamPoolOptions, UpstreamMemberOptions } from './upstreams/upstreams.options.js';
export { AdaptiveLimit, type AdaptiveLimitOptions, type Clock } from './concurrency/adaptive-limit.js';
export { OrchestratorConfigError } from './options.js';
export type { DedupOptions, DedupRequest } from './dedup/dedup.options.js';
export type { BreakerOptions, FailureRateOptions } from './breaker/breaker.options.js';
export type { ConcurrencyOptions } from './concurrency/concurrency.options.js';
export type { TimeoutOptions } from './timeout/timeout.options.js';
export type { RetryOptions } from './retry/retry.options.js';
export { StreamedResponse, RawResponse, type StreamHead } from './events.js';
export {
  OrchestratorError,
  CircuitOpenError,
  OverloadedError,
  QueueTimeoutError,
  UpstreamTimeoutError,
  ClientClosedError,
  ShuttingDownError,
  NoUpstreamAvailableError,
  isOrchestratorError,
  type OrchestratorErrorCode,
} from './errors.js';
export { isUpstreamFailure, isTransientFailure } from './breaker/failure-classifier.js';
export type { BreakerSnapshot, BreakerState } from './breaker/circuit-breaker.js';
export type { LimiterSnapshot } from './concurrency/concurrency.registry.js';
export type { DedupOutcome } from './dedup/single-flight.js';
export type { OrchestratorObserver, RequestOutcome, RefusalReason, HoldOutcome, UpstreamResult } from './observer.js';

// HTTP answers, for servers that wire the engine themselves (the Fastify plugin and the Express middleware do).
export {
  errorBody,
  errorHeaders,
  type ErrorShape,
  type ErrorBody,
  type NestErrorBody,
  type OpenAIErrorBody,
} from './http/errors.js';

// Replicas: one call and one breaker state across the fleet (optional; Redis through any node-redis-like client).
export type { FlightCoordinator, BreakerCoordinator } from './cluster/coordination.js';
// What crosses between replicas: `RedisCoordinatorOptions.errorCodec` carries an app's own errors, and a call led by
// another replica fails with a `RemoteCallError` when no codec knows its error.
export {
  RemoteCallError,
  DEFAULT_ERROR_CODEC,
  type ErrorCodec,
  type SharedBreakerState,
} from './cluster/coordination.js';
// A late joiner refused a stream no longer kept for joiners (it outgrew `maxEntryBytes`, here or in the fleet).
export { FlightOutgrownError } from './dedup/single-flight.js';
export {
  RedisCoordinator,
  type RedisCoordinatorOptions,
  type RedisCommands,
  type RedisSubscriber,
} from './cluster/redis-coordinator.js';

// Tracing: OpenTelemetry spans of requests and upstream calls (needs @opentelemetry/api, an optional peer).
export {
  RequestTracing,
  TRACE_ATTRIBUTES,
  attachRequestSpan,
  type RequestTracingOptions,
  type RequestSpan,
  type UpstreamSpan,
  type SpanAttributes,
  type SpanAttributeValue,
  type TraceHeaders,
} from './tracing/request-tracing.js';
/** Reads a W3C `traceparent` (e.g. `RequestSpan.traceparent`) into its trace and span ids, for log lines. */
export { parseTraceParent } from './tracing/traceparent.js';

// Observability: metrics (prom-client) and event logs (pino-shaped). Optional peers, loaded on use.
export {
  OrchestratorMetrics,
  type OrchestratorMetricsOptions,
  type MetricsRegistry,
} from './metrics/orchestrator-metrics.js';
/** prom-client metrics counted on every request without its per-call label hashing (what `OrchestratorMetrics` uses). */
export { TalliedCounter, BatchedHistogram, type Tally, type BucketTally } from './metrics/batched-metrics.js';
export { logOrchestratorEvents, type StructuredLogger } from './metrics/orchestrator-event-log.js';
