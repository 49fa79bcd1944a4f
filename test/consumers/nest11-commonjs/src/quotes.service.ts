import { Injectable } from '@nestjs/common';
import { OrchestratorService } from 'nest-prompt-orchestrator';
import { Upstream } from './upstream';

/** Not a route: the same capabilities through OrchestratorService.run(). */
@Injectable()
export class QuotesService {
  constructor(
    private readonly orchestrator: OrchestratorService,
    private readonly upstream: Upstream,
  ) {}

  quote(symbol: string) {
    return this.orchestrator.run(
      { key: `quote:${symbol}`, dedup: true, breaker: 'quotes', concurrency: 4, timeout: 1_000 },
      (signal) => this.upstream.quote(symbol, signal),
    );
  }
}
