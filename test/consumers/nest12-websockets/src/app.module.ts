import { Module } from '@nestjs/common';
import { OrchestratorModule } from 'nest-prompt-orchestrator';
import { Backend } from './backend.js';
import { SummaryGateway } from './summary.gateway.js';

@Module({ imports: [OrchestratorModule.forRoot()], providers: [Backend, SummaryGateway] })
export class AppModule {}
