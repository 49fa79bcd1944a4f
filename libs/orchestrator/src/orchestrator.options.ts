import type { Keyv } from 'keyv';

/** The request as the dedup key function sees it. */
export interface DedupRequest {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
}

export interface DedupOptions {
  /** How long a finished answer is reused, in ms. Default 300 000 (5 min). */
  windowMs?: number;
  /** Keep finished answers at all; `false` only merges calls in flight. Default true. */
  cacheAnswers?: boolean;
  /** Most answers the in-memory window keeps (LRU). Default 10 000. */
  maxEntries?: number;
  /** Answers larger than this many characters are not kept. Default 1 048 576. */
  maxEntryBytes?: number;
  /**
   * Cancel a call once every caller waiting for it has gone. Default false: the
   * call runs to completion and lands in the window, so a retry is answered
   * from it. A call still queued for a slot is always cancelled.
   */
  cancelWhenAbandoned?: boolean;
  /**
   * Replaces the default key (SHA-256 of method, URL, canonical body and the
   * caller's credential). Return `undefined` to skip deduplication for a request.
   */
  key?: (request: DedupRequest) => string | undefined;
  /**
   * The caller's identity, hashed into the default key. Default: the
   * `authorization` header, else `x-api-key`.
   */
  credential?: (request: DedupRequest) => string | undefined;
}

export interface BreakerOptions {
  /** Breaker name: one breaker per upstream. Default: the controller's class name. */
  name?: string;
  /** Consecutive failures that open the breaker. Default 5. */
  failureThreshold?: number;
  /** First open period in ms; doubled after each failed probe. Default 60 000. */
  openMs?: number;
  /** Cap of that doubling, as a multiple of `openMs`. Default 64. */
  maxOpenMultiplier?: number;
  /** Also open when more than `thresholdPercent` of calls in `windowMs` fail (opossum's mode). Off by default. */
  failureRate?: { thresholdPercent: number; minimumCalls?: number; windowMs?: number };
  /**
   * Run every `probeIntervalMs` while open; resolving (to anything but `false`)
   * closes the breaker at once. The gateway probes the provider's health route.
   */
  healthProbe?: (signal: AbortSignal) => Promise<unknown>;
  /** Default 500 ms. */
  probeIntervalMs?: number;
  /** Default 2 000 ms. */
  probeTimeoutMs?: number;
  /** Which errors count as failures. Default: timeouts, 5xx, connection errors; not 4xx, refusals or overload. */
  isFailure?: (error: unknown) => boolean;
}

export interface ConcurrencyOptions {
  /**
   * Limiter name: calls under one name share the limit. Default: the controller's class name, or
   * `Class.method` for a route whose own decorator sets a limit (or other settings).
   */
  name?: string;
  /** Calls in flight at once. Default 16. */
  limit?: number;
  /** Callers allowed to wait; more are refused at once with 429. Default 1 000. */
  queueSize?: number;
  /** Longest wait for a slot in ms, then 429. Default 60 000. */
  maxWaitMs?: number;
  /** `Retry-After` seconds sent with an overload refusal. Default 1. */
  retryAfterSeconds?: number;
}

export interface TimeoutOptions {
  /** Total time for a plain answer (and a stream's head), in ms. */
  ms: number;
  /** A stream's first chunk must come within this time from the start. Default: `ms`. */
  firstChunkMs?: number;
  /** Longest gap between two chunks of a stream. Default: `ms`. */
  idleMs?: number;
}

export interface RetryOptions {
  /** Extra attempts after the first. Default 1. */
  retries?: number;
  /** Back-off ceiling of the first retry in ms, doubled per retry, with full jitter. Default 100. */
  baseDelayMs?: number;
  /** Default 2 000. */
  maxDelayMs?: number;
  /** Which errors are retried. Default: 502/503/504 and connection errors; never timeouts or refusals. */
  shouldRetry?: (error: unknown) => boolean;
}

/** Module-wide defaults; decorators on a class or route override them field by field. */
export interface OrchestratorModuleOptions {
  dedup?: DedupOptions;
  breaker?: BreakerOptions;
  concurrency?: ConcurrencyOptions;
  timeout?: TimeoutOptions;
  /** Retries of transient upstream failures (off unless a route asks for them). */
  retry?: RetryOptions;
  /** Settings of named breakers (e.g. a health probe), applied when that breaker is first used. */
  breakers?: Record<string, BreakerOptions>;
  /** Settings of named concurrency limiters. */
  limits?: Record<string, ConcurrencyOptions>;
  /** Keyv stores for the answer window, e.g. `[new Keyv(new KeyvRedis(url))]` to share it across replicas. */
  windowStores?: Keyv[];
}

export const DEFAULT_DEDUP = {
  windowMs: 300_000,
  cacheAnswers: true,
  maxEntries: 10_000,
  maxEntryBytes: 1_048_576,
  cancelWhenAbandoned: false,
} as const;

export const DEFAULT_BREAKER = {
  failureThreshold: 5,
  openMs: 60_000,
  maxOpenMultiplier: 64,
  probeIntervalMs: 500,
  probeTimeoutMs: 2_000,
} as const;

export const DEFAULT_RETRY = {
  retries: 1,
  baseDelayMs: 100,
  maxDelayMs: 2_000,
} as const;

export const DEFAULT_CONCURRENCY = {
  limit: 16,
  queueSize: 1_000,
  maxWaitMs: 60_000,
  retryAfterSeconds: 1,
} as const;

type Check = 'positiveInt' | 'positive' | 'nonNegativeInt' | 'boolean' | 'function' | 'string' | 'object';

const DEDUP_FIELDS: Record<keyof DedupOptions, Check> = {
  windowMs: 'positive',
  cacheAnswers: 'boolean',
  maxEntries: 'positiveInt',
  maxEntryBytes: 'positiveInt',
  cancelWhenAbandoned: 'boolean',
  key: 'function',
  credential: 'function',
};
const BREAKER_FIELDS: Record<keyof BreakerOptions, Check> = {
  name: 'string',
  failureThreshold: 'positiveInt',
  openMs: 'positive',
  maxOpenMultiplier: 'positiveInt',
  failureRate: 'object',
  healthProbe: 'function',
  probeIntervalMs: 'positive',
  probeTimeoutMs: 'positive',
  isFailure: 'function',
};
const CONCURRENCY_FIELDS: Record<keyof ConcurrencyOptions, Check> = {
  name: 'string',
  limit: 'positiveInt',
  queueSize: 'nonNegativeInt',
  maxWaitMs: 'positive',
  retryAfterSeconds: 'positiveInt',
};
const TIMEOUT_FIELDS: Record<keyof TimeoutOptions, Check> = {
  ms: 'positive',
  firstChunkMs: 'positive',
  idleMs: 'positive',
};
const RETRY_FIELDS: Record<keyof RetryOptions, Check> = {
  retries: 'nonNegativeInt',
  baseDelayMs: 'positive',
  maxDelayMs: 'positive',
  shouldRetry: 'function',
};
const FAILURE_RATE_FIELDS: Record<string, Check> = {
  thresholdPercent: 'positive',
  minimumCalls: 'nonNegativeInt',
  windowMs: 'positive',
};

/** Thrown at start-up (or decoration) time for options that cannot work. */
export class OrchestratorConfigError extends Error {
  constructor(message: string) {
    super(`nest-prompt-orchestrator: ${message}`);
    this.name = 'OrchestratorConfigError';
  }
}

function checkValue(path: string, value: unknown, check: Check): void {
  if (value === undefined) return;
  const fail = (expected: string) => {
    throw new OrchestratorConfigError(`${path} must be ${expected}, got ${describe(value)}`);
  };
  switch (check) {
    case 'positiveInt':
      if (!Number.isInteger(value) || (value as number) <= 0) fail('a positive integer');
      break;
    case 'nonNegativeInt':
      if (!Number.isInteger(value) || (value as number) < 0) fail('an integer >= 0');
      break;
    case 'positive':
      if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) fail('a positive number');
      break;
    case 'boolean':
      if (typeof value !== 'boolean') fail('true or false');
      break;
    case 'function':
      if (typeof value !== 'function') fail('a function');
      break;
    case 'string':
      if (typeof value !== 'string' || value.length === 0) fail('a non-empty string');
      break;
    case 'object':
      if (typeof value !== 'object' || value === null) fail('an object');
      break;
  }
}

function describe(value: unknown): string {
  if (typeof value === 'function') return 'a function';
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

function checkFields(path: string, value: unknown, fields: Record<string, Check>): void {
  if (value === undefined) return;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new OrchestratorConfigError(`${path} must be an object, got ${describe(value)}`);
  }
  for (const [field, fieldValue] of Object.entries(value)) {
    const check = fields[field];
    if (!check) {
      throw new OrchestratorConfigError(
        `unknown option ${path}.${field} (known: ${Object.keys(fields).join(', ')})`,
      );
    }
    checkValue(`${path}.${field}`, fieldValue, check);
  }
}

export function validateDedupOptions(path: string, value: unknown): void {
  checkFields(path, value, DEDUP_FIELDS);
}

export function validateBreakerOptions(path: string, value: unknown): void {
  checkFields(path, value, BREAKER_FIELDS);
  const rate = (value as BreakerOptions | undefined)?.failureRate;
  checkFields(`${path}.failureRate`, rate, FAILURE_RATE_FIELDS);
  if (rate && (rate.thresholdPercent === undefined || rate.thresholdPercent > 100)) {
    throw new OrchestratorConfigError(`${path}.failureRate.thresholdPercent must be between 0 and 100`);
  }
}

export function validateConcurrencyOptions(path: string, value: unknown): void {
  checkFields(path, value, CONCURRENCY_FIELDS);
}

export function validateTimeoutOptions(path: string, value: unknown, requireMs = true): void {
  checkFields(path, value, TIMEOUT_FIELDS);
  if (requireMs && value !== undefined && (value as TimeoutOptions).ms === undefined) {
    throw new OrchestratorConfigError(`${path}.ms is required`);
  }
}

export function validateRetryOptions(path: string, value: unknown): void {
  checkFields(path, value, RETRY_FIELDS);
}

const MODULE_FIELDS = ['dedup', 'breaker', 'concurrency', 'timeout', 'retry', 'breakers', 'limits', 'windowStores'];

/** Throws `OrchestratorConfigError` naming the first option that cannot work. */
export function validateModuleOptions(options: unknown): OrchestratorModuleOptions {
  const value = options ?? {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new OrchestratorConfigError(`options must be an object, got ${describe(value)}`);
  }
  for (const key of Object.keys(value)) {
    if (!MODULE_FIELDS.includes(key)) {
      throw new OrchestratorConfigError(`unknown option ${key} (known: ${MODULE_FIELDS.join(', ')})`);
    }
  }
  const o = value as OrchestratorModuleOptions;
  validateDedupOptions('dedup', o.dedup);
  validateBreakerOptions('breaker', o.breaker);
  validateConcurrencyOptions('concurrency', o.concurrency);
  validateTimeoutOptions('timeout', o.timeout);
  validateRetryOptions('retry', o.retry);
  for (const field of ['breakers', 'limits'] as const) {
    const named: unknown = o[field];
    if (named !== undefined && (typeof named !== 'object' || named === null || Array.isArray(named))) {
      throw new OrchestratorConfigError(`${field} must be an object keyed by name, got ${describe(named)}`);
    }
  }
  for (const [name, breaker] of Object.entries(o.breakers ?? {})) validateBreakerOptions(`breakers.${name}`, breaker);
  for (const [name, limit] of Object.entries(o.limits ?? {})) validateConcurrencyOptions(`limits.${name}`, limit);
  const isStore = (store: unknown) =>
    typeof store === 'object' && store !== null && typeof (store as { get?: unknown }).get === 'function' && typeof (store as { set?: unknown }).set === 'function';
  if (o.windowStores !== undefined && !(Array.isArray(o.windowStores) && o.windowStores.every(isStore))) {
    throw new OrchestratorConfigError('windowStores must be an array of Keyv instances');
  }
  return o;
}
