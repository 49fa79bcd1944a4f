// The Nest adapter: the module, its decorators, the injectable service and the interceptor.
export { OrchestratorModule } from './nest/orchestrator.module.js';
export type { OrchestratorModuleOptions, OrchestratorModuleExtras } from './nest/orchestrator.module-definition.js';
export { OrchestratorService } from './nest/orchestrator.service.js';
export { OrchestratorInterceptor } from './nest/orchestrator.interceptor.js';
export {
  Dedup,
  CircuitBreaker,
  Concurrency,
  Timeout,
  CallTimeout,
  Retry,
  Orchestrate,
  CallSignal,
  callSignalOf,
} from './nest/orchestrate.decorators.js';
export { DEDUP_HEADER } from './nest/constants.js';
export { openAIErrorBody, errorHeaders, orchestratorHttpException, type OpenAIErrorBody } from './nest/http-errors.js';

// The framework-free engine, usable without Nest.
export {
  Orchestrator,
  type OrchestratorOptions,
  type OrchestratorHooks,
  type OrchestratorHealth,
  type RunOptions,
  type RunCall,
  type CallRequest,
  type Reuse,
  type StartedCall,
  type FlightSnapshot,
  hashIdentity,
} from './core/orchestrator.js';
export type { OrchestrateOptions, RoutePolicy } from './core/policy.js';
export type { CallWork } from './core/call.js';
export { OrchestratorConfigError } from './core/options.js';
export type { DedupOptions, DedupRequest } from './core/dedup/dedup.options.js';
export type { BreakerOptions, FailureRateOptions } from './core/breaker/breaker.options.js';
export type { ConcurrencyOptions } from './core/concurrency/concurrency.options.js';
export type { TimeoutOptions } from './core/timeout/timeout.options.js';
export type { RetryOptions } from './core/retry/retry.options.js';
export { StreamedResponse, RawResponse, type StreamHead, type CallEvent } from './core/events.js';
export {
  OrchestratorError,
  CircuitOpenError,
  OverloadedError,
  QueueTimeoutError,
  UpstreamTimeoutError,
  ClientClosedError,
  ShuttingDownError,
  isOrchestratorError,
  type OrchestratorErrorCode,
} from './core/errors.js';
export { isUpstreamFailure, isTransientFailure } from './core/breaker/failure-classifier.js';
export type { BreakerSnapshot, BreakerState } from './core/breaker/circuit-breaker.js';
export type { LimiterSnapshot } from './core/concurrency/concurrency.registry.js';
export type { DedupOutcome } from './core/dedup/single-flight.js';
export { dedupKey, BodyTooDeepError, type DedupKeyInput, type DedupKeyOptions } from './core/dedup/dedup-key.js';

// Replicas: one call and one breaker state across the fleet (optional; Redis through any node-redis-like client).
export {
  RemoteCallError,
  DEFAULT_ERROR_CODEC,
  type FlightCoordinator,
  type BreakerCoordinator,
  type SharedBreakerState,
  type ErrorCodec,
  type LeadClaim,
  type FollowClaim,
  type ClaimOptions,
} from './core/cluster/coordination.js';
// Building blocks of a coordinator of your own (over IPC, a message bus...): a call's events as they cross the wire.
export { toWire, fromWire, WireReader, errorToWire, leaderLost, type WireEvent } from './core/cluster/coordination.js';
export { RedisCoordinator, type RedisCoordinatorOptions, type RedisCommands, type RedisSubscriber } from './core/cluster/redis-coordinator.js';

// Observability: metrics (prom-client), event logs (pino-shaped), terminus-style health. Optional peers, loaded on use.
export {
  OrchestratorObservabilityModule,
  type OrchestratorObservabilityOptions,
  type OrchestratorHealthOptions,
} from './nest/observability/observability.module.js';
export { OrchestratorMetrics, type OrchestratorMetricsOptions, type MetricsRegistry } from './nest/observability/orchestrator-metrics.js';
export { logOrchestratorEvents, type StructuredLogger } from './nest/observability/orchestrator-event-log.js';
export {
  livenessReport,
  readinessReport,
  type HealthReport,
  type HealthIndicatorResult,
  type ReadinessOptions,
} from './nest/observability/orchestrator-health.js';
export type { OrchestratorObserver, RequestOutcome, RefusalReason, UpstreamResult } from './core/observer.js';

// Tracing: OpenTelemetry spans of requests and upstream calls (needs @opentelemetry/api, an optional peer).
export {
  RequestTracing,
  TRACE_ATTRIBUTES,
  NOOP_REQUEST_SPAN,
  attachRequestSpan,
  requestSpanOf,
  type RequestTracingOptions,
  type RequestSpan,
  type UpstreamSpan,
  type UpstreamSpanResult,
  type SpanAttributes,
  type SpanAttributeValue,
  type TraceHeaders,
} from './core/tracing/request-tracing.js';
export { parseTraceParent, formatTraceParent, type TraceParent } from './core/tracing/traceparent.js';
