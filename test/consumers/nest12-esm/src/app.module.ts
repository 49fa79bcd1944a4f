import { Module } from '@nestjs/common';
import { OrchestratorModule } from 'nest-prompt-orchestrator';
import { QuotesService } from './quotes.service.js';
import { ScenariosController } from './scenarios.controller.js';
import { Upstream } from './upstream.js';

@Module({
  imports: [OrchestratorModule.forRoot()],
  controllers: [ScenariosController],
  providers: [Upstream, QuotesService],
})
export class AppModule {}
