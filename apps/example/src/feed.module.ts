import { Module } from '@nestjs/common';
import { RatesFeed } from './rates-feed.js';

@Module({ providers: [RatesFeed], exports: [RatesFeed] })
export class FeedModule {}
