import { Inject, Injectable } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_CONFIG } from '../gateway.tokens.js';
import type { RequestContext } from '../http/request-context.js';
import type { Usage } from '../budgets/prices.js';

/**
 * Token usage of the answers the provider sent, per request and per dedup
 * key: a request that joined a call or was answered from the window reused
 * that call's tokens (what it saved is read here by its key). Bounded; no
 * prompt or answer text is kept, only two numbers per key.
 */
@Injectable()
export class UsageLedger {
  /** Whether anybody reads usage (metrics, request log or status page): otherwise nothing is parsed. */
  readonly enabled: boolean;
  private readonly byKey = new LRUCache<string, Usage>({ max: 10_000 });

  constructor(@Inject(GATEWAY_CONFIG) config: GatewayConfig) {
    const o = config.observability;
    this.enabled = o.metricsPath !== undefined || o.statusPath !== undefined || (o.requestLog && o.logLevel !== 'silent');
  }

  /** The usage the provider reported for this request's own call (read once, by the gateway's usage reader). */
  record(context: RequestContext, usage: Usage | undefined): void {
    if (!this.enabled || !usage) return;
    context.usage = usage;
    if (context.dedupKey !== undefined) this.byKey.set(context.dedupKey, usage);
  }

  /**
   * The usage read from an answer this process only relayed (a call led by another replica or worker, or a stored
   * answer it did not make): what the requests that reuse it saved.
   */
  learn(dedupKey: string, usage: Usage | undefined): void {
    if (this.enabled && usage) this.byKey.set(dedupKey, usage);
  }

  /** The usage of the call whose answer a joined or cached request reused. */
  reused(dedupKey: string | undefined): Usage | undefined {
    return dedupKey === undefined ? undefined : this.byKey.get(dedupKey);
  }
}
