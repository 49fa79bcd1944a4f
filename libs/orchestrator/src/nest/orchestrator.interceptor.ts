import { Injectable, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Observable, catchError, from, map, mergeMap, throwError } from 'rxjs';
import { toCallEvents, type CallWork } from '../core/call.js';
import type { DedupRequest } from '../core/dedup/dedup.options.js';
import { isOrchestratorError, type OrchestratorError } from '../core/errors.js';
import { DEDUP_HEADER, headersSetSince, withHandlerHeaders, type HeaderValues } from '../core/http/answer-headers.js';
import { reuseOf } from '../core/http/cache-control.js';
import { HttpRoute } from '../core/http/route.js';
import type { CallRequest, StartedCall } from '../core/orchestrator.js';
import { CAPABILITIES, type RoutePolicy, type RouteSettings } from '../core/policy.js';
import { claimInterceptor, scopeOf } from './app-scope.js';
import { CALL_SIGNAL, CALL_UPSTREAM, METADATA } from './constants.js';
import type { Upstream } from '../core/upstreams/upstream-pool.js';
import { requestSpanOf, type RequestSpan, type RequestTracing } from '../core/tracing/request-tracing.js';
import { deliver } from './deliver-response.js';
import { errorHeaders, orchestratorHttpException } from './http-errors.js';
import { OrchestratorService } from './orchestrator.service.js';

type AnyRequest = IncomingMessage & {
  originalUrl?: string;
  /** The matched route's pattern: Express's `route.path`, Fastify's `routeOptions.url`. */
  route?: { path?: unknown };
  routeOptions?: { url?: unknown };
  body?: unknown;
  raw?: IncomingMessage;
  [CALL_SIGNAL]?: AbortSignal;
  [CALL_UPSTREAM]?: Upstream;
};
/** Express's response, or Fastify's reply: both can list the headers set so far. */
type AnyResponse = (ServerResponse | { raw: ServerResponse }) & { getHeaders?: () => HeaderValues };

/**
 * Applies the route's dedup, breaker, concurrency and timeout settings. It is
 * registered globally by `OrchestratorModule`, and does nothing (one WeakMap
 * look-up) on routes without orchestrator decorators.
 *
 * To shape the orchestrator's own errors for your API, extend it, override
 * `throwOrchestratorError`, and give the class to
 * `OrchestratorModule.forRoot({ ... }, )`'s `interceptor` extra.
 */
@Injectable()
export class OrchestratorInterceptor implements NestInterceptor {
  // Resolved once per handler: decorators cannot change after start-up.
  private readonly routes = new WeakMap<object, HttpRoute | null>();
  /** False for every interceptor but the app's first: each `forRoot` import registers one. */
  private readonly serves: boolean;

  constructor(
    private readonly reflector: Reflector,
    protected readonly orchestrator: OrchestratorService,
    private readonly adapterHost: HttpAdapterHost,
  ) {
    this.serves = claimInterceptor(orchestrator, this);
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (!this.serves || context.getType() !== 'http') return next.handle();
    const http = context.switchToHttp();
    const request = http.getRequest<AnyRequest>();
    const policy = this.policyOf(context, request.method ?? 'GET');
    // A route without settings of its own may still call `OrchestratorService.run()`: its refusals are answered the same way.
    if (!policy) return next.handle().pipe(catchError((error: unknown) => this.rethrow(error, context)));

    const response = http.getResponse<AnyResponse>();
    const raw = 'raw' in response ? response.raw : response;
    const adapter = this.adapterHost.httpAdapter;
    const setHeaders = (headers: Record<string, string>) => {
      for (const [name, value] of Object.entries(headers)) adapter.setHeader(response, name, value);
    };

    const described: DedupRequest = {
      method: request.method ?? 'GET',
      url: request.originalUrl ?? request.url ?? '',
      headers: request.headers,
      body: request.body,
      request,
    };
    const tenant = this.orchestrator.tenantOf(described);
    const dedup = policy.dedup;
    const call: CallRequest = { tenant };
    if (dedup) {
      call.key = this.orchestrator.requestKey(policy, described, tenant);
      call.reuse = reuseOf(dedup.honorCacheControl ? request.headers['cache-control'] : undefined, dedup.store?.(described) ?? true);
    }
    const tracing = this.orchestrator.tracing;
    if (tracing) call.trace = this.spanOf(tracing, request, raw, described);
    // The handler runs when `next.handle()` is subscribed, and its parameters are resolved then: the
    // signal put on the request here is what `@CallSignal()` reads.
    const work: CallWork<unknown> = (signal, upstream) => {
      request[CALL_SIGNAL] = signal;
      request[CALL_UPSTREAM] = upstream;
      // Headers the handler sets while it runs (`@Res({ passthrough: true })`) belong to the answer: they go
      // with it to every joined and replayed caller. Only deduplicated answers need them carried.
      if (!dedup || !response.getHeaders) return toCallEvents(next.handle());
      const before = { ...response.getHeaders() };
      return toCallEvents(next.handle().pipe(map((value) => withHandlerHeaders(value, headersSetSince(before, response.getHeaders!())))));
    };

    const deliverStarted = (started: StartedCall<unknown>) => {
      if (started.outcome) adapter.setHeader(response, DEDUP_HEADER, started.outcome);
      if (started.ageSeconds !== undefined) adapter.setHeader(response, 'age', String(started.ageSeconds));
      const setStatus = (status: number) => adapter.status(response, status);
      return deliver(started.events, { raw, setHeaders, setStatus, platform: adapter.getType() });
    };
    const onError = catchError((error: unknown) => this.rethrow(error, context));
    // Without a shared store or a fleet to ask, the call starts without a promise in between.
    const local = this.orchestrator.startLocal(policy, call, work);
    if (local) return deliverStarted(local).pipe(onError);
    return from(this.orchestrator.start(policy, call, work)).pipe(mergeMap(deliverStarted), onError);
  }

  /**
   * The request's server span: one an earlier layer started and attached
   * (`attachRequestSpan`; that layer ends it), else one started here and
   * ended when the response is over.
   */
  private spanOf(tracing: RequestTracing, request: AnyRequest, raw: ServerResponse, described: DedupRequest): RequestSpan {
    const attached = requestSpanOf(request);
    if (attached) return attached;
    const pattern = request.routeOptions?.url ?? request.route?.path;
    const route = typeof pattern === 'string' ? pattern : undefined;
    const path = described.url.split('?', 1)[0];
    const span = tracing.startServerSpan(`${described.method} ${route ?? path}`, request.headers, {
      'http.request.method': described.method,
      'http.route': route,
      'url.path': path,
    });
    // A client that left before its answer was written: 499, as nginx logs it.
    if (span.recording) raw.once('close', () => span.end(raw.writableFinished ? raw.statusCode : 499, raw.writableFinished ? undefined : 'client_closed'));
    return span;
  }

  private rethrow(error: unknown, context: ExecutionContext): Observable<never> {
    if (!isOrchestratorError(error)) return throwError(() => error);
    if (error.code === 'client_closed_request') this.orchestrator.noteClientGone();
    return throwError(() => this.throwOrchestratorError(error, context));
  }

  /**
   * Shapes the orchestrator's own errors (circuit open, overload, queue wait,
   * timeout, client gone). The default sets `x-should-retry: false` and
   * `Retry-After` (see `errorHeaders`) and throws an `HttpException` with the
   * error's status and a body in the module's `errorShape` (Nest's by
   * default). Override it to answer in your API's format, or rethrow the
   * error for an exception filter of your own.
   */
  protected throwOrchestratorError(error: OrchestratorError, context: ExecutionContext): never {
    const response = context.switchToHttp().getResponse<AnyResponse>();
    const raw = 'raw' in response ? response.raw : response;
    if (!raw.headersSent) {
      for (const [name, value] of Object.entries(errorHeaders(error))) this.adapterHost.httpAdapter.setHeader(response, name, value);
    }
    throw orchestratorHttpException(error, scopeOf(this.orchestrator)?.settings.errorShape);
  }

  /**
   * Override to derive settings some other way; called for every request of a
   * decorated route (the route is resolved once, then looked up).
   */
  protected policyOf(context: ExecutionContext, method = 'GET'): RoutePolicy | null {
    const handler = context.getHandler();
    let route = this.routes.get(handler);
    if (route === undefined) {
      route = this.resolveRoute(context.getClass(), handler);
      this.routes.set(handler, route);
      const policy = route?.policyFor(method);
      if (policy?.dedup && !policy.dedup.key) this.orchestrator.noteDedupRoute();
      return policy ?? null;
    }
    return route && route.policyFor(method);
  }

  private resolveRoute(controller: { name: string }, handler: { name: string }): HttpRoute | null {
    const read = (target: object): RouteSettings =>
      Object.fromEntries(CAPABILITIES.map((c) => [c, this.reflector.get(METADATA[c], target as never)]));
    const route = read(handler);
    const classSettings = read(controller);
    if (CAPABILITIES.every((c) => route[c] === undefined && classSettings[c] === undefined)) return null;
    // Breakers and limiters are the route's own (`Class.method`) unless they are named: sharing is asked for.
    const base = `${controller.name}.${handler.name}`;
    const name = scopeOf(this.orchestrator)?.names.implicitName(base, handler) ?? base;
    return new HttpRoute(this.orchestrator, name, route, classSettings);
  }
}

export { reuseOf } from '../core/http/cache-control.js';
