import type { GatewayConfig } from '../config/gateway-config.js';
import type { RequestContext } from './request-context.js';
import type { Usage } from '../budgets/prices.js';

/**
 * Token usage of the answers the provider sent: a request's own call's, set
 * on its context for the metrics, the request line and the status page.
 * What a joined or cached request saved travels with the answer it reused
 * (its `CallTag`), not here.
 */
export class UsageLedger {
  /** Whether anybody reads usage (metrics, request log or status page): otherwise nothing is parsed. */
  readonly enabled: boolean;

  constructor(config: GatewayConfig) {
    const o = config.observability;
    this.enabled =
      o.metricsPath !== undefined || o.statusPath !== undefined || (o.requestLog && o.logLevel !== 'silent');
  }

  /** The usage the provider reported for this request's own call (read once, by the gateway's usage reader). */
  record(context: RequestContext, usage: Usage | undefined): void {
    if (!this.enabled || !usage) return;
    context.usage = usage;
  }
}
