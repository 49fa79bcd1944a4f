import { Delete, Get, HttpCode, Post, SetMetadata, applyDecorators, createParamDecorator, type ExecutionContext } from '@nestjs/common';
import { Orchestrate, callSignalOf, callUpstreamOf, type OrchestrateOptions, type Upstream } from 'nest-prompt-orchestrator';
import type { IncomingMessage } from 'node:http';
import { contextOf, type RequestContext } from '../http/request-context.js';
import { validateBody } from '../http/request-validation.js';
import { ROUTES, routePaths, type GatewayRoute, type RouteKind } from '../providers/provider.js';

/**
 * The pool of upstreams every proxied route goes through (`UPSTREAM_POOL`);
 * with one upstream, also its breaker and limiter.
 */
export const UPSTREAM = 'upstream';

const ROUTE = 'gateway:route';

/** What a gateway route declares about itself; read by the guard. */
export interface RouteSpec {
  route: GatewayRoute;
  /** Checks the JSON body (POST routes); throws an `ApiError` naming the field. */
  validate?: (body: unknown) => unknown;
}

export function routeSpecOf(handler: object): RouteSpec | undefined {
  return Reflect.getMetadata(ROUTE, handler) as RouteSpec | undefined;
}

/**
 * How each kind of route is shaped (see `RouteKind`): only generation routes
 * are deduplicated; metadata and actions never wait behind model calls for a
 * concurrency slot; actions are sent once, never retried.
 */
export const SHAPING: Readonly<Record<RouteKind, OrchestrateOptions>> = {
  generation: { dedup: true, breaker: UPSTREAM, concurrency: { name: UPSTREAM }, timeout: true, retry: true },
  utility: { dedup: false, breaker: UPSTREAM, concurrency: { name: UPSTREAM }, timeout: true, retry: true },
  metadata: { dedup: false, breaker: UPSTREAM, concurrency: false, timeout: true, retry: true },
  action: { dedup: false, breaker: UPSTREAM, concurrency: false, timeout: true, retry: false },
};

const METHOD = { GET: Get, POST: Post, DELETE: Delete } as const;

/**
 * A route that calls the provider, at its paths in `ROUTES` (aliases
 * included): the status, what the guard needs (the route, its body check),
 * and the shaping its kind gets, with values from the CLI.
 */
export function ProxyRoute(route: GatewayRoute, validate?: (body: unknown) => unknown) {
  const { method, kind } = ROUTES[route];
  return applyDecorators(
    METHOD[method](routePaths(route)),
    HttpCode(200),
    SetMetadata(ROUTE, { route, validate: validate ?? (method === 'POST' ? validateBody(route) : undefined) } satisfies RouteSpec),
    Orchestrate(SHAPING[kind]),
  );
}

/** Everything the service needs about the request it serves. */
export interface Caller {
  context: RequestContext;
  /** The shared call's signal (aborted on timeout or cancellation). */
  signal?: AbortSignal;
  /** The upstream of the pool this attempt goes to (see `urlOn`). */
  upstream?: Upstream;
  headers: IncomingMessage['headers'];
  /** The parsed JSON body of a POST route (absent when the request had none). */
  body?: unknown;
  /** The body's bytes as the client sent them, relayed unchanged where nothing is translated. */
  rawBody?: Buffer;
  /** The route's path parameters (e.g. `id_slot`). */
  params: Record<string, string>;
  /** The query string as the client sent it, with its `?` (or empty). */
  query: string;
}

type GatewayRequest = IncomingMessage & {
  body?: unknown;
  rawBody?: Buffer;
  params?: Record<string, string>;
  originalUrl?: string;
};

/** The `Caller` of a proxied route. */
export const CurrentCaller = createParamDecorator((_: unknown, ctx: ExecutionContext): Caller => {
  const request = ctx.switchToHttp().getRequest<GatewayRequest>();
  const url = request.originalUrl ?? request.url ?? '';
  const query = url.indexOf('?');
  return {
    context: contextOf(request),
    signal: callSignalOf(request),
    upstream: callUpstreamOf(request),
    headers: request.headers,
    body: request.body,
    rawBody: request.rawBody,
    params: request.params ?? {},
    query: query === -1 ? '' : url.slice(query),
  };
});
