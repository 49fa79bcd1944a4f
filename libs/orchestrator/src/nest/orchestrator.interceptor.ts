import { Injectable, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Observable, catchError, defer, filter, from, map, mergeMap, of, throwError } from 'rxjs';
import { toCallEvents, type CallWork } from '../core/call.js';
import type { DedupRequest } from '../core/dedup/dedup.options.js';
import { isOrchestratorError, type OrchestratorError } from '../core/errors.js';
import { DEDUP_HEADER, headersSetSince, withHandlerHeaders, type HeaderValues } from '../core/http/answer-headers.js';
import { reuseOf } from '../core/http/cache-control.js';
import { HttpRoute } from '../core/http/route.js';
import { hashIdentity, type CallRequest, type StartedCall } from '../core/orchestrator.js';
import { dedupKey } from '../core/dedup/dedup-key.js';
import type { CallEvent } from '../core/events.js';
import { CAPABILITIES, type RoutePolicy, type RouteSettings } from '../core/policy.js';
import { claimInterceptor, scopeOf } from './app-scope.js';
import { CALL_SIGNAL, CALL_UPSTREAM, FALLBACK_METADATA, METADATA } from './constants.js';
import { withCallSignal, withServedHandler } from './contexts/call-scope.js';
import {
  describeContextCall,
  graphqlRequestOf,
  isOtherContextKind,
  wsClientIdentity,
  type OtherContextKind,
} from './contexts/context-calls.js';
import { OrchestratorGraphQLError, errorPayload, transportException } from './contexts/context-errors.js';
import { fallbackAnswers, type FallbackSetting } from './contexts/fallback.js';
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
 * look-up) on routes without orchestrator decorators. It serves HTTP routes,
 * GraphQL resolvers (`graphql`), microservice message and event handlers
 * (`rpc`) and WebSocket gateway messages (`ws`) alike; a decorated handler in
 * any other kind of context fails its call with an error naming it.
 *
 * To shape the orchestrator's own errors for your API, extend it, override
 * `throwOrchestratorError`, and give the class to
 * `OrchestratorModule.forRoot({ ... }, )`'s `interceptor` extra.
 */
@Injectable()
export class OrchestratorInterceptor implements NestInterceptor {
  // Resolved once per handler: decorators cannot change after start-up.
  private readonly routes = new WeakMap<object, HttpRoute | null>();
  private readonly fallbacks = new WeakMap<object, FallbackSetting | null>();
  private readonly identify?: (context: ExecutionContext) => string | undefined;
  /** False for every interceptor but the app's first: each `forRoot` import registers one. */
  private readonly serves: boolean;

  constructor(
    private readonly reflector: Reflector,
    protected readonly orchestrator: OrchestratorService,
    private readonly adapterHost: HttpAdapterHost,
  ) {
    this.serves = claimInterceptor(orchestrator, this);
    this.identify = scopeOf(orchestrator)?.settings.identify;
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (!this.serves) return next.handle();
    if (context.getType() !== 'http') return this.interceptOther(context, next);
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
    const tenant = this.identify
      ? (this.identityOf(context) ?? this.orchestrator.tenantOf(described))
      : this.orchestrator.tenantOf(described);
    const dedup = policy.dedup;
    const call: CallRequest = { tenant };
    if (dedup) {
      call.key = this.orchestrator.requestKey(policy, described, tenant);
      call.reuse = reuseOf(
        dedup.honorCacheControl ? request.headers['cache-control'] : undefined,
        dedup.store?.(described) ?? true,
      );
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
      return toCallEvents(
        next.handle().pipe(map((value) => withHandlerHeaders(value, headersSetSince(before, response.getHeaders!())))),
      );
    };

    const deliverStarted = (started: StartedCall<unknown>) => {
      if (started.outcome) adapter.setHeader(response, DEDUP_HEADER, started.outcome);
      if (started.ageSeconds !== undefined) adapter.setHeader(response, 'age', String(started.ageSeconds));
      const setStatus = (status: number) => {
        adapter.status(response, status);
      };
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
  private spanOf(
    tracing: RequestTracing,
    request: AnyRequest,
    raw: ServerResponse,
    described: DedupRequest,
  ): RequestSpan {
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
    if (span.recording)
      raw.once('close', () =>
        span.end(raw.writableFinished ? raw.statusCode : 499, raw.writableFinished ? undefined : 'client_closed'),
      );
    return span;
  }

  private rethrow(error: unknown, context: ExecutionContext): Observable<unknown> {
    const fallback = this.fallbackOf(context);
    if (fallback && fallbackAnswers(error)) return answerWith(fallback, error, context);
    if (!isOrchestratorError(error)) return throwError(() => error);
    if (error.code === 'client_closed_request') this.orchestrator.noteClientGone();
    return throwError(() => this.throwOrchestratorError(error, context));
  }

  /**
   * A GraphQL resolver, a microservice handler or a WebSocket message: the same
   * policy as a route's (breaker refusal, concurrency slot, shared call, time
   * limit and retries), keyed by the operation, its payload and the caller.
   * The handler reads the call's signal with `@CallSignal()` or `currentCallSignal()`.
   */
  private interceptOther(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const kind = context.getType<string>();
    const route = this.routeOf(context);
    const fallback = this.fallbackOf(context);
    if (!route && !fallback) return next.handle();
    if (!isOtherContextKind(kind)) {
      return throwError(
        () =>
          new Error(
            `${context.getClass().name}.${context.getHandler().name} has orchestrator decorators, but runs in a "${kind}" context, ` +
              'which OrchestratorModule does not serve (it serves http, graphql, rpc and ws): remove them, or call OrchestratorService.run() in the handler',
          ),
      );
    }
    const described = describeContextCall(kind, context, route?.name ?? '');
    const policy = route && !described.passThrough ? this.policyOf(context, described.method) : null;
    const onError = catchError((error: unknown) => this.answerOther(error, kind, context, fallback));
    // In scope even without a call of its own: the handler's guard (see `guardTransportHandlers`) looks for it.
    if (!policy) return withServedHandler(() => next.handle()).pipe(onError);

    const call: CallRequest = { tenant: this.identityOf(context) ?? this.defaultIdentity(kind, context) };
    const dedup = policy.dedup;
    if (dedup) {
      const request = described.request;
      call.key = dedup.key
        ? dedup.key(request)
        : dedupKey({ method: request.method, url: request.url, body: request.body, credential: call.tenant });
      if (dedup.store?.(request) === false) call.reuse = { noStore: true };
    }
    // Nest binds the handler's async context when `next.handle()` is called: the handler, its parameter
    // decorators and everything it awaits see this call's signal.
    const work: CallWork<unknown> = (signal) => toCallEvents(withCallSignal(signal, () => next.handle()));
    const local = this.orchestrator.startLocal(policy, call, work);
    const started = local ? of(local) : defer(() => this.orchestrator.start(policy, call, work));
    return started.pipe(
      mergeMap((s) => s.events),
      filter((event): event is Extract<CallEvent<unknown>, { kind: 'value' }> => event.kind === 'value'),
      map((event) => event.value),
      onError,
    );
  }

  /** The caller's identity from the module's `identify` option, hashed; `undefined` when it has none to give. */
  private identityOf(context: ExecutionContext): string | undefined {
    const identity = this.identify?.(context);
    return identity === undefined || identity === '' ? undefined : hashIdentity(identity);
  }

  /** Who calls, when `identify` does not say: the HTTP identity behind a GraphQL operation, a WebSocket's client, no one for a message. */
  private defaultIdentity(kind: OtherContextKind, context: ExecutionContext): string | undefined {
    if (kind === 'ws') {
      const client = wsClientIdentity(context.switchToWs().getClient());
      return client && hashIdentity(client);
    }
    if (kind === 'graphql') {
      const request = graphqlRequestOf(context);
      if (!request) return undefined;
      return this.orchestrator.tenantOf({
        method: 'POST',
        url: '',
        headers: request.headers ?? {},
        body: undefined,
        request,
      });
    }
    return undefined;
  }

  private answerOther(
    error: unknown,
    kind: OtherContextKind,
    context: ExecutionContext,
    fallback: FallbackSetting | null,
  ): Observable<unknown> {
    if (fallback && fallbackAnswers(error)) return answerWith(fallback, error, context);
    if (!isOrchestratorError(error)) return throwError(() => error);
    return from(Promise.resolve(this.contextErrorOf(error, context))).pipe(
      mergeMap((shaped) => throwError(() => shaped)),
    );
  }

  /**
   * Shapes the orchestrator's own errors outside HTTP. The default: for
   * GraphQL an error with `extensions: { code, retryAfterMs, retryable }`
   * (`code` such as `CIRCUIT_OPEN`), for microservices an `RpcException`, for
   * WebSockets a `WsException`, both carrying `{ status: 'error', code,
   * message, retryAfterMs, retryable }`. Override it to answer otherwise.
   */
  protected contextErrorOf(error: OrchestratorError, context: ExecutionContext): Error | Promise<Error> {
    const kind = context.getType<string>();
    if (kind === 'rpc' || kind === 'ws')
      return transportException(kind).then((Exception) => new Exception(errorPayload(error)));
    return new OrchestratorGraphQLError(error);
  }

  /** The handler's `@Fallback` (or its class's), looked up once. */
  private fallbackOf(context: ExecutionContext): FallbackSetting | null {
    const handler = context.getHandler();
    let fallback = this.fallbacks.get(handler);
    if (fallback === undefined) {
      fallback =
        this.reflector.get<FallbackSetting | undefined>(FALLBACK_METADATA, handler) ??
        this.reflector.get<FallbackSetting | undefined>(FALLBACK_METADATA, context.getClass()) ??
        null;
      this.fallbacks.set(handler, fallback);
    }
    return fallback;
  }

  /** The handler's route (its settings and name), resolved once; `null` when it asks for nothing. */
  private routeOf(context: ExecutionContext): HttpRoute | null {
    const handler = context.getHandler();
    let route = this.routes.get(handler);
    if (route === undefined) {
      route = this.resolveRoute(context.getClass(), handler);
      this.routes.set(handler, route);
    }
    return route;
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
      for (const [name, value] of Object.entries(errorHeaders(error)))
        this.adapterHost.httpAdapter.setHeader(response, name, value);
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

/** The fallback's answer to `cause`, given the handler's arguments as interceptors see them. */
function answerWith(fallback: FallbackSetting, cause: unknown, context: ExecutionContext): Observable<unknown> {
  return defer(async () => fallback.answer(cause, context.getArgs()));
}

export { reuseOf } from '../core/http/cache-control.js';
