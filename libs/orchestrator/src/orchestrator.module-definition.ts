import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { OrchestratorModuleOptions } from './orchestrator.options.js';

export const { ConfigurableModuleClass, MODULE_OPTIONS_TOKEN, OPTIONS_TYPE, ASYNC_OPTIONS_TYPE } =
  new ConfigurableModuleBuilder<OrchestratorModuleOptions>({ moduleName: 'Orchestrator' })
    .setClassMethodName('forRoot')
    .setExtras({ isGlobal: true }, (definition, extras) => ({ ...definition, global: extras.isGlobal }))
    .build();
