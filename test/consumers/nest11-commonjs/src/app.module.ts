import { Module } from '@nestjs/common';
import { OrchestratorModule } from 'nest-prompt-orchestrator';
import { QuotesService } from './quotes.service';
import { ScenariosController } from './scenarios.controller';
import { Upstream } from './upstream';

@Module({
  imports: [OrchestratorModule.forRoot()],
  controllers: [ScenariosController],
  providers: [Upstream, QuotesService],
})
export class AppModule {}
