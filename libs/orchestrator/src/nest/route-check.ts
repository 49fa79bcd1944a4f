import { Catch, Injectable, Logger, type ExceptionFilter, type OnModuleInit } from '@nestjs/common';
import { MetadataScanner, ModuleRef, ModulesContainer } from '@nestjs/core';
import { RouteNames } from '../core/http/route.js';
import type { RouteSettings } from '../core/policy.js';
import { ORCHESTRATOR_OPTIONS } from './constants.js';
import { settingsOf } from './decorator-settings.js';

type Controller = { name: string; prototype: object };

/** Every controller method of the app that has orchestrator settings (its own or its class's). */
function decoratedRoutes(
  modules: ModulesContainer,
  names: RouteNames,
): Array<{ name: string; route: RouteSettings; controller: RouteSettings }> {
  const scanner = new MetadataScanner();
  const found: Array<{ name: string; route: RouteSettings; controller: RouteSettings }> = [];
  const seen = new Set<unknown>();
  for (const module of modules.values()) {
    for (const wrapper of module.controllers.values()) {
      const type = wrapper.metatype as Controller | null | undefined;
      if (!type || seen.has(type)) continue;
      seen.add(type);
      const controller = settingsOf(type);
      const classAsks = Object.keys(controller).length > 0;
      for (const method of scanner.getAllMethodNames(type.prototype)) {
        const handler = (type.prototype as Record<string, unknown>)[method];
        if (typeof handler !== 'function') continue;
        const route = settingsOf(handler);
        if (classAsks || Object.keys(route).length > 0)
          found.push({ name: names.implicitName(`${type.name}.${method}`, handler), route, controller });
      }
    }
  }
  return found;
}

/**
 * At start-up, before any request: every breaker and limiter name stands for
 * one set of settings (see `RouteNames`). Otherwise the first route called
 * would decide the settings of all the routes that share the name.
 */
export function checkRoutes(modules: ModulesContainer, names: RouteNames): void {
  for (const { name, route, controller } of decoratedRoutes(modules, names)) names.check(name, route, controller);
}

/** Never thrown: the filter below catches nothing, it only runs at start-up. */
class NotAnError {}

const warned = new WeakSet<object>();

/**
 * Added by every orchestrator decorator, so that Nest makes it (once per
 * module) while it starts the app: that is the only code of this package that
 * runs in an app whose decorators have no module to serve them, and there they
 * would silently do nothing. It catches no exception (`NotAnError` is never
 * thrown), so it costs nothing per request.
 */
@Injectable()
@Catch(NotAnError)
export class OrchestratorModuleCheck implements ExceptionFilter, OnModuleInit {
  private readonly logger = new Logger('Orchestrator');

  constructor(
    private readonly moduleRef: ModuleRef,
    private readonly modules: ModulesContainer,
  ) {}

  onModuleInit(): void {
    if (warned.has(this.modules)) return;
    try {
      // Looked up by its options token, a Symbol.for: the module of another copy of this package (its ESM and
      // CommonJS builds in one app) serves these decorators too, and must count as imported.
      this.moduleRef.get(ORCHESTRATOR_OPTIONS, { strict: false });
      return;
    } catch {
      // Not found: the module was not imported.
    }
    warned.add(this.modules);
    const routes = decoratedRoutes(this.modules, new RouteNames()).map((r) => r.name);
    const listed = routes.slice(0, 5).join(', ') + (routes.length > 5 ? `, and ${routes.length - 5} more` : '');
    this.logger.warn(
      `orchestrator decorators are used${listed ? ` (${listed})` : ''} but OrchestratorModule is not imported, so they do nothing: ` +
        'add OrchestratorModule.forRoot() to the imports of the root module',
    );
  }

  catch(): void {
    // Unreachable: see the class comment.
  }
}
