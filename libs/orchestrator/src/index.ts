// The Nest adapter: the module, its decorators, the injectable service and the interceptor.
export { OrchestratorModule } from './nest/orchestrator.module.js';
export type { OrchestratorModuleOptions, OrchestratorModuleExtras } from './nest/orchestrator.module-definition.js';
export { OrchestratorService } from './nest/orchestrator.service.js';
export { OrchestratorInterceptor } from './nest/orchestrator.interceptor.js';
export {
  Dedup,
  CircuitBreaker,
  Concurrency,
  CallTimeout,
  Timeout,
  Retry,
  Orchestrate,
  CallSignal,
  callSignalOf,
  callUpstreamOf,
  Fallback,
  type OrchestrateDecoratorOptions,
} from './nest/orchestrate.decorators.js';
export { orchestratorHttpException } from './nest/http-errors.js';

// Beyond HTTP: GraphQL resolvers, microservice and WebSocket handlers, provider methods.
/** The AbortSignal of the orchestrated call running now (provider methods, resolvers, message handlers). */
export { currentCallSignal } from './nest/contexts/call-scope.js';
/** A fallback answer: a value, or `(cause, ...args) => value`. */
export type { FallbackAnswer } from './nest/contexts/fallback.js';
/** What GraphQL, microservice and WebSocket callers get for an orchestrator error. */
export {
  OrchestratorGraphQLError,
  errorPayload as orchestratorErrorPayload,
  type OrchestratorErrorPayload,
} from './nest/contexts/context-errors.js';

// The framework-free engine and its types, as `nest-prompt-orchestrator/core` has them.
export * from './core/index.js';

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
} from './core/tracing/request-tracing.js';
/** Reads a W3C `traceparent` (e.g. `RequestSpan.traceparent`) into its trace and span ids, for log lines. */
export { parseTraceParent } from './core/tracing/traceparent.js';

// Observability: metrics (prom-client), event logs (pino-shaped), terminus-style health. Optional peers, loaded on use.
export {
  OrchestratorObservabilityModule,
  type OrchestratorObservabilityOptions,
  type OrchestratorHealthOptions,
} from './nest/observability/observability.module.js';
export {
  OrchestratorMetrics,
  type OrchestratorMetricsOptions,
  type MetricsRegistry,
} from './nest/observability/orchestrator-metrics.js';
/** prom-client metrics counted on every request without its per-call label hashing (what `OrchestratorMetrics` uses). */
export { TalliedCounter, BatchedHistogram, type Tally, type BucketTally } from './core/metrics/batched-metrics.js';
export { logOrchestratorEvents, type StructuredLogger } from './nest/observability/orchestrator-event-log.js';
export {
  livenessReport,
  readinessReport,
  type HealthReport,
  type HealthIndicatorResult,
  type ReadinessOptions,
} from './nest/observability/orchestrator-health.js';
