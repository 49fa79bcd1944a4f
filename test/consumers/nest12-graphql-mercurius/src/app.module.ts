import { Module } from '@nestjs/common';
import { GraphQLModule } from '@nestjs/graphql';
import { MercuriusDriver, type MercuriusDriverConfig } from '@nestjs/mercurius';
import { OrchestratorModule } from 'nest-prompt-orchestrator';
import { Backend } from './backend.js';
import { SummaryResolver } from './summary.resolver.js';

@Module({
  imports: [
    OrchestratorModule.forRoot(),
    GraphQLModule.forRoot<MercuriusDriverConfig>({ driver: MercuriusDriver, autoSchemaFile: true }),
  ],
  providers: [Backend, SummaryResolver],
})
export class AppModule {}
