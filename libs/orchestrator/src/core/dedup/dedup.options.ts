import type { Fields } from '../options.js';

/** The request as the dedup key function sees it. */
export interface DedupRequest {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
  /** The request as the HTTP platform gave it (Express's or Fastify's), for facts an app keeps on it. */
  request?: object;
}

export interface DedupOptions {
  /** How long a finished answer is reused, in ms. Default 300 000 (5 min). */
  windowMs?: number;
  /** Keep finished answers at all; `false` only merges calls in flight. Default true. */
  cacheAnswers?: boolean;
  /** Most answers the in-memory window keeps (LRU). Default 10 000. Module-wide only. */
  maxEntries?: number;
  /**
   * Bytes the in-memory window keeps at most, counted on what the answers hold
   * (least recently used go first). Default 268 435 456 (256 MiB). Module-wide only.
   */
  maxBytes?: number;
  /**
   * Longest a shared window store (`windowStores`, e.g. Redis) may take for one
   * operation; slower is a failure, and the request goes on as a miss. Default 100 ms. Module-wide only.
   */
  storeTimeoutMs?: number;
  /** After a shared store failed, how often it is tried again (it is skipped meanwhile). Default 1 000 ms. Module-wide only. */
  storeRetryMs?: number;
  /** Answers larger than this many bytes are not kept. Default 1 048 576. */
  maxEntryBytes?: number;
  /**
   * Bytes all streams in flight keep together for callers who join late and
   * for the window (each keeps its stream from the start, up to
   * `maxEntryBytes`). Past it, the stream that grows lets its copy go: it is
   * neither joined any more nor kept. Default 33 554 432 (32 MiB). Module-wide only.
   */
  maxInFlightBytes?: number;
  /**
   * Cancel a call once every caller waiting for it has gone. Default false: the
   * call runs to completion and lands in the window, so a retry is answered
   * from it. A call still queued for a slot is always cancelled.
   */
  cancelWhenAbandoned?: boolean;
  /**
   * Replaces the default key (SHA-256 of method, URL, canonical body and the
   * caller's tenant, see the module's `tenant` option). Return `undefined` to
   * skip deduplication for a request. Put the tenant in it yourself.
   */
  key?: (request: DedupRequest) => string | undefined;
  /**
   * Whether a request's answer may be kept in the window (it is still shared
   * with identical requests in flight), e.g. not for sampled generations a
   * user expects to vary. Default: every answer is kept.
   */
  store?: (request: DedupRequest) => boolean;
  /**
   * Let callers steer reuse with `Cache-Control`: `no-cache` (a fresh answer),
   * `no-store` (not kept), `max-age=N` (a stored answer at most N s old). A
   * cached answer carries `Age`. Default true.
   */
  honorCacheControl?: boolean;
}

export const DEDUP_FIELDS = {
  windowMs: { check: 'positive', default: 300_000 },
  cacheAnswers: { check: 'boolean', default: true },
  maxEntries: { check: 'positiveInt', default: 10_000 },
  maxBytes: { check: 'positiveInt', default: 256 * 1024 * 1024 },
  storeTimeoutMs: { check: 'positive', default: 100 },
  storeRetryMs: { check: 'positive', default: 1_000 },
  maxEntryBytes: { check: 'positiveInt', default: 1_048_576 },
  maxInFlightBytes: { check: 'positiveInt', default: 32 * 1024 * 1024 },
  cancelWhenAbandoned: { check: 'boolean', default: false },
  key: { check: 'function' },
  store: { check: 'function' },
  honorCacheControl: { check: 'boolean', default: true },
} as const satisfies Fields<DedupOptions>;
