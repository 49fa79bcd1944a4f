import { Get, HttpCode, Post, SetMetadata, applyDecorators, createParamDecorator, type ExecutionContext } from '@nestjs/common';
import { Orchestrate, callSignalOf } from 'nest-prompt-orchestrator';
import type { IncomingMessage } from 'node:http';
import { contextOf, type RequestContext } from '../http/request-context.js';
import { ROUTES, type GatewayRoute } from '../providers/provider.js';

/** The breaker and concurrency limiter every model route shares: there is one upstream. */
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
 * A route that calls the provider, at its path in `ROUTES`: the status, what
 * the guard needs (the route, its body check), and the shaping every model
 * route gets: dedup, breaker refusal, a concurrency slot, the timed call and
 * the gateway's bounded retries, with values from the CLI.
 */
export function ProxyRoute(route: GatewayRoute, validate?: (body: unknown) => unknown) {
  const { path, method } = ROUTES[route];
  return applyDecorators(
    method === 'GET' ? Get(path) : Post(path),
    HttpCode(200),
    SetMetadata(ROUTE, { route, validate } satisfies RouteSpec),
    Orchestrate({ dedup: true, breaker: UPSTREAM, concurrency: { name: UPSTREAM }, timeout: true, retry: true }),
  );
}

/** Everything the service needs about the request it serves. */
export interface Caller {
  context: RequestContext;
  /** The shared call's signal (aborted on timeout or cancellation). */
  signal?: AbortSignal;
  headers: IncomingMessage['headers'];
  /** The parsed JSON body of a POST route. */
  body?: Record<string, unknown>;
  /** The body's bytes as the client sent them, relayed unchanged where nothing is translated. */
  rawBody?: Buffer;
}

type GatewayRequest = IncomingMessage & { body?: Record<string, unknown>; rawBody?: Buffer };

/** The `Caller` of a proxied route. */
export const CurrentCaller = createParamDecorator((_: unknown, ctx: ExecutionContext): Caller => {
  const request = ctx.switchToHttp().getRequest<GatewayRequest>();
  return {
    context: contextOf(request),
    signal: callSignalOf(request),
    headers: request.headers,
    body: request.body,
    rawBody: request.rawBody,
  };
});
