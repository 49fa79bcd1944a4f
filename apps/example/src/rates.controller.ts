import { BadRequestException, Body, Controller, Get, Param, ParseFloatPipe, Put, Query } from '@nestjs/common';
import { CallSignal, CircuitBreaker, Concurrency, Dedup, Timeout } from 'nest-prompt-orchestrator';
import { ConversionService } from './conversion.service.js';
import { RatesFeed, type FeedMode } from './rates-feed.js';

@Controller()
export class RatesController {
  constructor(
    private readonly feed: RatesFeed,
    private readonly conversions: ConversionService,
  ) {}

  /** Identical requests share one feed call and its answer for 10 s; a failing feed is refused fast. */
  @Get('rates/:base')
  @Dedup({ windowMs: 10_000 })
  @CircuitBreaker('rates-feed')
  @Concurrency({ name: 'rates-feed' })
  @Timeout(2_000)
  rates(@Param('base') base: string, @CallSignal() signal: AbortSignal) {
    return this.feed.latest(base.toUpperCase(), signal);
  }

  @Get('convert')
  convert(@Query('from') from: string, @Query('to') to: string, @Query('amount', ParseFloatPipe) amount: number) {
    return this.conversions.convert(String(from).toUpperCase(), String(to).toUpperCase(), amount);
  }

  /** The demo's controls: what the feed received, and its mode (`ok`, `down`, `hang`). */
  @Get('feed')
  stats() {
    return this.feed.stats();
  }

  @Put('feed/mode')
  setMode(@Body() body: { mode?: FeedMode }) {
    if (body?.mode !== 'ok' && body?.mode !== 'down' && body?.mode !== 'hang') {
      throw new BadRequestException('mode must be ok, down or hang');
    }
    this.feed.mode = body.mode;
    return this.feed.stats();
  }
}
