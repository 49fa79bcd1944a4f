export const DEDUP_METADATA = 'nest-prompt-orchestrator:dedup';
export const BREAKER_METADATA = 'nest-prompt-orchestrator:breaker';
export const CONCURRENCY_METADATA = 'nest-prompt-orchestrator:concurrency';
export const TIMEOUT_METADATA = 'nest-prompt-orchestrator:timeout';
export const RETRY_METADATA = 'nest-prompt-orchestrator:retry';

/** The request property under which the current call's AbortSignal is found (see `@CallSignal()`). */
export const CALL_SIGNAL = Symbol.for('nest-prompt-orchestrator.call-signal');

/** Response header telling how dedup answered: `miss`, `joined` or `cached`. */
export const DEDUP_HEADER = 'x-orchestrator-dedup';
