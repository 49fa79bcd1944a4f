import type { OrchestrateOptions } from 'nest-prompt-orchestrator/core';
import type { RouteKind } from './provider.js';

/** The breaker and concurrency limiter every model route shares: there is one upstream. */
export const UPSTREAM = 'upstream';

/**
 * How each kind of route is shaped (see `RouteKind`): only generation routes
 * are deduplicated; metadata and actions never wait behind model calls for a
 * concurrency slot; actions are sent once, never retried.
 */
export const SHAPING: Readonly<Record<RouteKind, OrchestrateOptions>> = {
  // Generations are POSTs: their window is asked for (its length is the module's, from --dedup-window).
  generation: {
    dedup: { cacheAnswers: true },
    breaker: UPSTREAM,
    concurrency: { name: UPSTREAM },
    timeout: true,
    retry: true,
  },
  utility: { dedup: false, breaker: UPSTREAM, concurrency: { name: UPSTREAM }, timeout: true, retry: true },
  metadata: { dedup: false, breaker: UPSTREAM, concurrency: false, timeout: true, retry: true },
  action: { dedup: false, breaker: UPSTREAM, concurrency: false, timeout: true, retry: false },
};
