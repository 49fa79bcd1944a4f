import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { GraphQLModule } from '@nestjs/graphql';
import { OrchestratorModule } from 'nest-prompt-orchestrator';
import { Backend } from './backend.js';
import { SummaryResolver } from './summary.resolver.js';

@Module({
  imports: [
    OrchestratorModule.forRoot(),
    GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true }),
  ],
  providers: [Backend, SummaryResolver],
})
export class AppModule {}
