import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { OverloadedError, QueueTimeoutError } from '../errors.js';
import { ConcurrencyLimiter, type ConcurrencyLimiterOptions, type ReleaseSlot } from './concurrency-limiter.js';

function makeLimiter(overrides: Partial<ConcurrencyLimiterOptions> = {}): ConcurrencyLimiter {
  return new ConcurrencyLimiter('upstream', {
    limit: 16,
    queueSize: 100,
    maxWaitMs: 60_000,
    retryAfterSeconds: 3,
    detachedLimit: 4,
    fairQueue: true,
    ...overrides,
  });
}

/** Tracks how one acquire() settled, without awaiting it. */
interface Tracked {
  release?: ReleaseSlot;
  error?: unknown;
  settled: boolean;
}

function track(promise: Promise<ReleaseSlot>): Tracked {
  const tracked: Tracked = { settled: false };
  promise.then(
    (release) => {
      tracked.release = release;
      tracked.settled = true;
    },
    (error: unknown) => {
      tracked.error = error;
      tracked.settled = true;
    },
  );
  return tracked;
}

/** Lets settled promises run their callbacks. */
const flush = () => jest.advanceTimersByTimeAsync(0);

describe('ConcurrencyLimiter', () => {
  beforeEach(() => {
    jest.useFakeTimers();
  });

  afterEach(() => {
    jest.useRealTimers();
  });

  it('with limit 16, grants 16 of 20 acquires, queues 4, and grants them in FIFO order on release', async () => {
    const limiter = makeLimiter({ limit: 16 });
    const grantOrder: number[] = [];
    const calls = Array.from({ length: 20 }, (_, i) => {
      const promise = limiter.acquire();
      void promise.then(() => grantOrder.push(i));
      return track(promise);
    });
    await flush();

    expect(calls.filter((c) => c.release).length).toBe(16);
    expect(calls.filter((c) => c.settled).length).toBe(16);
    expect(limiter.inFlight).toBe(16);
    expect(limiter.queued).toBe(4);
    expect(grantOrder).toEqual(Array.from({ length: 16 }, (_, i) => i));

    // Releasing one slot at a time hands it to the oldest waiter.
    for (const [released, expectedNext] of [
      [3, 16],
      [0, 17],
      [10, 18],
      [15, 19],
    ] as const) {
      calls[released].release!();
      await flush();
      expect(grantOrder.at(-1)).toBe(expectedNext);
      expect(limiter.inFlight).toBe(16);
    }
    expect(grantOrder.slice(16)).toEqual([16, 17, 18, 19]);
    expect(limiter.queued).toBe(0);

    for (const call of calls) call.release!();
    expect(limiter.inFlight).toBe(0);
  });

  it('rejects at once with OverloadedError (and Retry-After) when the queue is full', async () => {
    const limiter = makeLimiter({ limit: 1, queueSize: 2, retryAfterSeconds: 3 });
    const holder = track(limiter.acquire());
    const waiters = [track(limiter.acquire()), track(limiter.acquire())];
    await flush();
    expect(holder.release).toBeDefined();
    expect(limiter.queued).toBe(2);

    const refused = track(limiter.acquire());
    await Promise.resolve();
    await Promise.resolve();
    // Settled without any time passing.
    expect(refused.settled).toBe(true);
    expect(refused.error).toBeInstanceOf(OverloadedError);
    expect((refused.error as OverloadedError).retryAfterSeconds).toBe(3);
    expect((refused.error as OverloadedError).status).toBe(429);
    expect(limiter.queued).toBe(2);
    expect(limiter.inFlight).toBe(1);
    expect(waiters.every((w) => !w.settled)).toBe(true);
  });

  it('rejects a waiter with QueueTimeoutError after maxWaitMs and removes it from the queue', async () => {
    const limiter = makeLimiter({ limit: 1, maxWaitMs: 1_000, retryAfterSeconds: 2 });
    const holder = track(limiter.acquire());
    const waiter = track(limiter.acquire());
    await flush();
    expect(limiter.queued).toBe(1);

    await jest.advanceTimersByTimeAsync(999);
    expect(waiter.settled).toBe(false);
    expect(limiter.queued).toBe(1);

    await jest.advanceTimersByTimeAsync(1);
    expect(waiter.error).toBeInstanceOf(QueueTimeoutError);
    expect((waiter.error as QueueTimeoutError).retryAfterSeconds).toBe(2);
    expect((waiter.error as QueueTimeoutError).waitedMs).toBe(1_000);
    expect(limiter.queued).toBe(0);

    // The expired waiter is not handed the slot later.
    holder.release!();
    expect(limiter.inFlight).toBe(0);
    expect(waiter.release).toBeUndefined();
    const next = track(limiter.acquire());
    await flush();
    expect(next.release).toBeDefined();
  });

  it('an aborted signal removes the waiter, whose slot is never granted later', async () => {
    const limiter = makeLimiter({ limit: 1 });
    const holder = track(limiter.acquire());
    const controller = new AbortController();
    const aborted = track(limiter.acquire(controller.signal));
    const after = track(limiter.acquire());
    await flush();
    expect(limiter.queued).toBe(2);

    const reason = new Error('client went away');
    controller.abort(reason);
    await flush();
    expect(limiter.queued).toBe(1);
    expect(aborted.error).toBe(reason);

    holder.release!();
    await flush();
    expect(aborted.release).toBeUndefined();
    expect(after.release).toBeDefined();
    expect(limiter.inFlight).toBe(1);
    expect(limiter.queued).toBe(0);

    // Its maxWait timer was cleared too: nothing fires later.
    await jest.advanceTimersByTimeAsync(120_000);
    expect(aborted.release).toBeUndefined();
    expect(limiter.inFlight).toBe(1);
  });

  it('wait: the slot now or once one is free, a refusal when the queue is full or after maxWaitMs, and a way out', async () => {
    const limiter = makeLimiter({ limit: 1, queueSize: 2, maxWaitMs: 1_000, retryAfterSeconds: 2 });
    const outcomes: string[] = [];
    const releases: ReleaseSlot[] = [];
    const waitAs = (name: string) =>
      limiter.wait(
        '',
        (release) => {
          outcomes.push(`${name} granted`);
          releases.push(release);
        },
        (error) => outcomes.push(`${name} refused: ${error.constructor.name}`),
      );
    waitAs('first');
    const leaveSecond = waitAs('second');
    waitAs('third');
    waitAs('fourth');
    expect(outcomes).toEqual(['first granted', 'fourth refused: OverloadedError']);
    expect(limiter.queued).toBe(2);

    // The second leaves; the slot the first frees goes to the third.
    leaveSecond();
    expect(limiter.queued).toBe(1);
    releases[0]();
    expect(outcomes).toEqual(['first granted', 'fourth refused: OverloadedError', 'third granted']);

    // A waiter not granted within maxWaitMs is refused, and never granted later.
    waitAs('fifth');
    await jest.advanceTimersByTimeAsync(1_000);
    expect(outcomes.at(-1)).toBe('fifth refused: QueueTimeoutError');
    releases[1]();
    expect(limiter.inFlight).toBe(0);
    expect(outcomes.filter((o) => o.startsWith('second') || o.startsWith('fifth granted'))).toEqual([]);
  });

  it('a long line that waiters leave out of order still grants the rest first come first served', () => {
    const limiter = makeLimiter({ limit: 1, queueSize: 1_000 });
    const granted: number[] = [];
    const releases: ReleaseSlot[] = [];
    const leaves = new Map<number, () => void>();
    for (let n = 0; n <= 600; n++) {
      leaves.set(
        n,
        limiter.wait(
          '',
          (release) => {
            granted.push(n);
            releases.push(release);
          },
          () => undefined,
        ),
      );
    }
    // Every third leaves, and a run at the front (the line drops the places before its first waiter).
    const left = new Set<number>();
    for (let n = 3; n <= 600; n += 3) left.add(n);
    for (let n = 1; n <= 200; n++) left.add(n);
    for (const n of left) leaves.get(n)!();
    expect(limiter.queued).toBe(600 - left.size);
    while (releases.length > 0) releases.shift()!();
    expect(granted).toEqual([0, ...Array.from({ length: 600 }, (_, i) => i + 1).filter((n) => !left.has(n))]);
    expect(limiter.queued).toBe(0);
    expect(limiter.inFlight).toBe(0);
    // Leaving after being granted takes nothing from the line.
    leaves.get(600)!();
    expect(limiter.queued).toBe(0);
  });

  it('an already aborted signal is refused without taking a slot or a place', async () => {
    const limiter = makeLimiter({ limit: 1 });
    const controller = new AbortController();
    controller.abort(new Error('gone'));
    const refused = track(limiter.acquire(controller.signal));
    await flush();
    expect((refused.error as Error).message).toBe('gone');
    expect(limiter.inFlight).toBe(0);
    expect(limiter.queued).toBe(0);
  });

  it('release is idempotent: releasing twice frees one slot (no waiters)', async () => {
    const limiter = makeLimiter({ limit: 1 });
    const first = track(limiter.acquire());
    await flush();
    first.release!();
    first.release!();
    expect(limiter.inFlight).toBe(0);

    const a = track(limiter.acquire());
    const b = track(limiter.acquire());
    await flush();
    expect(a.release).toBeDefined();
    expect(b.settled).toBe(false);
    expect(limiter.inFlight).toBe(1);
    expect(limiter.queued).toBe(1);
  });

  it('release is idempotent: releasing twice hands over one slot (with waiters)', async () => {
    const limiter = makeLimiter({ limit: 2 });
    const r1 = track(limiter.acquire());
    const r2 = track(limiter.acquire());
    const w3 = track(limiter.acquire());
    const w4 = track(limiter.acquire());
    await flush();
    expect(limiter.queued).toBe(2);

    r1.release!();
    r1.release!();
    await flush();
    expect(w3.release).toBeDefined();
    expect(w4.settled).toBe(false);
    expect(limiter.queued).toBe(1);
    expect(limiter.inFlight).toBe(2);
    void r2;
  });
});

describe('ConcurrencyLimiter: tenants and detached calls', () => {
  const granted: string[] = [];
  // Every wait is aborted at the end of its test: none is left to time out later.
  let leave = new AbortController();
  afterEach(() => {
    leave.abort();
    leave = new AbortController();
  });
  const waitFor = (limiter: ConcurrencyLimiter, tenant: string, label: string) => {
    const waiting = limiter.acquire(leave.signal, tenant).then((release) => {
      granted.push(label);
      return release;
    });
    waiting.catch(() => undefined);
    return waiting;
  };
  const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

  it('shares freed slots in turn across tenants: a flood from one tenant delays another by one turn, not by its backlog', async () => {
    granted.length = 0;
    const limiter = makeLimiter({ limit: 1 });
    const first = limiter.tryAcquire('flood')!;
    const flood = Array.from({ length: 10 }, (_, i) => waitFor(limiter, 'flood', `flood${i}`));
    const light = waitFor(limiter, 'light', 'light0');
    first();
    await settle();
    expect(granted).toEqual(['flood0']);
    (await flood[0])();
    await settle();
    // The light tenant's only request comes next, ahead of nine more from the flood.
    expect(granted).toEqual(['flood0', 'light0']);
    (await light)();
    await settle();
    expect(granted.at(-1)).toBe('flood1');
  });

  it('perTenantLimit: a tenant never holds more slots than that, and its waiters let others pass', async () => {
    granted.length = 0;
    const limiter = makeLimiter({ limit: 4, perTenantLimit: 2 });
    const a1 = limiter.tryAcquire('a')!;
    limiter.tryAcquire('a');
    expect(limiter.tryAcquire('a')).toBeUndefined();
    const queuedA = waitFor(limiter, 'a', 'a3');
    expect(limiter.tryAcquire('b')).toBeDefined();
    await settle();
    expect(granted).toEqual([]);
    expect(limiter.inFlight).toBe(3);
    a1();
    await settle();
    expect(granted).toEqual(['a3']);
    await queuedA;
  });

  it('detach moves a slot to the detached budget (a waiter gets it), and refuses past detachedLimit', async () => {
    granted.length = 0;
    const limiter = makeLimiter({ limit: 1, detachedLimit: 1 });
    const held = limiter.tryAcquire('gone')!;
    const live = waitFor(limiter, 'live', 'live');
    const detached = limiter.detach(held);
    expect(detached).toBeDefined();
    await settle();
    expect(granted).toEqual(['live']);
    expect(limiter.detachedInFlight).toBe(1);
    const liveRelease = await live;
    expect(limiter.detach(liveRelease)).toBeUndefined(); // the budget is full: that call must be cancelled
    expect(limiter.inFlight).toBe(1); // and it still holds its slot until then
    detached!();
    detached!();
    expect(limiter.detachedInFlight).toBe(0);
  });
});

describe('ConcurrencyLimiter with a moving limit', () => {
  it("setCapacity fixes the limit to the upstream's own capacity (within the ceiling); waiters get slots as it rises", async () => {
    const limiter = makeLimiter({ limit: 8, adaptive: true });
    expect(limiter.mode).toBe('adaptive');
    expect(limiter.limit).toBe(8); // the initial 32, within the ceiling
    limiter.setCapacity(2);
    expect(limiter.mode).toBe('capacity');
    expect(limiter.learning).toBeUndefined();
    const held = [limiter.tryAcquire(), limiter.tryAcquire()];
    expect(held.every(Boolean)).toBe(true);
    expect(limiter.tryAcquire()).toBeUndefined();
    const waiting = limiter.acquire();
    limiter.setCapacity(3);
    const third = await waiting;
    expect(limiter.inFlight).toBe(3);
    limiter.setCapacity(100);
    expect(limiter.limit).toBe(8);
    limiter.setCapacity(undefined);
    expect(limiter.mode).toBe('adaptive');
    expect(limiter.learning).toBeDefined();
    third();
    held.forEach((release) => release!());
  });

  it('a lowered limit never cuts calls in flight: new ones wait until enough have ended', async () => {
    const limiter = makeLimiter({ limit: 4 });
    const held = [1, 2, 3, 4].map(() => limiter.tryAcquire()!);
    limiter.setCapacity(2);
    const waiting = track(limiter.acquire());
    held[0]();
    held[1]();
    await Promise.resolve();
    expect(waiting.settled).toBe(false);
    held[2]();
    await new Promise((resolve) => setImmediate(resolve));
    expect(waiting.release).toBeDefined();
    expect(limiter.inFlight).toBe(2);
  });

  it('an adaptive limit follows its controller: overload answers lower it for the next calls', () => {
    let now = 0;
    const limiter = new ConcurrencyLimiter(
      'upstream',
      {
        limit: 64,
        queueSize: 10,
        maxWaitMs: 1_000,
        retryAfterSeconds: 1,
        detachedLimit: 4,
        fairQueue: true,
        adaptive: { initialLimit: 16 },
      },
      () => now,
    );
    expect(limiter.limit).toBe(16);
    limiter.learning!.drop();
    expect(limiter.limit).toBe(8);
    now += 1_000;
    limiter.learning!.drop();
    expect(limiter.limit).toBe(4);
  });
});
