/**
 * `nest-prompt-orchestrator/fastify`: the engine as a Fastify plugin, without
 * Nest. Register it, then give a route `config: { orchestrate: { ... } }`:
 *
 * ```ts
 * await app.register(orchestratorPlugin, { breakers: { llm: { failureThreshold: 3 } } });
 * app.post('/answer', { config: { orchestrate: { dedup: true, breaker: 'llm', timeout: 30_000 } } }, async (request) =>
 *   answer(request.body, { signal: callSignalOf(request) }),
 * );
 * ```
 *
 * The handler returns its answer (a value, a `RawResponse` or a `StreamedResponse`);
 * the plugin sends it, shared with identical requests as the Nest module does.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { HeaderValues } from '../core/http/answer-headers.js';
import type { ErrorShape } from '../core/http/errors.js';
import { HttpRoute, RouteNames } from '../core/http/route.js';
import { serve } from '../core/http/serve.js';
import { Orchestrator, type OrchestratorOptions } from '../core/orchestrator.js';
import { OrchestratorConfigError } from '../core/options.js';
import { normalizeOrchestrate, type OrchestrateOptions } from '../core/policy.js';

// Brings Fastify's types in for the augmentation below (types only: nothing of Fastify is loaded at run time).
import type {} from 'fastify';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route's dedup, breaker, concurrency, timeout and retry settings (see `nest-prompt-orchestrator/fastify`). */
    orchestrate?: OrchestrateOptions;
  }
}

/** The plugin's options: the engine's, or an engine of your own, and the shape of its error answers. */
export interface FastifyOrchestratorOptions extends OrchestratorOptions {
  /** Use this engine (shared with other code) instead of making one from the options. */
  orchestrator?: Orchestrator;
  /** `nest` (`{ statusCode, message, error, code }`, Fastify's own shape plus `code`; default) or `openai`. */
  errorShape?: ErrorShape;
}

/** The parts of Fastify's request and reply the plugin uses. */
interface RequestLike {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body?: unknown;
  raw: IncomingMessage;
}
interface ReplyLike {
  raw: ServerResponse;
  header(name: string, value: string): unknown;
  getHeaders(): HeaderValues;
  code(status: number): unknown;
  type(contentType: string): unknown;
  send(payload?: unknown): unknown;
}
type Handler = (this: unknown, request: RequestLike, reply: ReplyLike) => unknown;
interface RouteLike {
  method: string | string[];
  url: string;
  handler: Handler;
  config?: { orchestrate?: OrchestrateOptions };
}
interface FastifyLike {
  addHook(name: 'onRoute', hook: (route: RouteLike) => void): unknown;
  addHook(name: 'onClose', hook: (instance: unknown, done: () => void) => void): unknown;
}

const SIGNAL = Symbol.for('nest-prompt-orchestrator.call-signal');

/** The AbortSignal of the call a request is part of (aborted on timeout, or when nobody waits any more). */
export function callSignalOf(request: object): AbortSignal | undefined {
  return (request as Record<symbol, AbortSignal | undefined>)[SIGNAL];
}

const engines = new WeakMap<object, Orchestrator>();

/** The engine the plugin serves a Fastify instance with (its health, `run` for code that is not a route). */
export function orchestratorOf(instance: object): Orchestrator | undefined {
  return engines.get(instance);
}

/**
 * The plugin. It applies to the routes registered after it in the same
 * instance and its children (it does not add an encapsulation context of its
 * own, like plugins made with `fastify-plugin`). Each route gets its own
 * breaker and limiter (named by method and path) unless it names one; routes
 * that give one name different settings fail at registration.
 */
export function orchestratorPlugin(
  instance: unknown,
  options: FastifyOrchestratorOptions,
  done: (error?: Error) => void,
): void {
  try {
    const { orchestrator: given, errorShape = 'nest', ...engineOptions } = options ?? {};
    if (errorShape !== 'nest' && errorShape !== 'openai')
      throw new OrchestratorConfigError(`errorShape must be "nest" or "openai"`);
    const orchestrator = given ?? new Orchestrator(engineOptions);
    const app = instance as FastifyLike;
    const names = new RouteNames();
    engines.set(instance as object, orchestrator);
    app.addHook('onRoute', (route) => {
      const asked = route.config?.orchestrate;
      if (!asked) return;
      const methods = Array.isArray(route.method) ? route.method.join(',') : route.method;
      const name = `${methods} ${route.url}`;
      const settings = normalizeOrchestrate(asked, `route ${name}`);
      names.check(name, settings);
      const policies = new HttpRoute(orchestrator, name, settings);
      const handler = route.handler;
      route.handler = async function orchestrated(request, reply) {
        let sent: unknown;
        await serve(
          orchestrator,
          policies,
          {
            method: request.method,
            url: request.url,
            headers: request.headers,
            body: request.body,
            request,
            raw: reply.raw,
            setHeader: (header, value) => void reply.header(header, value),
            getHeaders: () => reply.getHeaders(),
            send: (value, status) => {
              if (status !== undefined) reply.code(status);
              sent = reply.send(value);
            },
            stream: (body: Readable, contentType) => {
              reply.type(contentType);
              sent = reply.send(body);
            },
          },
          (signal) => {
            (request as unknown as Record<symbol, AbortSignal>)[SIGNAL] = signal;
            return handler.call(this, request, reply);
          },
          errorShape,
        );
        return sent;
      };
    });
    // Only an engine the plugin made is closed with the app; one given to it belongs to its owner.
    if (!given) app.addHook('onClose', (_instance, closed) => void orchestrator.close().then(closed, closed));
    done();
  } catch (error) {
    done(error as Error);
  }
}

// What `fastify-plugin` would set: the plugin's hooks apply to the instance that registers it, not to a child.
Object.assign(orchestratorPlugin, {
  [Symbol.for('skip-override')]: true,
  [Symbol.for('fastify.display-name')]: 'nest-prompt-orchestrator',
});

export { Orchestrator } from '../core/orchestrator.js';
export { StreamedResponse, RawResponse } from '../core/events.js';
