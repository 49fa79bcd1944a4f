import { HttpException } from '@nestjs/common';
import { Gate } from '../../support/platforms.js';

/**
 * Stands in for the slow, costly thing behind a handler: counts its calls and
 * how many run at once, fails as told, holds calls on a gate, and keeps the
 * AbortSignal each call was given.
 */
export class Backend {
  calls = 0;
  running = 0;
  maxRunning = 0;
  mode: 'ok' | 'down' | 'bad-request' | 'held' = 'ok';
  gate = new Gate();
  signals: AbortSignal[] = [];

  reset(): void {
    this.calls = 0;
    this.running = 0;
    this.maxRunning = 0;
    this.mode = 'ok';
    this.gate = new Gate();
    this.signals = [];
  }

  async call(input: unknown): Promise<{ call: number; echo: unknown }> {
    const call = ++this.calls;
    this.running++;
    this.maxRunning = Math.max(this.maxRunning, this.running);
    try {
      if (this.mode === 'down') throw new HttpException('backend down', 503);
      if (this.mode === 'bad-request') throw new HttpException('bad input', 400);
      if (this.mode === 'held') await this.gate.promise;
      return { call, echo: input };
    } finally {
      this.running--;
    }
  }

  /** Never answers on its own: only the signal ends it. */
  hang(signal: AbortSignal | undefined): Promise<never> {
    this.calls++;
    if (!signal) return Promise.reject(new Error('no call signal'));
    this.signals.push(signal);
    return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));
  }
}

interface HealthSource {
  health(): { callersWaiting: number; limiters: Array<{ name: string; queued: number; inFlight: number }> };
}

/** Callers waiting on the calls in flight (a herd of 100 on one call is 100). */
export const callersWaiting = (orchestrator: HealthSource) => orchestrator.health().callersWaiting;

/** Calls queued behind a concurrency limiter, over all of them. */
export const queued = (orchestrator: HealthSource) =>
  orchestrator.health().limiters.reduce((sum, l) => sum + l.queued, 0);

/**
 * The promises, with their rejections handled: calls a test leaves pending when it fails (the app is closed under
 * them) must not end the test run as unhandled rejections. Awaiting them still sees the rejection.
 */
export function pending<T>(promises: Array<Promise<T>>): Array<Promise<T>> {
  for (const promise of promises) promise.catch(() => undefined);
  return promises;
}
