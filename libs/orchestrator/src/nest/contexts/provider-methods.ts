import type { ModulesContainer } from '@nestjs/core';
import { MetadataScanner } from '@nestjs/core';
import { isObservable } from 'rxjs';
import { dedupKey } from '../../core/dedup/dedup-key.js';
import type { DedupRequest } from '../../core/dedup/dedup.options.js';
import { HttpRoute, type RouteNames } from '../../core/http/route.js';
import type { RunCall } from '../../core/orchestrator.js';
import { OrchestratorConfigError } from '../../core/options.js';
import { FALLBACK_METADATA } from '../constants.js';
import type { OrchestratorService } from '../orchestrator.service.js';
import { withCallSignal } from './call-scope.js';
import { fallbackAnswers, type FallbackSetting } from './fallback.js';
import { asksOrchestrator, NEST_HANDLER_METADATA, settingsOf } from '../decorator-settings.js';

type AnyMethod = (this: unknown, ...args: unknown[]) => unknown;

// Nest calls these itself; a class-wide decorator is not meant for them.
const LIFECYCLE = new Set([
  'constructor',
  'onModuleInit',
  'onApplicationBootstrap',
  'onModuleDestroy',
  'beforeApplicationShutdown',
  'onApplicationShutdown',
]);
const NO_HEADERS: DedupRequest['headers'] = Object.freeze({});

/** Whether a method is a handler Nest calls through the interceptor (a route, a message pattern, a resolver field, a gateway message). */
function isHandler(method: object): boolean {
  return (
    Reflect.hasMetadata(NEST_HANDLER_METADATA.httpPath, method) ||
    Reflect.hasMetadata(NEST_HANDLER_METADATA.pattern, method) ||
    Reflect.hasMetadata(NEST_HANDLER_METADATA.resolverName, method) ||
    Reflect.hasMetadata(NEST_HANDLER_METADATA.messageMapping, method)
  );
}

function decoratedMethods(
  prototype: object,
  classAsks: boolean,
): Array<{ method: string; fn: AnyMethod; own: boolean }> {
  const found: Array<{ method: string; fn: AnyMethod; own: boolean }> = [];
  for (const method of new MetadataScanner().getAllMethodNames(prototype)) {
    const fn = (prototype as Record<string, unknown>)[method];
    if (typeof fn !== 'function' || LIFECYCLE.has(method)) continue;
    const own = asksOrchestrator(fn);
    if (own || classAsks) found.push({ method, fn: fn as AnyMethod, own });
  }
  return found;
}

const where = (type: { name: string }, method: string) => `${type.name}.${method}`;

/**
 * At start-up: wraps the decorated methods of the app's providers (a service
 * a cron job or a queue worker calls) so that their decorators take effect,
 * and stops start-up for a decorator placed where nothing would serve it (a
 * controller, resolver or gateway method that is not a handler, a
 * request-scoped or transient provider, a module class).
 */
export function serveProviderMethods(modules: ModulesContainer, service: OrchestratorService, names: RouteNames): void {
  const seen = new Set<object>();
  for (const module of modules.values()) {
    for (const wrapper of module.controllers.values()) {
      const type = wrapper.metatype as { name: string; prototype: object } | null | undefined;
      if (!type?.prototype) continue;
      for (const { method, fn, own } of decoratedMethods(type.prototype, false)) {
        if (own && !isHandler(fn))
          throw notServed(where(type, method), 'it is a method of a controller that is not a route or message handler');
      }
    }
    const moduleType = module.metatype as { name: string; prototype?: object } | undefined;
    if (moduleType?.prototype) {
      const [first] = decoratedMethods(moduleType.prototype, asksOrchestrator(moduleType));
      if (first) throw notServed(where(moduleType, first.method), 'it is a method of a module class');
    }
    for (const wrapper of module.providers.values()) {
      const instance: unknown = wrapper.instance;
      if (wrapper.isAlias || typeof instance !== 'object' || instance === null || seen.has(instance)) continue;
      seen.add(instance);
      const type = instance.constructor as { name: string; prototype: object };
      if (!type || type === Object) continue;
      const classAsks = asksOrchestrator(type);
      const methods = decoratedMethods(Object.getPrototypeOf(instance) as object, classAsks);
      if (methods.length === 0) continue;
      if (Reflect.hasMetadata('graphql:resolver_type', type) || Reflect.hasMetadata('websockets:is_gateway', type)) {
        // Resolvers and gateways are served by the interceptor, handler by handler.
        const stray = methods.find((m) => m.own && !isHandler(m.fn));
        if (stray)
          throw notServed(
            where(type, stray.method),
            'it is a method of a resolver or gateway that is not one of its handlers',
          );
        continue;
      }
      if (!wrapper.isDependencyTreeStatic() || wrapper.isTransient) {
        throw notServed(
          where(type, methods[0].method),
          'its provider is request-scoped or transient (only singleton providers are wrapped); call OrchestratorService.run() inside it instead',
        );
      }
      const classSettings = settingsOf(type);
      const classFallback = Reflect.getMetadata(FALLBACK_METADATA, type) as FallbackSetting | undefined;
      for (const { method, fn } of methods) {
        const name = names.implicitName(where(type, method), fn);
        const settings = settingsOf(fn);
        names.check(name, settings, classSettings);
        const fallback = (Reflect.getMetadata(FALLBACK_METADATA, fn) as FallbackSetting | undefined) ?? classFallback;
        (instance as Record<string, unknown>)[method] = orchestrated(
          service,
          new HttpRoute(service, name, settings, classSettings),
          fn,
          fallback,
        );
      }
    }
  }
}

function notServed(name: string, why: string): OrchestratorConfigError {
  return new OrchestratorConfigError(
    `${name} has orchestrator decorators that nothing would apply: ${why}. ` +
      'They take effect on HTTP routes, GraphQL resolvers, microservice and WebSocket handlers, and methods of singleton providers',
  );
}

/**
 * The method under its policy: breaker refusal, concurrency slot, one call for
 * identical concurrent calls (keyed by the method and its arguments), time
 * limit and retries, then the fallback. It returns a Promise whatever the
 * method returned; `currentCallSignal()` gives it the call's signal.
 */
function orchestrated(
  service: OrchestratorService,
  route: HttpRoute,
  original: AnyMethod,
  fallback: FallbackSetting | undefined,
): AnyMethod {
  // Answers of a method are shared while in flight; kept for a window only when it asks (`windowMs`), like a POST.
  const policy = route.policyFor('POST');
  const wrapped = function (this: unknown, ...args: unknown[]): unknown {
    let result: Promise<unknown>;
    if (!policy) {
      result = invoke(original, this, args);
    } else {
      const call: RunCall = {};
      const dedup = policy.dedup;
      if (dedup) {
        const request: DedupRequest = { method: 'CALL', url: route.name, headers: NO_HEADERS, body: args };
        call.key = dedup.key ? dedup.key(request) : dedupKey({ method: 'CALL', url: route.name, body: args });
        if (dedup.store?.(request) === false) call.reuse = { noStore: true };
      }
      result = service.run(policy, (signal) => withCallSignal(signal, () => invokeLazily(original, this, args)), call);
    }
    if (!fallback) return result;
    return result.catch((error: unknown) => {
      if (!fallbackAnswers(error)) throw error;
      return fallback.answer(error, args);
    });
  };
  Object.defineProperty(wrapped, 'name', { value: original.name });
  return wrapped;
}

function invoke(original: AnyMethod, self: unknown, args: unknown[]): Promise<unknown> {
  try {
    return Promise.resolve(original.apply(self, args));
  } catch (error) {
    return Promise.reject(error);
  }
}

/** The method's answer as `run()` takes it: its Observable as it is, anything else as a promise. */
function invokeLazily(original: AnyMethod, self: unknown, args: unknown[]) {
  try {
    const value = original.apply(self, args);
    return isObservable(value) ? value : Promise.resolve(value);
  } catch (error) {
    return Promise.reject(error);
  }
}
