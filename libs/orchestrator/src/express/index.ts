/**
 * `nest-prompt-orchestrator/express`: the engine as Express middleware,
 * without Nest. Wrap a route's handler; the handler returns its answer (a
 * value, a `RawResponse` or a `StreamedResponse`) and the middleware sends it,
 * shared with identical requests as the Nest module does:
 *
 * ```ts
 * const orchestrate = orchestrated({ breakers: { llm: { failureThreshold: 3 } } });
 * app.post('/answer', express.json(), orchestrate({ dedup: true, breaker: 'llm', timeout: 30_000 }, (req, res, signal) =>
 *   answer(req.body, { signal }),
 * ));
 * ```
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { ErrorShape } from '../core/http/errors.js';
import { HttpRoute, RouteNames } from '../core/http/route.js';
import { serve } from '../core/http/serve.js';
import { Orchestrator, type OrchestratorOptions } from '../core/orchestrator.js';
import { OrchestratorConfigError } from '../core/options.js';
import { normalizeOrchestrate, type OrchestrateOptions } from '../core/policy.js';

/** The middleware factory's options: the engine's, or an engine of your own, and the shape of its error answers. */
export interface ExpressOrchestratorOptions extends OrchestratorOptions {
  /** Use this engine (shared with other code) instead of making one from the options. */
  orchestrator?: Orchestrator;
  /** `nest` (`{ statusCode, message, error, code }`; default) or `openai`. */
  errorShape?: ErrorShape;
}

/** The parts of Express's request the middleware reads. */
export interface ExpressRequestLike extends IncomingMessage {
  body?: unknown;
  originalUrl?: string;
  baseUrl?: string;
  route?: { path?: unknown };
}
/** The parts of Express's response the middleware uses. */
export interface ExpressResponseLike extends ServerResponse {
  status(code: number): unknown;
  send(body?: unknown): unknown;
  json(body?: unknown): unknown;
  type(contentType: string): unknown;
}

/** A handler under the orchestrator: it returns the answer (or a promise of it) instead of sending it. */
export type OrchestratedHandler<
  Req extends ExpressRequestLike = ExpressRequestLike,
  Res extends ExpressResponseLike = ExpressResponseLike,
> = (request: Req, response: Res, signal: AbortSignal) => unknown;

/** An Express request handler (middleware signature). */
export type ExpressMiddleware<Req, Res> = (request: Req, response: Res, next: (error?: unknown) => void) => void;

/** What `orchestrated()` returns: wraps handlers; `orchestrator` is the engine behind them. */
export interface Orchestrate {
  <Req extends ExpressRequestLike, Res extends ExpressResponseLike>(
    options: OrchestrateOptions & { name?: string },
    handler: OrchestratedHandler<Req, Res>,
  ): ExpressMiddleware<Req, Res>;
  readonly orchestrator: Orchestrator;
}

/**
 * Makes the middleware factory. Each wrapped route gets its own breaker and
 * limiter (named `options.name`, else after the handler's function name,
 * numbered when another handler has that name too) unless the options name
 * one; wrapping routes that give one name different settings throws at once.
 */
export function orchestrated(options: ExpressOrchestratorOptions = {}): Orchestrate {
  const { orchestrator: given, errorShape = 'nest', ...engineOptions } = options;
  if (errorShape !== 'nest' && errorShape !== 'openai')
    throw new OrchestratorConfigError(`errorShape must be "nest" or "openai"`);
  const orchestrator = given ?? new Orchestrator(engineOptions);
  const names = new RouteNames();
  const wrap = <Req extends ExpressRequestLike, Res extends ExpressResponseLike>(
    routeOptions: OrchestrateOptions & { name?: string },
    handler: OrchestratedHandler<Req, Res>,
  ): ExpressMiddleware<Req, Res> => {
    const { name: given, ...asked } = routeOptions;
    const name = given ?? names.implicitName(handler.name || 'route', handler);
    const settings = normalizeOrchestrate(asked, `orchestrate() ${name}`);
    names.check(name, settings);
    const route = new HttpRoute(orchestrator, name, settings);
    return (request, response, next) => {
      serve(
        orchestrator,
        route,
        {
          method: request.method ?? 'GET',
          url: request.originalUrl ?? request.url ?? '',
          headers: request.headers,
          body: request.body,
          request,
          raw: response,
          setHeader: (header, value) => void response.setHeader(header, value),
          getHeaders: () => response.getHeaders(),
          send: (value, status) => {
            if (status !== undefined) response.status(status);
            if (Buffer.isBuffer(value) || typeof value === 'string') response.send(value);
            else response.json(value);
          },
          stream: (body: Readable, contentType) => {
            response.type(contentType);
            body.pipe(response);
          },
        },
        (signal) => handler(request, response, signal),
        errorShape,
      ).catch(next);
    };
  };
  return Object.assign(wrap, { orchestrator });
}

export { Orchestrator } from '../core/orchestrator.js';
export { StreamedResponse, RawResponse } from '../core/events.js';
