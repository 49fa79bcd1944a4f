import { Body, Controller, Get, HttpCode, Param, Post, UseGuards } from '@nestjs/common';
import {
  CallSignal,
  CircuitBreaker,
  Concurrency,
  Dedup,
  Orchestrate,
  StreamedResponse,
  CallTimeout,
} from 'nest-prompt-orchestrator';
import { QuotesService } from './quotes.service';
import { CountArrivals, Upstream } from './upstream';

@Controller()
export class ScenariosController {
  constructor(
    private readonly upstream: Upstream,
    private readonly quotes: QuotesService,
  ) {}

  @Post('answer')
  @HttpCode(200)
  @UseGuards(CountArrivals)
  // A POST: finished answers are replayed only because the route asks for a window.
  @Dedup({ windowMs: 300_000 })
  answer(@Body() body: { question: string }) {
    return this.upstream.answer(body.question);
  }

  @Get('fail')
  @CircuitBreaker('flaky')
  fail() {
    return this.upstream.fail();
  }

  @Get('slot')
  @UseGuards(CountArrivals)
  @Concurrency({ limit: 2, queueSize: 1, maxWaitMs: 10_000 })
  slot() {
    return this.upstream.slot();
  }

  @Get('hang')
  @CallTimeout(200)
  hang(@CallSignal() signal: AbortSignal) {
    return this.upstream.hang(signal);
  }

  @Post('flaky-once')
  @Orchestrate({
    dedup: true,
    breaker: 'flaky-once',
    concurrency: 4,
    timeout: 5_000,
    retry: { retries: 1, baseDelayMs: 10 },
  })
  flakyOnce(@Body() body: Record<string, unknown>) {
    return this.upstream.flakyOnce(body);
  }

  @Get('ticker')
  @Dedup()
  @CallTimeout({ ms: 2_000, idleMs: 500 })
  ticker() {
    return new StreamedResponse(this.upstream.ticks());
  }

  @Get('quotes/:symbol')
  quote(@Param('symbol') symbol: string) {
    return this.quotes.quote(symbol);
  }
}
