import {
  Injectable,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Observable, catchError, from, mergeMap, throwError } from 'rxjs';
import { toCallEvents, type CallWork } from './core/call-pipeline.js';
import { ClientClosedError, isOrchestratorError } from './core/orchestrator-errors.js';
import { deliver } from './http/deliver-response.js';
import { errorHeaders, toHttpException } from './http/error-response.js';
import { NormalizedOrchestrateOptions } from './orchestrate.options.js';
import {
  BREAKER_METADATA,
  CALL_SIGNAL,
  CONCURRENCY_METADATA,
  DEDUP_HEADER,
  DEDUP_METADATA,
  TIMEOUT_METADATA,
  RETRY_METADATA,
} from './orchestrator.constants.js';
import { OrchestratorService, type ResolvedPolicy } from './orchestrator.service.js';

type AnyRequest = IncomingMessage & {
  originalUrl?: string;
  body?: unknown;
  raw?: IncomingMessage;
  [CALL_SIGNAL]?: AbortSignal;
};
type AnyResponse = ServerResponse | { raw: ServerResponse };

/**
 * Applies the route's dedup, breaker, concurrency and timeout settings. It is
 * registered globally by `OrchestratorModule`, and does nothing (one WeakMap
 * look-up) on routes without orchestrator decorators.
 */
@Injectable()
export class OrchestratorInterceptor implements NestInterceptor {
  // Resolved once per handler: decorators cannot change after start-up.
  private readonly policies = new WeakMap<object, ResolvedPolicy | null>();

  constructor(
    private readonly reflector: Reflector,
    private readonly orchestrator: OrchestratorService,
    private readonly adapterHost: HttpAdapterHost,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.getType() !== 'http') return next.handle();
    const policy = this.policyOf(context);
    if (!policy) return next.handle();

    const http = context.switchToHttp();
    const request = http.getRequest<AnyRequest>();
    const response = http.getResponse<AnyResponse>();
    const raw = 'raw' in response ? response.raw : response;
    const adapter = this.adapterHost.httpAdapter;
    const setHeaders = (headers: Record<string, string>) => {
      for (const [name, value] of Object.entries(headers)) adapter.setHeader(response, name, value);
    };

    const key = policy.dedup
      ? this.orchestrator.keyOf(policy, {
          method: request.method ?? 'GET',
          url: request.originalUrl ?? request.url ?? '',
          headers: request.headers,
          body: request.body,
        })
      : undefined;
    const work: CallWork<unknown> = (signal) => {
      request[CALL_SIGNAL] = signal;
      return toCallEvents(next.handle());
    };

    return from(this.orchestrator.start(policy, key, work)).pipe(
      mergeMap((started) => {
        if (started.outcome) adapter.setHeader(response, DEDUP_HEADER, started.outcome);
        return deliver(started.events, { raw, setHeaders });
      }),
      catchError((error: unknown) => {
        if (error instanceof ClientClosedError) this.orchestrator.noteClientGone();
        else if (isOrchestratorError(error) && !raw.headersSent) setHeaders(errorHeaders(error));
        return throwError(() => toHttpException(error));
      }),
    );
  }

  /** Override to derive settings some other way; called once per route. */
  protected policyOf(context: ExecutionContext): ResolvedPolicy | null {
    const handler = context.getHandler();
    let policy = this.policies.get(handler);
    if (policy === undefined) {
      const controller = context.getClass();
      const read = (target: object): NormalizedOrchestrateOptions => ({
        dedup: this.reflector.get(DEDUP_METADATA, target as never),
        breaker: this.reflector.get(BREAKER_METADATA, target as never),
        concurrency: this.reflector.get(CONCURRENCY_METADATA, target as never),
        timeout: this.reflector.get(TIMEOUT_METADATA, target as never),
        retry: this.reflector.get(RETRY_METADATA, target as never),
      });
      const route = read(handler);
      // A route's own concurrency settings get a limiter of its own (`Class.method`): sharing the
      // class's would give it whichever limit the first route called happened to create it with.
      const own = route.concurrency;
      if (own && own.name === undefined && Object.keys(own).length > 0) {
        route.concurrency = { ...own, name: `${controller.name}.${handler.name}` };
      }
      const resolved = this.orchestrator.resolve(route, read(controller), controller.name);
      const any = resolved.dedup || resolved.breaker || resolved.limiter || resolved.timeLimits || resolved.retry;
      policy = any ? resolved : null;
      this.policies.set(handler, policy);
    }
    return policy;
  }
}
