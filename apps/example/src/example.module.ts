import { Module } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { OrchestratorModule } from 'nest-prompt-orchestrator';
import { ConversionService } from './conversion.service.js';
import { FeedModule } from './feed.module.js';
import { OrchestratorErrorFilter } from './orchestrator-error.filter.js';
import { RatesController } from './rates.controller.js';
import { RatesFeed } from './rates-feed.js';

@Module({
  imports: [
    FeedModule,
    OrchestratorModule.forRootAsync({
      imports: [FeedModule],
      inject: [RatesFeed],
      // Everything that calls the feed uses the name 'rates-feed': the routes and ConversionService share one
      // breaker and one concurrency limit.
      useFactory: (feed: RatesFeed) => ({
        breakers: { 'rates-feed': { failureThreshold: 5, openMs: 30_000, healthProbe: (signal) => feed.ping(signal) } },
        limits: { 'rates-feed': { limit: 4, queueSize: 20, maxWaitMs: 5_000 } },
      }),
    }),
  ],
  controllers: [RatesController],
  providers: [ConversionService, { provide: APP_FILTER, useClass: OrchestratorErrorFilter }],
})
export class ExampleModule {}
