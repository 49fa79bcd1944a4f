import { CAPABILITIES, type RouteSettings } from '../core/policy.js';
import { FALLBACK_METADATA, METADATA } from './constants.js';

/** The orchestrator settings its decorators put on a class or a method (only those given). */
export function settingsOf(target: object): RouteSettings {
  const settings: Record<string, unknown> = {};
  for (const c of CAPABILITIES) {
    const value: unknown = Reflect.getMetadata(METADATA[c], target);
    if (value !== undefined) settings[c] = value;
  }
  return settings;
}

/** Whether a class or a method carries any orchestrator decorator, `@Fallback` included. */
export function asksOrchestrator(target: object): boolean {
  return (
    CAPABILITIES.some((c) => Reflect.getMetadata(METADATA[c], target) !== undefined) ||
    Reflect.getMetadata(FALLBACK_METADATA, target) !== undefined
  );
}

/**
 * Nest's metadata keys of handlers, read by name: this package does not import @nestjs/microservices,
 * @nestjs/websockets or @nestjs/graphql.
 */
export const NEST_HANDLER_METADATA = {
  httpPath: 'path',
  pattern: 'microservices:pattern',
  eventHandlerType: 'microservices:handler_type',
  resolverName: 'graphql:resolver_name',
  messageMapping: 'websockets:message_mapping',
  gateway: 'websockets:is_gateway',
} as const;
