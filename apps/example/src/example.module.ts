import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { APP_FILTER } from '@nestjs/core';
import { GraphQLModule } from '@nestjs/graphql';
import { OrchestratorModule } from 'nest-prompt-orchestrator';
import { ConversionService } from './conversion.service.js';
import { FeedModule } from './feed.module.js';
import { OrchestratorErrorFilter } from './orchestrator-error.filter.js';
import { RatesController } from './rates.controller.js';
import { RatesHandlers } from './rates.handlers.js';
import { RatesResolver } from './rates.resolver.js';
import { RatesFeed } from './rates-feed.js';

@Module({
  imports: [
    FeedModule,
    OrchestratorModule.forRootAsync({
      imports: [FeedModule],
      inject: [RatesFeed],
      // Everything that calls the feed uses the name 'rates-feed': the HTTP routes, the GraphQL resolver, the TCP
      // message handler and ConversionService share one breaker and one concurrency limit.
      useFactory: (feed: RatesFeed) => ({
        breakers: { 'rates-feed': { failureThreshold: 5, openMs: 30_000, healthProbe: (signal) => feed.ping(signal) } },
        limits: { 'rates-feed': { limit: 4, queueSize: 20, maxWaitMs: 5_000 } },
      }),
    }),
    // GraphQL at /graphql, the schema generated from the resolver's decorators (kept in memory).
    GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true }),
  ],
  controllers: [RatesController, RatesHandlers],
  providers: [ConversionService, RatesResolver, { provide: APP_FILTER, useClass: OrchestratorErrorFilter }],
})
export class ExampleModule {}
