import { ConfigurableModuleBuilder, type Provider, type Type } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import type { OrchestratorOptions } from '../core/orchestrator.js';
import { ORCHESTRATOR_OPTIONS } from './constants.js';
import { OrchestratorInterceptor } from './orchestrator.interceptor.js';

/** The module's options: the engine's (`OrchestratorOptions`), under the name Nest modules use. */
export type OrchestratorModuleOptions = OrchestratorOptions;

/** Settings of the module itself, given next to the options in `forRoot` / `forRootAsync`. */
export interface OrchestratorModuleExtras {
  /** Register the module globally. Default true. */
  isGlobal?: boolean;
  /** A subclass of `OrchestratorInterceptor` to register instead of it (e.g. to shape errors). */
  interceptor?: Type<OrchestratorInterceptor>;
}

export const { ConfigurableModuleClass, MODULE_OPTIONS_TOKEN, OPTIONS_TYPE, ASYNC_OPTIONS_TYPE } =
  new ConfigurableModuleBuilder<OrchestratorModuleOptions>({ moduleName: 'Orchestrator', optionsInjectionToken: ORCHESTRATOR_OPTIONS })
    .setClassMethodName('forRoot')
    .setExtras<OrchestratorModuleExtras>({ isGlobal: true, interceptor: undefined }, (definition, extras) => {
      const interceptor: Provider = { provide: APP_INTERCEPTOR, useClass: extras.interceptor ?? OrchestratorInterceptor };
      return { ...definition, global: extras.isGlobal, providers: [...(definition.providers ?? []), interceptor] };
    })
    .build();
