import { HttpException, Injectable } from '@nestjs/common';

/** Ends when resolved: holds calls until the test lets them finish. */
class Gate {
  readonly promise: Promise<void>;
  resolve!: () => void;
  constructor() {
    this.promise = new Promise<void>((resolve) => (this.resolve = resolve));
  }
}

/**
 * Stands in for the slow, costly service behind the handlers: counts its calls
 * and how many run at once, fails when told, holds calls on a gate, and keeps
 * the AbortSignal each call was given.
 */
@Injectable()
export class Backend {
  calls = 0;
  running = 0;
  maxRunning = 0;
  mode: 'ok' | 'down' | 'held' = 'ok';
  gate = new Gate();
  signals: AbortSignal[] = [];

  reset(): void {
    this.gate.resolve();
    this.calls = 0;
    this.running = 0;
    this.maxRunning = 0;
    this.mode = 'ok';
    this.gate = new Gate();
    this.signals = [];
  }

  async call(input: unknown): Promise<{ call: number; echo: string }> {
    const call = ++this.calls;
    this.running++;
    this.maxRunning = Math.max(this.maxRunning, this.running);
    try {
      if (this.mode === 'down') throw new HttpException('backend down', 503);
      if (this.mode === 'held') await this.gate.promise;
      return { call, echo: JSON.stringify(input) };
    } finally {
      this.running--;
    }
  }

  /** Never answers on its own: only the call's signal ends it. */
  hang(signal: AbortSignal | undefined): Promise<never> {
    this.calls++;
    if (!signal) return Promise.reject(new Error('no call signal'));
    this.signals.push(signal);
    return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));
  }
}
