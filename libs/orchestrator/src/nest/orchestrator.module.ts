import { Module, Optional, type DynamicModule, type OnModuleInit } from '@nestjs/common';
import { ModulesContainer } from '@nestjs/core';
import { scopeOf } from './app-scope.js';
import { ConfigurableModuleClass, type OPTIONS_TYPE } from './orchestrator.module-definition.js';
import { OrchestratorService } from './orchestrator.service.js';
import { checkRoutes } from './route-check.js';
import { serveProviderMethods } from './contexts/provider-methods.js';
import { guardTransportHandlers } from './contexts/transport-guard.js';

/**
 * `OrchestratorModule.forRoot()` (zero config) or
 * `forRoot({ dedup: { windowMs: 60_000 }, breakers: { openai: { healthProbe } } })`,
 * or `forRootAsync({ useFactory, inject, imports })`. It is global by default and
 * registers the interceptor that serves `@Dedup`, `@CircuitBreaker`,
 * `@Concurrency`, `@CallTimeout`, `@Retry`, `@Fallback` and `@Orchestrate` on
 * every HTTP route, GraphQL resolver, microservice handler and WebSocket
 * gateway message, and at start-up wraps the decorated methods of singleton
 * providers so that they apply there too. A decorated message or WebSocket
 * handler the interceptor does not reach (a microservice connected without
 * `inheritAppConfig`) fails its calls with an error saying so.
 *
 * Import it once, in the root module. Importing it from several modules is
 * safe: they share one interceptor and one set of breakers, limiters and
 * windows; imports that ask for different options stop start-up with an error.
 */
@Module({})
export class OrchestratorModule extends ConfigurableModuleClass implements OnModuleInit {
  constructor(
    @Optional() private readonly orchestrator?: OrchestratorService,
    @Optional() private readonly modules?: ModulesContainer,
  ) {
    super();
    // Here, not in onModuleInit: a hybrid app connects its microservices (and Nest reads their handlers) before init().
    const scope = orchestrator && scopeOf(orchestrator);
    if (scope && !scope.handlersGuarded && modules) {
      scope.handlersGuarded = true;
      guardTransportHandlers(modules);
    }
  }

  // Nest's generated forRoot reads the keys of its argument: without this default, forRoot() throws.
  static override forRoot(options: typeof OPTIONS_TYPE = {}): DynamicModule {
    return super.forRoot(options);
  }

  /**
   * Once per app, at start-up: checks every decorated route (see
   * `checkRoutes`), and wraps the decorated methods of providers so that their
   * decorators take effect (see `serveProviderMethods`).
   */
  onModuleInit(): void {
    const scope = this.orchestrator && scopeOf(this.orchestrator);
    if (!scope || scope.routesChecked || !this.modules) return;
    scope.routesChecked = true;
    checkRoutes(this.modules, scope.names);
    serveProviderMethods(this.modules, scope.service, scope.names);
  }
}
