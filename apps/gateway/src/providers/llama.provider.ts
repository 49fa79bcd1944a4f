import type { GatewayConfig } from '../config/gateway-config.js';
import { Provider, ROUTES, type GatewayRoute, type UpstreamAuth, type UpstreamPlan } from './provider.js';

/**
 * A llama.cpp server. Every route passes through to the server's own route of
 * the same path, so the server applies the model's own chat template (the
 * gateway never makes one up), and its Anthropic-compatible `/v1/messages` too.
 */
export class LlamaProvider extends Provider {
  readonly kind = 'llama' as const;
  protected readonly routes: Partial<Record<GatewayRoute, UpstreamPlan>>;

  constructor(config: GatewayConfig) {
    super(config);
    const base = config.upstream;
    // The server has every route at the gateway's own path, in the same API.
    this.routes = Object.fromEntries(
      (Object.entries(ROUTES) as Array<[GatewayRoute, (typeof ROUTES)[GatewayRoute]]>).map(([route, { path, method, api }]) => [
        route,
        { method, url: `${base}${path}`, api },
      ]),
    );
  }

  healthUrl(): string {
    return `${this.config.upstream}/health`;
  }

  authHeaders(auth: UpstreamAuth): Record<string, string> {
    return this.bearer(auth);
  }
}
