import type { ExecutionContext, Type } from '@nestjs/common';
import type { ErrorShape } from '../core/http/errors.js';
import { RouteNames, sameSettings } from '../core/http/route.js';
import type { OrchestratorOptions } from '../core/orchestrator.js';
import { OrchestratorConfigError } from '../core/options.js';
import { OrchestratorService } from './orchestrator.service.js';

/** What one `forRoot` / `forRootAsync` import asks for beside the engine's options. */
export interface ModuleSettings {
  interceptor: Type<unknown>;
  errorShape: ErrorShape;
  /** Who the caller of a route, resolver or message handler is (see `OrchestratorModuleExtras.identify`). */
  identify?: (context: ExecutionContext) => string | undefined;
}

/** The orchestrator of one Nest app: whichever import came first made it; the others share it. */
interface AppScope {
  readonly service: OrchestratorService;
  readonly options: OrchestratorOptions | undefined;
  readonly settings: ModuleSettings;
  /** The interceptor that serves the app's routes (the first one Nest made); the others pass requests through. */
  interceptor?: object;
  /** Breaker and limiter names claimed by the app's routes (checked once, at start-up). */
  readonly names: RouteNames;
  routesChecked: boolean;
  /** Whether the decorated message and WebSocket handlers are wrapped with their check (see `guardTransportHandlers`). */
  handlersGuarded: boolean;
}

// Keyed by the app's module container: one process may hold several apps (tests do), each with its own engine.
const apps = new WeakMap<object, AppScope>();
const scopes = new WeakMap<OrchestratorService, AppScope>();

/**
 * The app's `OrchestratorService`: made by the first import of the module, and
 * the same instance for every later one. A later import with other options is
 * a mistake that would otherwise go unnoticed (whichever module loaded first
 * would win), so it stops start-up.
 */
export function orchestratorOfApp(
  app: object,
  options: OrchestratorOptions | undefined,
  settings: ModuleSettings,
): OrchestratorService {
  const scope = apps.get(app);
  if (!scope) {
    const service = new OrchestratorService(options);
    const made: AppScope = {
      service,
      options,
      settings,
      names: new RouteNames(),
      routesChecked: false,
      handlersGuarded: false,
    };
    apps.set(app, made);
    scopes.set(service, made);
    return service;
  }
  if (!sameSettings(scope.options ?? {}, options ?? {}) || !sameSettings(scope.settings, settings)) {
    throw new OrchestratorConfigError(
      'OrchestratorModule is imported more than once with different options. Import OrchestratorModule.forRoot() once, ' +
        'in the root module (it is global by default), or give every import the same options: the app has one ' +
        'interceptor, one set of breakers and limiters and one answer window.',
    );
  }
  return scope.service;
}

/** The app scope of a service made by the module (absent for one built by hand). */
export function scopeOf(service: OrchestratorService): AppScope | undefined {
  return scopes.get(service);
}

/**
 * Whether `interceptor` is the one that serves the app: the first one made
 * for this service claims it. Every `forRoot` import registers an interceptor,
 * and Nest would run each of them on every request (a `@Retry` route ran its
 * handler once per import per attempt).
 */
export function claimInterceptor(service: OrchestratorService, interceptor: object): boolean {
  const scope = scopes.get(service);
  if (!scope) return true;
  scope.interceptor ??= interceptor;
  return scope.interceptor === interceptor;
}
