import { BadRequestException, Injectable } from '@nestjs/common';
import { OrchestratorService } from 'nest-prompt-orchestrator';
import { RatesFeed } from './rates-feed.js';

/**
 * Not a route: a service method gets the same protection through `OrchestratorService.run()`. Conversions from one
 * base currency share one feed call (and its answer, for the window), under the same breaker and limit as the routes.
 */
@Injectable()
export class ConversionService {
  constructor(
    private readonly orchestrator: OrchestratorService,
    private readonly feed: RatesFeed,
  ) {}

  async convert(from: string, to: string, amount: number) {
    if (!Number.isFinite(amount)) throw new BadRequestException('amount must be a number');
    const latest = await this.orchestrator.run(
      {
        key: `rates:${from}`,
        dedup: { windowMs: 10_000 },
        breaker: 'rates-feed',
        concurrency: { name: 'rates-feed' },
        timeout: 2_000,
      },
      (signal) => this.feed.latest(from, signal),
    );
    const rate = latest.rates[to];
    if (rate === undefined) throw new BadRequestException(`no rate from ${from} to ${to}`);
    return { from, to, amount, converted: Math.round(amount * rate * 100) / 100, asOf: latest.asOf };
  }
}
