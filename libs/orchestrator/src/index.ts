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

// Observability in Nest: metrics at a route, event logs and terminus-style health (the metrics and event logs
// themselves are the core's, above).
export {
  OrchestratorObservabilityModule,
  type OrchestratorObservabilityOptions,
  type OrchestratorHealthOptions,
} from './nest/observability/observability.module.js';
export {
  livenessReport,
  readinessReport,
  type HealthReport,
  type HealthIndicatorResult,
  type ReadinessOptions,
} from './nest/observability/orchestrator-health.js';
