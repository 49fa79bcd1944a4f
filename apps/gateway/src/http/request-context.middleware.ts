import { Inject, Injectable, type NestMiddleware } from '@nestjs/common';
import { ShuttingDownError, attachRequestSpan } from 'nest-prompt-orchestrator/core';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_CONFIG } from '../common/gateway.tokens.js';
import { ROUTES, routeAt, type ClientApi } from '../providers/provider.js';
import { unroutedApi } from './error-reply.js';
import { Lifecycle } from '../common/lifecycle.js';
import { GatewayTelemetry } from '../observability/gateway-telemetry.js';
import { GatewayTracing } from '../observability/gateway-tracing.js';
import { attachContext, newContext, pathOfUrl, requestIdOf, serverTiming } from '../observability/request-context.js';

/**
 * Runs first on every request: gives it a context with an `x-request-id`
 * (propagated or new), and adds `Server-Timing` when the headers go out.
 */
@Injectable()
export class RequestContextMiddleware implements NestMiddleware {
  private readonly defaultApi: ClientApi;

  constructor(
    @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
    private readonly lifecycle: Lifecycle,
    private readonly telemetry: GatewayTelemetry,
    private readonly tracing: GatewayTracing,
  ) {
    this.defaultApi = unroutedApi(config);
  }

  use(
    request: IncomingMessage & { originalUrl?: string },
    response: ServerResponse,
    next: (error?: unknown) => void,
  ): void {
    const { id, given } = requestIdOf(request.headers);
    // Until a route matches, the API its path names: a body the parser rejects is still answered in it.
    const route = routeAt(request.originalUrl ?? request.url ?? '');
    const context = newContext(id, given, route ? ROUTES[route].api : this.defaultApi, undefined);
    attachContext(request, context);
    const tracing = this.tracing.tracing;
    // Only the model API is traced: scrapes, probes and the status page are the control plane.
    if (tracing && route) {
      const path = pathOfUrl(request.originalUrl ?? request.url);
      const spec = ROUTES[route];
      // A span's name stays low in cardinality: the route's path, never a path a client made up.
      context.span = tracing.startServerSpan(`${request.method ?? 'GET'} ${spec.path}`, request.headers, {
        ...GatewayTracing.requestAttributes(this.config, route, request.method ?? 'GET', path),
        'http.route': spec.path,
        'gateway.request_id': id,
      });
      // The orchestrator's interceptor takes this span instead of starting one; the telemetry ends it.
      attachRequestSpan(request, context.span);
    }
    response.setHeader('x-request-id', id);
    // Called below with the response as `this`.
    // eslint-disable-next-line @typescript-eslint/unbound-method
    const writeHead = response.writeHead;
    response.writeHead = function (this: ServerResponse, ...args: unknown[]) {
      if (!this.headersSent) this.setHeader('server-timing', serverTiming(context, performance.now()));
      return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args);
    };
    // A request that arrives on an open connection while the gateway drains: retryable, elsewhere.
    if (this.lifecycle.isDraining) {
      this.lifecycle.refuse(response);
      context.span?.end(503, 'shutting_down');
      return next(new ShuttingDownError());
    }
    this.lifecycle.track(response);
    if (this.telemetry.enabled) this.telemetry.track(request, response, context);
    next();
  }
}
