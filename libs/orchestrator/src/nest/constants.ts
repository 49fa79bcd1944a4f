import type { Capability } from '../core/policy.js';

/** Reflect metadata key of each capability's settings on a route or controller. */
export const METADATA: Readonly<Record<Capability, string>> = {
  dedup: 'nest-prompt-orchestrator:dedup',
  breaker: 'nest-prompt-orchestrator:breaker',
  concurrency: 'nest-prompt-orchestrator:concurrency',
  timeout: 'nest-prompt-orchestrator:timeout',
  retry: 'nest-prompt-orchestrator:retry',
};

/** The request property under which the current call's AbortSignal is found (see `@CallSignal()`). */
export const CALL_SIGNAL = Symbol.for('nest-prompt-orchestrator.call-signal');

/** The request property under which the upstream of a pool the current attempt goes to is found (see `callUpstreamOf`). */
export const CALL_UPSTREAM = Symbol.for('nest-prompt-orchestrator.call-upstream');

export { DEDUP_HEADER } from '../core/http/answer-headers.js';

/** DI token of the module's options (`OrchestratorModuleOptions`). */
export const ORCHESTRATOR_OPTIONS = Symbol.for('nest-prompt-orchestrator.options');

/** Reflect metadata key of a route's, method's or class's `@Fallback` answer. */
export const FALLBACK_METADATA = 'nest-prompt-orchestrator:fallback';
