import type { Fields } from '../options.js';

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

export const RETRY_FIELDS = {
  retries: { check: 'nonNegativeInt', default: 1 },
  baseDelayMs: { check: 'positive', default: 100 },
  maxDelayMs: { check: 'positive', default: 2_000 },
  shouldRetry: { check: 'function' },
} as const satisfies Fields<RetryOptions>;
