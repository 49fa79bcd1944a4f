import { Inject, Injectable, Logger, Optional, type OnModuleDestroy } from '@nestjs/common';
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
export class OrchestratorService extends Orchestrator implements OnModuleDestroy {
  private readonly logger = new Logger('Orchestrator');

  constructor(@Optional() @Inject(ORCHESTRATOR_OPTIONS) options?: OrchestratorOptions) {
    super(options, {
      // Once per outage and once on recovery: a dead store must not flood the log.
      onStoreState: (state, error) =>
        state === 'degraded'
          ? this.logger.warn(`answer window store unavailable (${describe(error)}); answering from memory until it is back`)
          : this.logger.log('answer window store reachable again; sharing answers resumes'),
    });
  }

  onModuleDestroy(): Promise<void> {
    return this.close();
  }
}

function describe(error: unknown): string {
  return ((error as Error | undefined)?.message ?? String(error)).slice(0, 200);
}
