import type { IncomingHttpHeaders } from 'node:http';
import type { GatewayConfig, ProviderKind } from '../config/gateway-config.js';
import { notSupported } from '../http/api-error.js';
import type { SseTranslator } from '../translate/sse.js';

type Json = Record<string, unknown>;

/** The API a client speaks on a route, which is also the format of an upstream's answers and errors. */
export type ClientApi = 'openai' | 'anthropic' | 'llama';

/** The gateway's routes, by name; each controller method serves one. */
export type GatewayRoute =
  | 'chat'
  | 'completions'
  | 'embeddings'
  | 'models'
  | 'messages'
  | 'completion'
  | 'tokenize'
  | 'detokenize'
  | 'apply-template'
  | 'props';

/** Where a route is served, with which method, and the API its clients speak (the format of every error they get). */
export interface RouteInfo {
  path: string;
  method: 'GET' | 'POST';
  api: ClientApi;
}

/** The gateway's routes: the one place that says which API each speaks. */
export const ROUTES: Readonly<Record<GatewayRoute, RouteInfo>> = {
  chat: { path: '/v1/chat/completions', method: 'POST', api: 'openai' },
  completions: { path: '/v1/completions', method: 'POST', api: 'openai' },
  embeddings: { path: '/v1/embeddings', method: 'POST', api: 'openai' },
  models: { path: '/v1/models', method: 'GET', api: 'openai' },
  messages: { path: '/v1/messages', method: 'POST', api: 'anthropic' },
  completion: { path: '/completion', method: 'POST', api: 'llama' },
  tokenize: { path: '/tokenize', method: 'POST', api: 'llama' },
  detokenize: { path: '/detokenize', method: 'POST', api: 'llama' },
  'apply-template': { path: '/apply-template', method: 'POST', api: 'llama' },
  props: { path: '/props', method: 'GET', api: 'llama' },
};

const ROUTE_BY_PATH = new Map(Object.entries(ROUTES).map(([name, info]) => [info.path, name as GatewayRoute]));

/**
 * The route a URL names, for a request that failed before routing (a body
 * that is not JSON, or too large): its error is still owed in the route's API.
 */
export function routeAt(url: string): GatewayRoute | undefined {
  const query = url.indexOf('?');
  return ROUTE_BY_PATH.get(query === -1 ? url : url.slice(0, query));
}

/** llama.cpp's own routes: only a llama.cpp server has them. */
export const NATIVE_ROUTES: readonly GatewayRoute[] = ['completion', 'tokenize', 'detokenize', 'apply-template', 'props'];

/** Changes between the client's API and the provider's, one route's worth. */
export interface Translation {
  /** The request body for the provider (absent: sent as the client sent it). */
  request?(body: Json): Json;
  response(json: Json): Json;
  /** A translator for one stream (it keeps per-stream state). */
  stream?(body: Json): SseTranslator;
}

/** How one client route reaches the provider. */
export interface UpstreamPlan {
  method: 'GET' | 'POST';
  url: string;
  /** The API the provider answers this route in: the format of its errors and stream events. */
  api: ClientApi;
  /** Present when the client's API is not the provider's. */
  translation?: Translation;
}

/** What a provider needs to know of a caller to authenticate the upstream call. */
export interface UpstreamAuth {
  /** The key the client presented (Bearer or x-api-key), when it is to be passed through. */
  clientKey?: string;
  headers: IncomingHttpHeaders;
}

/**
 * One kind of upstream: its routes (passed through, translated, or 501), its
 * health check and its authentication. The gateway service is the same for
 * every provider; what differs lives here.
 */
export abstract class Provider {
  abstract readonly kind: ProviderKind;
  /** Each route this provider serves; the others answer 501. */
  protected abstract readonly routes: Partial<Record<GatewayRoute, UpstreamPlan>>;

  constructor(protected readonly config: GatewayConfig) {}

  /** The URL the breaker's health probe calls while the breaker is open. */
  abstract healthUrl(): string;

  /** Headers that authenticate a call to the provider. */
  abstract authHeaders(auth: UpstreamAuth): Record<string, string>;

  /** How `route` reaches this provider; a 501 naming the alternative when it has no such route. */
  plan(route: GatewayRoute): UpstreamPlan {
    const plan = this.routes[route];
    if (!plan) throw notSupported(this.unsupported(route));
    return plan;
  }

  /** Whether the provider has the route at all (for the route table in the docs and tests). */
  serves(route: GatewayRoute): boolean {
    return this.routes[route] !== undefined;
  }

  protected unsupported(route: GatewayRoute): string {
    if (NATIVE_ROUTES.includes(route)) {
      return `${ROUTES[route].path} is a llama.cpp server route; start the gateway with --provider llama to use it.`;
    }
    return `${ROUTES[route].path} is not served by the ${this.kind} provider.`;
  }

  /** The key sent upstream: the gateway's own provider key, or the client's when no gateway keys are configured. */
  protected upstreamKey(auth: UpstreamAuth): string | undefined {
    return this.config.providerKey ?? (this.config.gatewayKeys.length > 0 ? undefined : auth.clientKey);
  }

  protected bearer(auth: UpstreamAuth): Record<string, string> {
    const key = this.upstreamKey(auth);
    return key ? { authorization: `Bearer ${key}` } : {};
  }
}
