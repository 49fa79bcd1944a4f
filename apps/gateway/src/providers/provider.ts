import type { IncomingHttpHeaders } from 'node:http';
import { isUpstreamFailure, isTransientFailure } from 'nest-prompt-orchestrator/core';
import type { GatewayConfig, ProviderKind } from '../config/gateway-config.js';
import { notSupported } from '../common/api-error.js';
import type { StreamFormat } from '../apis/formats.js';
import type { SseTranslator } from '../translate/sse.js';

type Json = Record<string, unknown>;

/** The API a client speaks on a route, which is also the format of an upstream's answers and errors. */
import type { ClientApi } from '../common/apis.js';
export type { ClientApi };

/** The gateway's routes, by name; each controller method serves one. */
export type GatewayRoute =
  // OpenAI API (the last three are llama-server's own additions to it)
  | 'chat'
  | 'completions'
  | 'embeddings'
  | 'models'
  | 'responses'
  | 'responses-input-tokens'
  | 'chat-input-tokens'
  | 'chat-control'
  | 'transcriptions'
  // Anthropic Messages API
  | 'messages'
  | 'count-tokens'
  // llama.cpp server's own routes
  | 'completion'
  | 'infill'
  | 'embedding'
  | 'rerank'
  | 'tokenize'
  | 'detokenize'
  | 'apply-template'
  | 'props'
  | 'props-update'
  | 'slots'
  | 'slot-action'
  | 'metrics'
  | 'lora-adapters'
  | 'lora-adapters-update'
  | 'stream-replay'
  | 'stream-cancel'
  | 'streams-lookup'
  | 'tools'
  | 'tools-call';

/**
 * What a route does, which decides how the gateway shapes it:
 * - `generation`: a model call. Deduplicated (identical requests share one call, finished answers are reused from
 *   the window), breaker, concurrency slot, timeout, retries.
 * - `utility`: a cheap call that depends on the model (tokenize, count tokens): as generation, but never answered
 *   from the window.
 * - `metadata`: a read of the server's state (props, models, slots, metrics): always asked afresh, never deduplicated,
 *   never queued behind model calls; breaker, timeout and retries.
 * - `action`: changes the server's state (slot save, LoRA scales, cancelling a stream): sent once, as it is
 *   (breaker and timeout only; never deduplicated, queued or retried).
 */
export type RouteKind = 'generation' | 'utility' | 'metadata' | 'action';

/** Where a route is served, with which method, and the API its clients speak (the format of every error they get). */
export interface RouteInfo {
  /** The route's path at the gateway and, by default, at the provider. May hold `:param` segments. */
  path: string;
  /** Other paths llama-server serves the same route at (the gateway serves them too). */
  aliases?: readonly string[];
  method: 'GET' | 'POST' | 'DELETE';
  api: ClientApi;
  kind: RouteKind;
  /**
   * The request body: a JSON object (default for POST), any JSON value (`json`: e.g. an array), or an upload
   * (`multipart`: relayed as the client's bytes with its Content-Type, never read).
   */
  body?: 'object' | 'json' | 'multipart';
  /** The answer: JSON (default; anything else from the provider is its failure), or bytes of any content type. */
  answer?: 'json' | 'any';
  /**
   * How a passed-through stream of this route ends, which the gateway checks (default: the provider's API on the
   * route); `false` for a stream whose format the route does not fix (a replay of any route's stream).
   */
  streamEnd?: StreamFormat | false;
}

/** The gateway's routes: the one place that says where each is served, which API it speaks and how it is shaped. */
export const ROUTES: Readonly<Record<GatewayRoute, RouteInfo>> = {
  chat: {
    path: '/v1/chat/completions',
    aliases: ['/chat/completions'],
    method: 'POST',
    api: 'openai',
    kind: 'generation',
  },
  completions: { path: '/v1/completions', method: 'POST', api: 'openai', kind: 'generation' },
  embeddings: { path: '/v1/embeddings', method: 'POST', api: 'openai', kind: 'generation' },
  models: { path: '/v1/models', aliases: ['/models'], method: 'GET', api: 'openai', kind: 'metadata' },
  responses: {
    path: '/v1/responses',
    aliases: ['/responses'],
    method: 'POST',
    api: 'openai',
    kind: 'generation',
    streamEnd: 'responses',
  },
  'responses-input-tokens': {
    path: '/v1/responses/input_tokens',
    aliases: ['/responses/input_tokens'],
    method: 'POST',
    api: 'openai',
    kind: 'utility',
  },
  'chat-input-tokens': {
    path: '/v1/chat/completions/input_tokens',
    aliases: ['/chat/completions/input_tokens'],
    method: 'POST',
    api: 'openai',
    kind: 'utility',
  },
  'chat-control': { path: '/v1/chat/completions/control', method: 'POST', api: 'openai', kind: 'action' },
  // A model call, but an upload's bytes differ on every request (a random multipart boundary): nothing to share.
  transcriptions: {
    path: '/v1/audio/transcriptions',
    aliases: ['/audio/transcriptions'],
    method: 'POST',
    api: 'openai',
    kind: 'utility',
    body: 'multipart',
    answer: 'any',
  },
  messages: { path: '/v1/messages', method: 'POST', api: 'anthropic', kind: 'generation' },
  'count-tokens': { path: '/v1/messages/count_tokens', method: 'POST', api: 'anthropic', kind: 'utility' },
  completion: { path: '/completion', aliases: ['/completions'], method: 'POST', api: 'llama', kind: 'generation' },
  infill: { path: '/infill', method: 'POST', api: 'llama', kind: 'generation' },
  embedding: { path: '/embedding', aliases: ['/embeddings'], method: 'POST', api: 'llama', kind: 'generation' },
  rerank: {
    path: '/v1/rerank',
    aliases: ['/rerank', '/reranking', '/v1/reranking'],
    method: 'POST',
    api: 'llama',
    kind: 'generation',
  },
  tokenize: { path: '/tokenize', method: 'POST', api: 'llama', kind: 'utility' },
  detokenize: { path: '/detokenize', method: 'POST', api: 'llama', kind: 'utility' },
  'apply-template': { path: '/apply-template', method: 'POST', api: 'llama', kind: 'utility' },
  props: { path: '/props', method: 'GET', api: 'llama', kind: 'metadata' },
  'props-update': { path: '/props', method: 'POST', api: 'llama', kind: 'action' },
  slots: { path: '/slots', method: 'GET', api: 'llama', kind: 'metadata' },
  'slot-action': { path: '/slots/:id_slot', method: 'POST', api: 'llama', kind: 'action' },
  metrics: { path: '/metrics', method: 'GET', api: 'llama', kind: 'metadata', answer: 'any' },
  'lora-adapters': { path: '/lora-adapters', method: 'GET', api: 'llama', kind: 'metadata' },
  'lora-adapters-update': { path: '/lora-adapters', method: 'POST', api: 'llama', kind: 'action', body: 'json' },
  'stream-replay': { path: '/v1/stream', method: 'GET', api: 'llama', kind: 'action', streamEnd: false },
  'stream-cancel': { path: '/v1/stream', method: 'DELETE', api: 'llama', kind: 'action' },
  'streams-lookup': { path: '/v1/streams/lookup', method: 'POST', api: 'llama', kind: 'metadata' },
  tools: { path: '/tools', method: 'GET', api: 'llama', kind: 'metadata' },
  'tools-call': { path: '/tools', method: 'POST', api: 'llama', kind: 'action' },
};

/** Every path a route is served at: its own and its aliases. */
export function routePaths(route: GatewayRoute): string[] {
  const { path, aliases = [] } = ROUTES[route];
  return [path, ...aliases];
}

const ROUTE_BY_PATH = new Map<string, GatewayRoute[]>();
const PATTERNS: Array<{ pattern: RegExp; route: GatewayRoute }> = [];
for (const route of Object.keys(ROUTES) as GatewayRoute[]) {
  for (const path of routePaths(route)) {
    if (path.includes('/:')) {
      PATTERNS.push({ pattern: new RegExp(`^${path.replace(/:[^/]+/g, '[^/]+')}$`), route });
    } else {
      ROUTE_BY_PATH.set(path, [...(ROUTE_BY_PATH.get(path) ?? []), route]);
    }
  }
}

/**
 * The route a URL names, for a request that failed before routing (a body
 * that is not JSON, or too large): its error is still owed in the route's API.
 * Routes that share a path (GET and POST /props) share their API.
 */
export function routeAt(url: string): GatewayRoute | undefined {
  const query = url.indexOf('?');
  const path = query === -1 ? url : url.slice(0, query);
  return ROUTE_BY_PATH.get(path)?.[0] ?? PATTERNS.find((p) => p.pattern.test(path))?.route;
}

/** The routes only a llama.cpp server has (the OpenAI-shaped ones among them included). */
export const LLAMA_ONLY_ROUTES: readonly GatewayRoute[] = (Object.keys(ROUTES) as GatewayRoute[]).filter(
  (route) => ROUTES[route].api === 'llama' || route === 'chat-input-tokens' || route === 'chat-control',
);

/** Changes between the client's API and the provider's, one route's worth. */
export interface Translation {
  /** The request body for the provider (absent: sent as the client sent it). Throws a 400 naming what it cannot translate. */
  request?(body: Json): Json;
  response(json: Json): Json;
  /** A translator for one stream (it keeps per-stream state). */
  stream?(body: Json): SseTranslator;
}

/** How one client route reaches the provider. */
export interface UpstreamPlan {
  method: 'GET' | 'POST' | 'DELETE';
  /** The provider's URL for the route; `:param` segments are filled from the client's path, escaped. */
  url: string;
  /** The API the provider answers this route in: the format of its errors and stream events. */
  api: ClientApi;
  /** Present when the client's API is not the provider's. */
  translation?: Translation;
}

/** What a provider reads of an upstream (see `UpstreamTarget`) to choose the key it is sent. */
export interface KeyedTarget {
  /** Its own key (upstreams file). */
  key?: { reveal(): string };
  /** Without a key of its own, whether it is sent the provider key or the client's. */
  inheritsKey: boolean;
}

/** What a provider needs to know of a caller to authenticate the upstream call. */
export interface UpstreamAuth {
  /** The key the client presented (Bearer or x-api-key), when it is to be passed through. */
  clientKey?: string;
  headers: IncomingHttpHeaders;
  /** The upstream the call goes to (its own key, if it has one); absent: the first upstream (identity checks). */
  upstream?: KeyedTarget;
}

/**
 * One kind of upstream: its routes (passed through, translated, or 501), its
 * health check, its authentication, and what in its answers is the upstream's
 * failure rather than one request's. The gateway service is the same for every
 * provider; what differs lives here.
 */
export abstract class Provider {
  abstract readonly kind: ProviderKind;
  /** Each route this provider serves; the others answer 501. */
  protected abstract readonly routes: Partial<Record<GatewayRoute, UpstreamPlan>>;

  constructor(
    protected readonly config: GatewayConfig,
    /**
     * Where a call that names no upstream goes: the first one, as the provider's URLs are built on it (the upstream
     * set's own target, whose key a reload changes in place). Without one: `--upstream`, sent the usual key.
     */
    protected readonly firstUpstream: KeyedTarget = { inheritsKey: true },
  ) {}

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

  /** Client request headers, besides credentials, that change what the provider does and so travel with the request. */
  forwardedHeaders(_headers: IncomingHttpHeaders): Record<string, string> {
    return {};
  }

  /**
   * Where the upstream says which model it serves and how (absent: the upstream URL identifies it well enough),
   * and the identity read from that answer. Identity is part of every dedup key.
   */
  identityUrl(): string | undefined {
    return undefined;
  }

  identityOf(_answer: Json): { identity: string; instance?: string } | undefined {
    return undefined;
  }

  /** Whether an error is the upstream's failure (counted by the breaker), not one request's mistake. */
  isFailure(error: unknown): boolean {
    return isUpstreamFailure(error);
  }

  /** Whether the gateway tries once more (502/503/504, connection errors). */
  shouldRetry(error: unknown): boolean {
    return isTransientFailure(error);
  }

  protected unsupported(route: GatewayRoute): string {
    const { path } = ROUTES[route];
    if (LLAMA_ONLY_ROUTES.includes(route)) {
      return `${path} is a llama.cpp server route; start the gateway with --provider llama to use it.`;
    }
    return `${path} is not served by the ${this.kind} provider.`;
  }

  /**
   * The key sent upstream: the upstream's own (upstreams file), else the gateway's provider key, else the client's
   * when no gateway keys are configured; none for a fallback upstream without a key of its own. Which key goes
   * upstream never changes who the caller is (see `identityOf`): that is read from what the client presented.
   */
  protected upstreamKey(auth: UpstreamAuth): string | undefined {
    const target = auth.upstream ?? this.firstUpstream;
    if (target.key) return target.key.reveal();
    if (!target.inheritsKey) return undefined;
    return this.config.providerKey ?? (gatewayChecksKeys(this.config) ? undefined : auth.clientKey);
  }

  /** Whether the call is sent a key the gateway chose (the upstream's own, the provider key, or none at all). */
  protected gatewayChoosesKey(auth: UpstreamAuth): boolean {
    const target = auth.upstream ?? this.firstUpstream;
    return (
      target.key !== undefined ||
      !target.inheritsKey ||
      this.config.providerKey !== undefined ||
      gatewayChecksKeys(this.config)
    );
  }

  protected bearer(auth: UpstreamAuth): Record<string, string> {
    const key = this.upstreamKey(auth);
    return key ? { authorization: `Bearer ${key}` } : {};
  }
}

/** Whether clients present the gateway's own keys (gateway keys or virtual keys): theirs never go upstream. */
export function gatewayChecksKeys(config: Pick<GatewayConfig, 'gatewayKeys' | 'budgets'>): boolean {
  return (
    config.gatewayKeys.length > 0 || config.budgets.keysFile !== undefined || config.budgets.keysJson !== undefined
  );
}
