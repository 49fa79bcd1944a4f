import type { Fields } from '../options.js';

export interface TimeoutOptions {
  /** Total time for a plain answer (and a stream's head), in ms. */
  ms: number;
  /** A stream's first chunk must come within this time from the start. Default: `ms`. */
  firstChunkMs?: number;
  /** Longest gap between two chunks of a stream. Default: `ms`. */
  idleMs?: number;
}

export const TIMEOUT_FIELDS = {
  ms: { check: 'positive' },
  firstChunkMs: { check: 'positive' },
  idleMs: { check: 'positive' },
} as const satisfies Fields<TimeoutOptions>;
