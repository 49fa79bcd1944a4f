import type { IncomingHttpHeaders } from 'node:http';
import type { GatewayConfig } from './config/gateway-config.js';
import { clientKey } from './common/credentials.js';
import { createProvider } from './providers/provider.factory.js';
import type { Provider } from './providers/provider.js';
import { UpstreamClient } from './upstreams/upstream-client.js';
import { UpstreamIdentity } from './upstreams/upstream-identity.js';
import { upstreamMembers, urlFor, type UpstreamTarget } from './upstreams/upstream-set.js';

/**
 * The provider behind the gateway: its plans, identity and health probe, and
 * the connection pools every upstream call goes through (the data plane makes
 * the calls, passed through or translated: see `UpstreamExchange`). The
 * upstream address comes from configuration only: no request can change it.
 */
export class GatewayService {
  readonly upstream: UpstreamClient;
  readonly provider: Provider;
  /** Who answers behind the upstream URL; part of every dedup key. */
  readonly identity: UpstreamIdentity;

  constructor(private readonly config: GatewayConfig) {
    this.upstream = new UpstreamClient(config.timeoutMs);
    this.provider = createProvider(config, upstreamMembers(config)[0].target);
    const identityUrl = this.provider.identityUrl();
    this.identity = new UpstreamIdentity(
      config.upstream,
      identityUrl === undefined
        ? undefined
        : {
            fetch: (headers, signal) => this.upstream.getJson(identityUrl, headers, signal),
            read: (answer) => this.provider.identityOf(answer),
          },
    );
  }

  start(): void {
    // Learned in the background: start-up never waits on the provider.
    void this.identity.check(this.provider.authHeaders({ headers: {} }));
  }

  /** The breaker's recovery probe: the provider's own health route (llama.cpp) or its model list. */
  async healthProbe(signal: AbortSignal, target?: UpstreamTarget): Promise<boolean> {
    const url = urlFor(this.provider.healthUrl(), this.config, target?.url);
    // With the upstream's own key: a probe sent another's would be refused, and would hand that key to this upstream.
    const up = await this.upstream.probe(url, this.provider.authHeaders({ headers: {}, upstream: target }), signal);
    // Back after an outage: it may have come back with another model.
    if (up) void this.identity.check(this.provider.authHeaders({ headers: {} }));
    return up;
  }

  /**
   * Dedup scope of a request: who answers behind the URL (checked again now and then), and the client headers that
   * change the answer. Without a promise unless a check of the upstream's identity is due.
   */
  dedupScope(headers: IncomingHttpHeaders): string | Promise<string> {
    const scoped = (identity: string) => {
      const forwarded = this.provider.forwardedHeaders(headers);
      return Object.keys(forwarded).length === 0 ? identity : `${identity}\n${JSON.stringify(forwarded)}`;
    };
    if (this.identity.isFresh) return scoped(this.identity.current);
    return this.identity.fresh(this.provider.authHeaders({ clientKey: clientKey(headers), headers })).then(scoped);
  }

  close(): Promise<void> {
    return this.upstream.close();
  }
}
