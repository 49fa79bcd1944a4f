import { ConfigurableModuleBuilder, type Provider, type Type } from '@nestjs/common';
import { APP_INTERCEPTOR, ModulesContainer } from '@nestjs/core';
import type { ErrorShape } from '../core/http/errors.js';
import type { OrchestratorOptions } from '../core/orchestrator.js';
import { ORCHESTRATOR_OPTIONS } from './constants.js';
import { orchestratorOfApp } from './app-scope.js';
import { OrchestratorInterceptor } from './orchestrator.interceptor.js';
import { OrchestratorService } from './orchestrator.service.js';

/** The module's options: the engine's (`OrchestratorOptions`), under the name Nest modules use. */
export type OrchestratorModuleOptions = OrchestratorOptions;

/** Settings of the module itself, given next to the options in `forRoot` / `forRootAsync`. */
export interface OrchestratorModuleExtras {
  /** Register the module globally. Default true. */
  isGlobal?: boolean;
  /** A subclass of `OrchestratorInterceptor` to register instead of it (e.g. to shape errors). */
  interceptor?: Type<OrchestratorInterceptor>;
  /**
   * The body of the orchestrator's own errors (breaker open, overload, queue
   * wait, timeout): `nest` (default), Nest's `{ statusCode, message, error }`
   * plus `code`; or `openai`, `{ error: { message, type, param, code } }`, for
   * APIs that OpenAI SDKs call. Either way with `x-should-retry` and `Retry-After`.
   */
  errorShape?: ErrorShape;
}

export const { ConfigurableModuleClass, MODULE_OPTIONS_TOKEN, OPTIONS_TYPE, ASYNC_OPTIONS_TYPE } =
  new ConfigurableModuleBuilder<OrchestratorModuleOptions>({ moduleName: 'Orchestrator', optionsInjectionToken: ORCHESTRATOR_OPTIONS })
    .setClassMethodName('forRoot')
    .setExtras<OrchestratorModuleExtras>({ isGlobal: true, interceptor: undefined, errorShape: undefined }, (definition, extras) => {
      const settings = { interceptor: extras.interceptor ?? OrchestratorInterceptor, errorShape: extras.errorShape ?? 'nest' };
      const providers: Provider[] = [
        // One engine per app, however many modules import forRoot(): each import gets the same instance (or a
        // start-up error if it asks for other options), so there is one set of breakers, limiters and windows.
        {
          provide: OrchestratorService,
          useFactory: (options: OrchestratorOptions | undefined, app: ModulesContainer) => orchestratorOfApp(app, options, settings),
          inject: [{ token: ORCHESTRATOR_OPTIONS, optional: true }, ModulesContainer],
        },
        // Registered by every import; all but the app's first pass requests straight through (see OrchestratorInterceptor).
        { provide: APP_INTERCEPTOR, useClass: settings.interceptor },
      ];
      return {
        ...definition,
        global: extras.isGlobal,
        providers: [...(definition.providers ?? []), ...providers],
        exports: [...(definition.exports ?? []), OrchestratorService],
      };
    })
    .build();
