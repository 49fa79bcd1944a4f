import { Observable, type MonoTypeOperatorFunction, type Observer, type Subscriber } from 'rxjs';

export interface DeliveryBatchesOptions {
  /** Deliveries run at once in one turn of the event loop; the rest wait for the next turn. */
  size: number;
  /** Runs a function on a later turn of the event loop (`setImmediate` by default; tests inject their own). */
  schedule?: (run: () => void) => void;
}

/**
 * Spreads deliveries over turns of the event loop: up to `size` run at once,
 * then the loop gets a turn (I/O, timers, other requests) before the next
 * `size`. One shared answer reaching 10 000 joined callers would otherwise
 * write 10 000 responses in one synchronous burst, during which `/health` and
 * every other caller wait. Deliveries keep their order: once one waits, every
 * later one waits behind it.
 */
export class DeliveryBatches {
  private readonly queue: Array<() => void> = [];
  private head = 0;
  private ranThisTurn = 0;
  private turnScheduled = false;
  private readonly schedule: (run: () => void) => void;

  constructor(private readonly options: DeliveryBatchesOptions) {
    this.schedule = options.schedule ?? ((run) => void setImmediate(run));
  }

  /** Deliveries waiting for a later turn. */
  get waiting(): number {
    return this.queue.length - this.head;
  }

  run(delivery: () => void): void {
    if (this.mayRunNow()) delivery();
    else this.queue.push(delivery);
  }

  /** An event for `subscriber`, now if the turn allows (no closure made), else in its place in the queue. */
  next<E>(subscriber: Subscriber<E>, value: E): void {
    if (this.mayRunNow()) subscriber.next(value);
    else this.queue.push(() => subscriber.next(value));
  }

  error(subscriber: Subscriber<unknown>, error: unknown): void {
    if (this.mayRunNow()) subscriber.error(error);
    else this.queue.push(() => subscriber.error(error));
  }

  complete(subscriber: Subscriber<unknown>): void {
    if (this.mayRunNow()) subscriber.complete();
    else this.queue.push(() => subscriber.complete());
  }

  /** Whether a delivery may run at once (nothing waits, this turn has room); counts it if so. */
  private mayRunNow(): boolean {
    this.nextTurn();
    if (this.waiting > 0 || this.ranThisTurn >= this.options.size) return false;
    this.ranThisTurn++;
    return true;
  }

  /**
   * Operator: every event of the source reaches its subscriber through these
   * batches. With `count`, its `subscribers` says how many are subscribed right
   * now (kept here, where each subscriber passes anyway, rather than by another
   * operator of its own).
   */
  operator<T>(count?: { subscribers: number }): MonoTypeOperatorFunction<T> {
    return (source) =>
      new Observable<T>((subscriber) => {
        const subscription = source.subscribe(new BatchedDelivery(this, subscriber));
        if (!count) return subscription;
        count.subscribers++;
        return () => {
          count.subscribers--;
          subscription.unsubscribe();
        };
      });
  }

  private nextTurn(): void {
    if (this.turnScheduled) return;
    this.turnScheduled = true;
    this.schedule(() => this.turn());
  }

  private turn(): void {
    this.turnScheduled = false;
    this.ranThisTurn = 0;
    while (this.waiting > 0 && this.ranThisTurn < this.options.size) {
      const delivery = this.queue[this.head];
      this.queue[this.head++] = noop;
      this.ranThisTurn++;
      try {
        delivery();
      } catch (error) {
        // One caller's failure must not strand the others behind it.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
    if (this.waiting === 0) {
      this.queue.length = 0;
      this.head = 0;
    } else this.nextTurn();
  }
}

const noop = () => undefined;

/** One subscriber's events, through the batches: the observer a shared source is subscribed with for it. */
export class BatchedDelivery<E> implements Observer<E> {
  constructor(
    private readonly batches: DeliveryBatches,
    private readonly subscriber: Subscriber<E>,
  ) {}

  next(value: E): void {
    this.batches.next(this.subscriber, value);
  }

  error(error: unknown): void {
    this.batches.error(this.subscriber, error);
  }

  complete(): void {
    this.batches.complete(this.subscriber);
  }
}
