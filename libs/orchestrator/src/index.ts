export { OrchestratorModule } from './orchestrator.module.js';
export { OrchestratorService } from './orchestrator.service.js';
export type { RunOptions, OrchestratorHealth, ResolvedPolicy } from './orchestrator.service.js';
export { OrchestratorInterceptor } from './orchestrator.interceptor.js';
export { Dedup, CircuitBreaker, Concurrency, Timeout, Retry, Orchestrate, CallSignal } from './orchestrate.decorators.js';
export type { OrchestrateOptions } from './orchestrate.options.js';
export {
  OrchestratorConfigError,
  type OrchestratorModuleOptions,
  type DedupOptions,
  type DedupRequest,
  type BreakerOptions,
  type ConcurrencyOptions,
  type TimeoutOptions,
  type RetryOptions,
} from './orchestrator.options.js';
export { DEDUP_HEADER } from './orchestrator.constants.js';
export { StreamedResponse, type StreamHead, type CallEvent } from './core/call-events.js';
export {
  OrchestratorError,
  CircuitOpenError,
  OverloadedError,
  QueueTimeoutError,
  UpstreamTimeoutError,
  ClientClosedError,
  isOrchestratorError,
  type OrchestratorErrorCode,
} from './core/orchestrator-errors.js';
export { openAIErrorBody, errorHeaders, type OpenAIErrorBody } from './http/error-response.js';
export { isUpstreamFailure, isTransientFailure } from './breaker/failure-classifier.js';
export type { BreakerSnapshot, BreakerState } from './breaker/circuit-breaker.js';
export type { LimiterSnapshot } from './concurrency/concurrency.registry.js';
export type { DedupOutcome } from './dedup/single-flight.js';
// Framework-free building blocks, usable without Nest.
export { CallPipeline, toCallEvents, type CallPolicy, type RetryPolicy, type CallWork, type StartedCall } from './core/call-pipeline.js';
export { CircuitBreaker as Breaker, type CircuitBreakerOptions } from './breaker/circuit-breaker.js';
export { BreakerRegistry } from './breaker/breaker.registry.js';
export { ConcurrencyLimiter, type ConcurrencyLimiterOptions } from './concurrency/concurrency-limiter.js';
export { ConcurrencyRegistry } from './concurrency/concurrency.registry.js';
export { SingleFlight } from './dedup/single-flight.js';
export { AnswerWindow, type WindowEntry } from './dedup/answer-window.js';
export { dedupKey, type DedupKeyInput } from './dedup/dedup-key.js';
export { withTimeLimits, type TimeLimits } from './timeout/time-limits.js';
