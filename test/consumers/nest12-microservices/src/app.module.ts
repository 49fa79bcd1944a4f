import { Module } from '@nestjs/common';
import { OrchestratorModule } from 'nest-prompt-orchestrator';
import { Backend } from './backend.js';
import { SummaryHandlers } from './summary.handlers.js';

@Module({
  imports: [
    OrchestratorModule.forRoot({
      // Microservice messages carry no credentials of their own: the tenant in the payload says who asks, so two
      // tenants never share an answer.
      identify: (context) =>
        context.getType() === 'rpc' ? context.switchToRpc().getData<{ tenant?: string }>()?.tenant : undefined,
    }),
  ],
  controllers: [SummaryHandlers],
  providers: [Backend],
})
export class AppModule {}
