import type { MockCall, MockStats } from './mock-provider.types.js';

export type CallStart = Omit<MockCall, 'seq' | 'finishedAt' | 'status'>;

interface Waiter {
  predicate: (stats: MockStats) => boolean;
  resolve: (stats: MockStats) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

export function nowMs(): number {
  return performance.timeOrigin + performance.now();
}

/** Counters and the bounded call log. */
export class CallRecorder {
  private seq = 0;
  private log: MockCall[] = [];
  private total = 0;
  private byRoute: Record<string, number> = {};
  private byMode: Record<string, number> = {};
  private healthChecks = 0;
  private dropped = 0;
  private notFound = 0;
  /** Live gauge: unlike the counters it survives `reset()`, because the requests it counts are still open. */
  private inFlight = 0;
  private readonly waiters = new Set<Waiter>();

  constructor(private readonly logLimit: number) {}

  begin(start: CallStart, isHealthCheck: boolean): MockCall {
    const call: MockCall = { seq: ++this.seq, ...start };
    if (isHealthCheck) {
      this.healthChecks++;
    } else {
      this.total++;
      this.byRoute[call.route] = (this.byRoute[call.route] ?? 0) + 1;
      this.byMode[call.mode] = (this.byMode[call.mode] ?? 0) + 1;
    }
    this.inFlight++;
    this.log.push(call);
    // Trimming in batches keeps the cost amortised; a shift per request would be O(n) at the limit.
    if (this.log.length >= this.logLimit + Math.max(1, Math.ceil(this.logLimit / 10))) {
      this.log.splice(0, this.log.length - this.logLimit);
    }
    this.notify();
    return call;
  }

  finish(call: MockCall): void {
    call.finishedAt = nowMs();
    this.inFlight--;
    this.notify();
  }

  countDropped(count: number): void {
    if (count === 0) return;
    this.dropped += count;
    this.notify();
  }

  countNotFound(): void {
    this.notFound++;
    this.notify();
  }

  stats(): MockStats {
    return {
      total: this.total,
      byRoute: { ...this.byRoute },
      byMode: { ...this.byMode },
      healthChecks: this.healthChecks,
      droppedHungConnections: this.dropped,
      inFlight: this.inFlight,
      notFound: this.notFound,
    };
  }

  calls(sinceSeq = 0): MockCall[] {
    const start = this.log.length > this.logLimit ? this.log.length - this.logLimit : 0;
    const out: MockCall[] = [];
    for (let i = start; i < this.log.length; i++) {
      const call = this.log[i];
      if (call !== undefined && call.seq > sinceSeq) out.push({ ...call });
    }
    return out;
  }

  reset(): void {
    this.seq = 0;
    this.log = [];
    this.total = 0;
    this.byRoute = {};
    this.byMode = {};
    this.healthChecks = 0;
    this.dropped = 0;
    this.notFound = 0;
    this.notify();
  }

  waitFor(predicate: (stats: MockStats) => boolean, timeoutMs: number): Promise<MockStats> {
    const current = this.stats();
    if (predicate(current)) return Promise.resolve(current);
    return new Promise<MockStats>((resolve, reject) => {
      const waiter: Waiter = {
        predicate,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.waiters.delete(waiter);
          const stats = JSON.stringify(this.stats());
          reject(new Error(`mock-provider: condition not met within ${timeoutMs} ms; stats ${stats}`));
        }, timeoutMs),
      };
      this.waiters.add(waiter);
    });
  }

  rejectWaiters(reason: string): void {
    for (const waiter of this.waiters) {
      clearTimeout(waiter.timer);
      waiter.reject(new Error(reason));
    }
    this.waiters.clear();
  }

  private notify(): void {
    if (this.waiters.size === 0) return;
    const current = this.stats();
    for (const waiter of this.waiters) {
      let met: boolean;
      try {
        met = waiter.predicate(current);
      } catch (error) {
        this.waiters.delete(waiter);
        clearTimeout(waiter.timer);
        waiter.reject(error instanceof Error ? error : new Error(String(error)));
        continue;
      }
      if (met) {
        this.waiters.delete(waiter);
        clearTimeout(waiter.timer);
        waiter.resolve(current);
      }
    }
  }
}
