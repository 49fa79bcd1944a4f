import {
  Inject,
  Injectable,
  Logger,
  Optional,
  type BeforeApplicationShutdown,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { Orchestrator, type OrchestratorOptions } from '../core/orchestrator.js';
import { ORCHESTRATOR_OPTIONS } from './constants.js';

/**
 * The orchestrator as a Nest provider: the engine behind the route decorators,
 * injectable into code that is not a route (a provider method, a queue
 * consumer). Everything it does is `Orchestrator`'s; this class only gives it
 * the module's options, a logger and Nest's lifecycle.
 *
 * @example
 * ```ts
 * const answer = await orchestrator.run(
 *   { key: `summary:${tenant}:${docId}`, dedup: true, breaker: 'openai', concurrency: 8, timeout: 30_000 },
 *   (signal) => openai.chat.completions.create(params, { signal }),
 * );
 * ```
 */
@Injectable()
export class OrchestratorService extends Orchestrator implements BeforeApplicationShutdown, OnApplicationShutdown {
  private readonly logger = new Logger('Orchestrator');

  constructor(@Optional() @Inject(ORCHESTRATOR_OPTIONS) options?: OrchestratorOptions) {
    super(options, {
      // Once per outage and once on recovery: a dead store must not flood the log.
      onStoreState: (state, error) =>
        state === 'degraded'
          ? this.logger.warn(
              `answer window store unavailable (${describe(error)}); answering from memory until it is back`,
            )
          : this.logger.log('answer window store reachable again; sharing answers resumes'),
    });
  }

  private toldAboutTenants = false;

  /**
   * Says once, when the first deduplicated route is used, what tells callers
   * apart when the app has not said (a route whose users differ otherwise
   * would share their answers).
   */
  noteDedupRoute(): void {
    if (this.toldAboutTenants || this.hasTenantResolver) return;
    this.toldAboutTenants = true;
    this.logger.log(
      'deduplicated routes tell callers apart by their authorization, x-api-key and cookie headers only; ' +
        'if your users differ otherwise (a user a guard attached, an x-tenant-id header), set OrchestratorModule.forRoot({ tenant })',
    );
  }

  /**
   * Nest runs this before it closes the HTTP server: requests that arrive from
   * now on are refused with a retryable 503, while calls in flight finish with
   * their breakers and limiters intact.
   */
  beforeApplicationShutdown(): void {
    this.drain();
  }

  private closed?: Promise<void>;

  /**
   * After the HTTP server is closed: nothing is in flight any more. Once per
   * app, though every module that imports `forRoot()` tells the same instance.
   */
  onApplicationShutdown(): Promise<void> {
    return (this.closed ??= this.close());
  }
}

function describe(error: unknown): string {
  return ((error as Error | undefined)?.message ?? String(error)).slice(0, 200);
}
