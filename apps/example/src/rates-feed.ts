import { BadGatewayException, Injectable } from '@nestjs/common';

export type FeedMode = 'ok' | 'down' | 'hang';

export interface FeedStats {
  mode: FeedMode;
  latencyMs: number;
  /** Calls the feed received since start (each one is billed in real life). */
  calls: number;
  inFlight: number;
  maxInFlight: number;
  /** Calls cancelled by their caller's signal (e.g. a timeout). */
  aborted: number;
}

/**
 * Stands in for a slow, metered upstream: a rates feed that takes `latencyMs` to answer, bills every call, and can be
 * switched to `down` (fails at once with 502) or `hang` (never answers) to see the breaker and the timeout at work. It lives
 * in-process so the example needs nothing else running.
 */
@Injectable()
export class RatesFeed {
  mode: FeedMode = 'ok';
  latencyMs = Number(process.env.FEED_LATENCY_MS ?? 500);
  private calls = 0;
  private inFlight = 0;
  private maxInFlight = 0;
  private aborted = 0;

  /** Rates of one unit of `base` in a few other currencies. */
  async latest(
    base: string,
    signal: AbortSignal,
  ): Promise<{ base: string; rates: Record<string, number>; asOf: string }> {
    this.calls++;
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      if (this.mode === 'down') throw new BadGatewayException('the rates feed is unavailable');
      await this.wait(this.mode === 'hang' ? Number.POSITIVE_INFINITY : this.latencyMs, signal);
      return { base, rates: ratesFor(base), asOf: new Date().toISOString() };
    } finally {
      this.inFlight--;
    }
  }

  /** The health check the breaker runs while open: resolves when the feed answers again. */
  async ping(signal: AbortSignal): Promise<boolean> {
    if (signal.aborted) return false;
    return this.mode === 'ok';
  }

  stats(): FeedStats {
    const { mode, latencyMs, calls, inFlight, maxInFlight, aborted } = this;
    return { mode, latencyMs, calls, inFlight, maxInFlight, aborted };
  }

  private wait(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = Number.isFinite(ms) ? setTimeout(done, ms) : undefined;
      const onAbort = () => {
        clearTimeout(timer);
        this.aborted++;
        reject(signal.reason);
      };
      function done() {
        signal.removeEventListener('abort', onAbort);
        resolve();
      }
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}

/** Made-up values in US dollars; other codes get a stable made-up value, so that answers can be compared. */
const USD_VALUE: Record<string, number> = { USD: 1, EUR: 1.08, GBP: 1.27, CHF: 1.13, JPY: 0.0067 };

function ratesFor(base: string): Record<string, number> {
  const value = (code: string) =>
    USD_VALUE[code] ?? 0.5 + ([...code].reduce((sum, char) => sum + char.charCodeAt(0), 0) % 100) / 100;
  const rates: Record<string, number> = {};
  for (const code of Object.keys(USD_VALUE)) {
    if (code !== base) rates[code] = Math.round((value(base) / value(code)) * 10_000) / 10_000;
  }
  return rates;
}
