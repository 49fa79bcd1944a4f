import { describe, expect, it } from '@jest/globals';
import { ReplaySubject, Subject, share } from 'rxjs';
import { DeliveryBatches } from './delivery-batches.js';

/** A scheduler the test turns by hand: each `turn()` is one later turn of the event loop. */
function manualLoop() {
  const pending: Array<() => void> = [];
  return {
    schedule: (run: () => void) => void pending.push(run),
    turn: () => {
      const runs = pending.splice(0);
      for (const run of runs) run();
      return runs.length;
    },
    get pending() {
      return pending.length;
    },
  };
}

describe('DeliveryBatches', () => {
  it('runs up to `size` deliveries at once, then one batch per turn of the loop', () => {
    const loop = manualLoop();
    const batches = new DeliveryBatches({ size: 3, schedule: loop.schedule });
    const done: number[] = [];
    for (let i = 0; i < 8; i++) batches.run(() => done.push(i));
    expect(done).toEqual([0, 1, 2]);
    expect(batches.waiting).toBe(5);
    loop.turn();
    expect(done).toEqual([0, 1, 2, 3, 4, 5]);
    loop.turn();
    expect(done).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(batches.waiting).toBe(0);
    // The last turn resets the count: the next delivery runs at once again.
    loop.turn();
    batches.run(() => done.push(8));
    expect(done.at(-1)).toBe(8);
  });

  it('keeps the order: a delivery never overtakes one that is waiting', () => {
    const loop = manualLoop();
    const batches = new DeliveryBatches({ size: 2, schedule: loop.schedule });
    const done: string[] = [];
    batches.run(() => done.push('a'));
    batches.run(() => done.push('b'));
    batches.run(() => done.push('c'));
    // A new turn begins: the count is reset, but "c" waits, so "d" goes behind it.
    loop.turn();
    batches.run(() => done.push('d'));
    loop.turn();
    expect(done).toEqual(['a', 'b', 'c', 'd']);
  });

  it('schedules at most one turn at a time', () => {
    const loop = manualLoop();
    const batches = new DeliveryBatches({ size: 1, schedule: loop.schedule });
    for (let i = 0; i < 10; i++) batches.run(() => undefined);
    expect(loop.pending).toBe(1);
  });

  it('a delivery that throws does not strand the ones behind it', async () => {
    const loop = manualLoop();
    const batches = new DeliveryBatches({ size: 1, schedule: loop.schedule });
    const done: number[] = [];
    const thrown: unknown[] = [];
    const original = queueMicrotask;
    globalThis.queueMicrotask = (run: () => void) =>
      original(() => {
        try {
          run();
        } catch (error) {
          thrown.push(error);
        }
      });
    try {
      batches.run(() => done.push(0));
      batches.run(() => {
        throw new Error('one caller broke');
      });
      batches.run(() => done.push(2));
      loop.turn();
      loop.turn();
      await Promise.resolve();
    } finally {
      globalThis.queueMicrotask = original;
    }
    expect(done).toEqual([0, 2]);
    expect(thrown).toEqual([new Error('one caller broke')]);
  });

  it('as an operator: 1 000 subscribers of one shared answer get it over several turns, each exactly once and in order', () => {
    const loop = manualLoop();
    const batches = new DeliveryBatches({ size: 100, schedule: loop.schedule });
    const source = new Subject<string>();
    const shared = source.pipe(share({ connector: () => new ReplaySubject<string>() }), batches.operator<string>());
    const received: string[][] = Array.from({ length: 1000 }, () => []);
    const completed: number[] = [];
    received.forEach((events, i) =>
      shared.subscribe({ next: (e) => events.push(e), complete: () => completed.push(i) }),
    );
    source.next('head');
    source.next('body');
    source.complete();
    // 3 events x 1 000 subscribers = 3 000 deliveries, 100 per turn.
    expect(received.filter((r) => r.length > 0).length).toBe(100);
    let turns = 0;
    while (loop.turn() > 0) turns++;
    expect(turns).toBeGreaterThanOrEqual(29);
    expect(received.every((r) => r.join() === 'head,body')).toBe(true);
    expect(completed).toEqual(Array.from({ length: 1000 }, (_, i) => i));
  });

  it('a subscriber that leaves while its event waits does not receive it', () => {
    const loop = manualLoop();
    const batches = new DeliveryBatches({ size: 1, schedule: loop.schedule });
    const source = new Subject<number>();
    const shared = source.pipe(share(), batches.operator<number>());
    const first: number[] = [];
    const second: number[] = [];
    shared.subscribe((v) => first.push(v));
    const leaving = shared.subscribe((v) => second.push(v));
    source.next(1);
    leaving.unsubscribe();
    loop.turn();
    expect(first).toEqual([1]);
    expect(second).toEqual([]);
  });
});
