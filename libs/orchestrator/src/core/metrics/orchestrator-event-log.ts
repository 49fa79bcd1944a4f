import type { BreakerState } from '../breaker/circuit-breaker.js';
import type { StoreState } from '../dedup/answer-window.js';
import type { Orchestrator } from '../orchestrator.js';

/** A structured logger with pino's call shape (`logger.warn({ fields }, 'message')`): pino itself, or a child of it. */
export interface StructuredLogger {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  debug?(fields: object, message: string): void;
}

/**
 * Logs what an operator must see as its own line: every breaker transition
 * made here (warn when it opens; one applied from another replica at debug) and the shared store going away and coming back.
 * Requests are not logged here (an app logs its own request lines, with what
 * it knows of them). Returns a function that stops logging.
 */
export function logOrchestratorEvents(orchestrator: Orchestrator, logger: StructuredLogger): () => void {
  return orchestrator.observe({
    breakerTransition(name: string, from: BreakerState, to: BreakerState, _at: number, remote?: boolean) {
      // One line per change, where it was made: a replica or worker applying another's is at debug.
      if (remote)
        return logger.debug?.(
          { event: 'breaker_transition', breaker: name, from, to, remote: true },
          `breaker "${name}" ${to} (applied from another replica)`,
        );
      const fields = { event: 'breaker_transition', breaker: name, from, to };
      if (to === 'open') logger.warn(fields, `breaker "${name}" opened: calls are refused until the upstream recovers`);
      else
        logger.info(
          fields,
          to === 'closed'
            ? `breaker "${name}" closed: traffic resumes`
            : `breaker "${name}" half-open: one probe call goes through`,
        );
    },
    storeState(state: StoreState, error?: string) {
      if (state === 'degraded') {
        logger.warn(
          { event: 'store_degraded', error },
          'answer window store unreachable: answering from memory until it is back',
        );
      } else logger.info({ event: 'store_recovered' }, 'answer window store reachable again');
    },
  });
}
