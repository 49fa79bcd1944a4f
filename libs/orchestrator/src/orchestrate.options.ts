import {
  OrchestratorConfigError,
  validateBreakerOptions,
  validateConcurrencyOptions,
  validateDedupOptions,
  validateTimeoutOptions,
  validateRetryOptions,
  type RetryOptions,
  type BreakerOptions,
  type ConcurrencyOptions,
  type DedupOptions,
  type TimeoutOptions,
} from './orchestrator.options.js';

/** What one route, class or `OrchestratorService.run` call asks for; `false` turns a capability off. */
export interface OrchestrateOptions {
  dedup?: boolean | DedupOptions;
  /** A breaker name, or its options. */
  breaker?: boolean | string | BreakerOptions;
  /** A limit, or the limiter's options. */
  concurrency?: boolean | number | ConcurrencyOptions;
  /** Milliseconds, or the time limits. */
  timeout?: boolean | number | TimeoutOptions;
  /** Retries of transient failures before the first chunk: a count, or the options. */
  retry?: boolean | number | RetryOptions;
}

/** Each capability's options in one shape; `false` = off, `undefined` = not asked for here. */
export interface NormalizedOrchestrateOptions {
  dedup?: false | DedupOptions;
  breaker?: false | BreakerOptions;
  concurrency?: false | ConcurrencyOptions;
  timeout?: false | Partial<TimeoutOptions>;
  retry?: false | RetryOptions;
}

export function normalizeDedup(value: OrchestrateOptions['dedup'], where: string): false | DedupOptions | undefined {
  if (value === undefined) return undefined;
  if (value === false) return false;
  const options = value === true ? {} : value;
  validateDedupOptions(`${where} dedup`, options);
  return options;
}

export function normalizeBreaker(value: OrchestrateOptions['breaker'], where: string): false | BreakerOptions | undefined {
  if (value === undefined) return undefined;
  if (value === false) return false;
  const options = value === true ? {} : typeof value === 'string' ? { name: value } : value;
  validateBreakerOptions(`${where} breaker`, options);
  return options;
}

export function normalizeConcurrency(
  value: OrchestrateOptions['concurrency'],
  where: string,
): false | ConcurrencyOptions | undefined {
  if (value === undefined) return undefined;
  if (value === false) return false;
  const options = value === true ? {} : typeof value === 'number' ? { limit: value } : value;
  validateConcurrencyOptions(`${where} concurrency`, options);
  return options;
}

export function normalizeTimeout(value: OrchestrateOptions['timeout'], where: string): false | Partial<TimeoutOptions> | undefined {
  if (value === undefined) return undefined;
  if (value === false) return false;
  // `true` takes the duration from the module's `timeout` option, checked when the route is resolved.
  const options = value === true ? {} : typeof value === 'number' ? { ms: value } : value;
  validateTimeoutOptions(`${where} timeout`, options, false);
  return options;
}

export function normalizeRetry(value: OrchestrateOptions['retry'], where: string): false | RetryOptions | undefined {
  if (value === undefined) return undefined;
  if (value === false) return false;
  const options = value === true ? {} : typeof value === 'number' ? { retries: value } : value;
  validateRetryOptions(`${where} retry`, options);
  return options;
}

const KNOWN = ['dedup', 'breaker', 'concurrency', 'timeout', 'retry'];

export function normalizeOrchestrate(options: OrchestrateOptions, where: string): NormalizedOrchestrateOptions {
  if (typeof options !== 'object' || options === null) {
    throw new OrchestratorConfigError(`${where} options must be an object`);
  }
  for (const key of Object.keys(options)) {
    if (!KNOWN.includes(key)) throw new OrchestratorConfigError(`unknown option ${where} ${key} (known: ${KNOWN.join(', ')})`);
  }
  return {
    dedup: normalizeDedup(options.dedup, where),
    breaker: normalizeBreaker(options.breaker, where),
    concurrency: normalizeConcurrency(options.concurrency, where),
    timeout: normalizeTimeout(options.timeout, where),
    retry: normalizeRetry(options.retry, where),
  };
}
