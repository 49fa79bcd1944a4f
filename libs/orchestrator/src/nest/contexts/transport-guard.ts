import { Logger } from '@nestjs/common';
import type { ModulesContainer } from '@nestjs/core';
import { MetadataScanner } from '@nestjs/core';
import { inOrchestratedCall } from './call-scope.js';
import { transportException } from './context-errors.js';
import { asksOrchestrator, NEST_HANDLER_METADATA } from '../decorator-settings.js';

type AnyMethod = (this: unknown, ...args: unknown[]) => unknown;
type HandlerKind = 'rpc' | 'ws';

const {
  pattern: PATTERN,
  eventHandlerType: EVENT_HANDLER_TYPE,
  messageMapping: MESSAGE_MAPPING,
  gateway: GATEWAY,
  httpPath: HTTP_PATH,
} = NEST_HANDLER_METADATA;

/** What a caller of an unserved message handler gets as the error's `code`. */
export const NOT_ORCHESTRATED_CODE = 'ORCHESTRATOR_NOT_APPLIED';

const guards = new WeakSet<object>();

/**
 * At start-up, before the app connects its microservices: wraps every
 * decorated message, event and WebSocket message handler with a check that
 * the interceptor runs around it. Nest gives a microservice connected to a
 * hybrid app without `{ inheritAppConfig: true }` none of the app's global
 * interceptors, and there the decorators would silently do nothing: the
 * handler fails instead, with an error naming it and the fix (logged once).
 * Prototypes are wrapped, not instances: Nest reads a handler when the
 * microservice is connected, which may be before the app's `init()`.
 */
export function guardTransportHandlers(modules: ModulesContainer): void {
  const scanner = new MetadataScanner();
  for (const module of modules.values()) {
    const classes = [...module.controllers.values(), ...module.providers.values()].map(
      (wrapper) => wrapper.metatype as unknown,
    );
    for (const type of classes) {
      // Classes only: a factory provider's metatype is its factory function, with no handlers.
      if (!isClass(type)) continue;
      const isGateway = Reflect.hasMetadata(GATEWAY, type);
      const classAsks = asksOrchestrator(type);
      const prototype = type.prototype as Record<string, unknown>;
      for (const method of scanner.getAllMethodNames(type.prototype)) {
        const handler = prototype[method];
        if (typeof handler !== 'function' || guards.has(handler)) continue;
        // A method that is also an HTTP route is left as it is: HTTP calls must not pay for this check.
        const kind: HandlerKind | undefined = Reflect.hasMetadata(HTTP_PATH, handler)
          ? undefined
          : Reflect.hasMetadata(PATTERN, handler)
            ? 'rpc'
            : isGateway && Reflect.hasMetadata(MESSAGE_MAPPING, handler)
              ? 'ws'
              : undefined;
        if (!kind || !(classAsks || asksOrchestrator(handler))) continue;
        prototype[method] = guarded(handler as AnyMethod, kind, `${type.name}.${method}`);
      }
    }
  }
}

function isClass(value: unknown): value is { name: string; prototype: object } {
  return typeof value === 'function' && typeof (value as { prototype?: unknown }).prototype === 'object';
}

function guarded(original: AnyMethod, kind: HandlerKind, name: string): AnyMethod {
  let logged = false;
  const isEvent = kind === 'rpc' && Reflect.getMetadata(EVENT_HANDLER_TYPE, original) === 2;
  const guard = function (this: unknown, ...args: unknown[]): unknown {
    if (inOrchestratedCall()) return original.apply(this, args);
    const message = notServedMessage(kind, name, isEvent);
    if (!logged) {
      logged = true;
      new Logger('Orchestrator').error(message);
    }
    return transportException(kind).then((Exception) => {
      throw new Exception({ status: 'error', code: NOT_ORCHESTRATED_CODE, message, retryable: false });
    });
  };
  // Nest reads the handler's metadata (its pattern, guards, pipes, the orchestrator's settings) from the function it calls.
  for (const key of Reflect.getOwnMetadataKeys(original) as unknown[]) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, original), guard);
  }
  Object.defineProperty(guard, 'name', { value: original.name });
  guards.add(guard);
  return guard;
}

function notServedMessage(kind: HandlerKind, name: string, isEvent: boolean): string {
  if (kind === 'rpc') {
    return (
      `${name} has orchestrator decorators, but OrchestratorInterceptor did not run for this ${isEvent ? 'event' : 'message'}, ` +
      "so they would do nothing: a microservice connected to a hybrid app gets none of the app's global interceptors unless " +
      'it is connected with app.connectMicroservice(options, { inheritAppConfig: true })'
    );
  }
  return (
    `${name} has orchestrator decorators, but OrchestratorInterceptor did not run for this WebSocket message, so they ` +
    'would do nothing: serve the gateway from the app that imports OrchestratorModule.forRoot()'
  );
}
