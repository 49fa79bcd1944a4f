import { Orchestrate } from 'nest-prompt-orchestrator';

/** The breaker and concurrency limiter every model route shares: there is one upstream. */
export const UPSTREAM = 'upstream';

/**
 * Every route that calls the provider: dedup, breaker refusal, a concurrency
 * slot, the timed call, and the gateway's bounded retries. The values come
 * from the CLI through `OrchestratorModule.forRootAsync`.
 */
export const UpstreamRoute = () =>
  Orchestrate({ dedup: true, breaker: UPSTREAM, concurrency: { name: UPSTREAM }, timeout: true, retry: true });
