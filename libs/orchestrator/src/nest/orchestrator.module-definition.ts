import { ConfigurableModuleBuilder, type ExecutionContext, type Provider, type Type } from '@nestjs/common';
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
  /**
   * Who the caller is, in any context (like @nestjs/throttler's `getTracker`):
   * part of every dedup key, so that callers never share answers, and their
   * line in the concurrency queue. The string is hashed before use. Return
   * `undefined` to keep the context's default: over HTTP the `tenant` option
   * (else the `authorization`, `x-api-key` and `cookie` headers); for GraphQL
   * the same, read from the HTTP request in the GraphQL context (`req` or
   * `request`); for WebSockets the client's socket id; for microservices none.
   * Not called for provider methods (their arguments are their key).
   *
   * @example
   * ```ts
   * identify: (context) => context.getType() === 'rpc' ? context.switchToRpc().getData<{ tenantId?: string }>().tenantId : undefined
   * ```
   */
  identify?: (context: ExecutionContext) => string | undefined;
}

export const { ConfigurableModuleClass, MODULE_OPTIONS_TOKEN, OPTIONS_TYPE, ASYNC_OPTIONS_TYPE } =
  new ConfigurableModuleBuilder<OrchestratorModuleOptions>({
    moduleName: 'Orchestrator',
    optionsInjectionToken: ORCHESTRATOR_OPTIONS,
  })
    .setClassMethodName('forRoot')
    .setExtras<OrchestratorModuleExtras>(
      { isGlobal: true, interceptor: undefined, errorShape: undefined, identify: undefined },
      (definition, extras) => {
        const settings = {
          interceptor: extras.interceptor ?? OrchestratorInterceptor,
          errorShape: extras.errorShape ?? 'nest',
          identify: extras.identify,
        };
        const providers: Provider[] = [
          // One engine per app, however many modules import forRoot(): each import gets the same instance (or a
          // start-up error if it asks for other options), so there is one set of breakers, limiters and windows.
          {
            provide: OrchestratorService,
            useFactory: (options: OrchestratorOptions | undefined, app: ModulesContainer) =>
              orchestratorOfApp(app, options, settings),
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
      },
    )
    .build();
