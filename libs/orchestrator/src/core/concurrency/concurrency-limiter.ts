import { OverloadedError, QueueTimeoutError } from '../errors.js';
import type { WithDefaults } from '../options.js';
import type { CONCURRENCY_FIELDS, ConcurrencyOptions } from './concurrency.options.js';

/** A limiter's settings with every default applied (see `ConcurrencyOptions` for each field). */
export type ConcurrencyLimiterOptions = Omit<WithDefaults<ConcurrencyOptions, typeof CONCURRENCY_FIELDS>, 'name'>;

/** Gives a slot back; calling it twice is harmless. */
export type ReleaseSlot = () => void;

interface Waiter {
  grant: (release: ReleaseSlot) => void;
  refuse: (error: Error) => void;
  timer?: ReturnType<typeof setTimeout>;
  onAbort?: () => void;
  signal?: AbortSignal;
}

/**
 * A counting semaphore with a bounded FIFO queue, a maximum wait and abortable
 * waits. Written here because the usual libraries (p-limit, cockatiel's bulkhead,
 * opossum's capacity) lack either the wait bound, the abort, or keep their
 * refusals out of the breaker's failure count.
 *
 * Invariant: `active <= limit`, and a waiter is in `queue` until it is granted,
 * times out or is aborted, whichever comes first; exactly one of them happens.
 */
export class ConcurrencyLimiter {
  private active = 0;
  // A Set keeps insertion order (FIFO) and removes an aborted waiter in O(1).
  private readonly queue = new Set<Waiter>();

  constructor(
    readonly name: string,
    private readonly options: ConcurrencyLimiterOptions,
  ) {}

  get inFlight(): number {
    return this.active;
  }

  get queued(): number {
    return this.queue.size;
  }

  get limit(): number {
    return this.options.limit;
  }

  /** A slot at once if one is free (no promise, no queue), else `undefined`. */
  tryAcquire(): ReleaseSlot | undefined {
    if (this.active >= this.options.limit) return undefined;
    this.active++;
    return this.releaser();
  }

  /**
   * Resolves with a release function once a slot is free. Rejects with
   * `OverloadedError` when the queue is full, `QueueTimeoutError` after
   * `maxWaitMs`, or the signal's reason when the caller aborts while waiting.
   */
  acquire(signal?: AbortSignal): Promise<ReleaseSlot> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.active < this.options.limit) {
      this.active++;
      return Promise.resolve(this.releaser());
    }
    if (this.queue.size >= this.options.queueSize) {
      return Promise.reject(new OverloadedError(this.name, this.options.retryAfterSeconds));
    }
    return new Promise<ReleaseSlot>((resolve, reject) => {
      const waiter: Waiter = {
        grant: resolve,
        refuse: reject,
        signal,
      };
      waiter.timer = setTimeout(() => {
        this.leave(waiter);
        reject(new QueueTimeoutError(this.name, this.options.maxWaitMs, this.options.retryAfterSeconds));
      }, this.options.maxWaitMs);
      if (signal) {
        waiter.onAbort = () => {
          this.leave(waiter);
          reject(signal.reason);
        };
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      this.queue.add(waiter);
    });
  }

  private releaser(): ReleaseSlot {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.handOver();
    };
  }

  /** A slot was given back: pass it straight to the oldest waiter, or free it. */
  private handOver(): void {
    const next = this.queue.values().next();
    if (next.done) {
      this.active--;
      return;
    }
    this.leave(next.value);
    next.value.grant(this.releaser());
  }

  private leave(waiter: Waiter): void {
    this.queue.delete(waiter);
    clearTimeout(waiter.timer);
    if (waiter.onAbort) waiter.signal?.removeEventListener('abort', waiter.onAbort);
  }
}
