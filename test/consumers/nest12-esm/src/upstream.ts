import {
  BadGatewayException,
  CanActivate,
  ExecutionContext,
  Injectable,
  ServiceUnavailableException,
} from '@nestjs/common';

/**
 * Stands in for a slow, paid dependency: counts every call it receives, and
 * holds calls until the test releases them.
 */
@Injectable()
export class Upstream {
  readonly calls = { answer: 0, fail: 0, slot: 0, hang: 0, quote: 0, flakyOnce: 0, ticker: 0 };
  /** Requests that reached a route (counted by a guard, before the orchestrator sees them). */
  readonly arrivals: Record<string, number> = {};
  active = 0;
  maxActive = 0;
  hungCallAborted = false;
  private releaseGate!: () => void;
  private readonly gate = new Promise<void>((resolve) => (this.releaseGate = resolve));

  release(): void {
    this.releaseGate();
  }

  async answer(question: string) {
    const call = ++this.calls.answer;
    await this.gate;
    return { question, call };
  }

  async fail(): Promise<never> {
    this.calls.fail++;
    throw new BadGatewayException('the upstream is down');
  }

  async slot() {
    this.calls.slot++;
    this.active++;
    this.maxActive = Math.max(this.maxActive, this.active);
    try {
      await this.gate;
      return { ok: true };
    } finally {
      this.active--;
    }
  }

  hang(signal: AbortSignal): Promise<never> {
    this.calls.hang++;
    return new Promise((_, reject) => {
      signal.addEventListener(
        'abort',
        () => {
          this.hungCallAborted = true;
          reject(signal.reason);
        },
        { once: true },
      );
    });
  }

  async quote(symbol: string, signal: AbortSignal) {
    this.calls.quote++;
    await new Promise((resolve) => setTimeout(resolve, 50));
    signal.throwIfAborted();
    return { symbol, price: 100 + symbol.length };
  }

  async flakyOnce(body: unknown) {
    const attempt = ++this.calls.flakyOnce;
    if (attempt === 1) throw new ServiceUnavailableException('try again');
    return { echo: body, attempt };
  }

  async *ticks(): AsyncGenerator<string> {
    this.calls.ticker++;
    for (let n = 1; n <= 3; n++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      yield `data: ${n}\n\n`;
    }
  }
}

/** Counts the requests that reached each route. */
@Injectable()
export class CountArrivals implements CanActivate {
  constructor(private readonly upstream: Upstream) {}

  canActivate(context: ExecutionContext): boolean {
    const route = context.getHandler().name;
    this.upstream.arrivals[route] = (this.upstream.arrivals[route] ?? 0) + 1;
    return true;
  }
}
