import { Module, type DynamicModule } from '@nestjs/common';
import { ConfigurableModuleClass, type OPTIONS_TYPE } from './orchestrator.module-definition.js';
import { OrchestratorService } from './orchestrator.service.js';

/**
 * Import once, in the root module: `OrchestratorModule.forRoot()` (zero config)
 * or `forRoot({ dedup: { windowMs: 60_000 }, breakers: { openai: { healthProbe } } })`,
 * or `forRootAsync({ useFactory, inject, imports })`. It is global by default and
 * registers the interceptor that serves `@Dedup`, `@CircuitBreaker`,
 * `@Concurrency`, `@Timeout` and `@Orchestrate` on every controller.
 */
@Module({
  providers: [OrchestratorService],
  exports: [OrchestratorService],
})
export class OrchestratorModule extends ConfigurableModuleClass {
  // Nest's generated forRoot reads the keys of its argument: without this default, forRoot() throws.
  static override forRoot(options: typeof OPTIONS_TYPE = {}): DynamicModule {
    return super.forRoot(options);
  }
}
