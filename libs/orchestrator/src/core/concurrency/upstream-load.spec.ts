import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { Orchestrator } from '../orchestrator.js';
import {
  ABORTED_CALL_HOLD_MS,
  ConcurrencyLimiter,
  type ConcurrencyLimiterOptions,
  type ReleaseSlot,
} from './concurrency-limiter.js';

/**
 * A limiter under an upstream's own capacity that also reports its load (a llama.cpp server's busy slots): slots
 * busy with work this limiter did not send are not free, and a call it aborted keeps its slot counted until the
 * upstream says otherwise. Time is the test's: an injected clock, and fake timers for the hold and the queue.
 */

let now = 0;
const clock = () => now;

function makeLimiter(overrides: Partial<ConcurrencyLimiterOptions> = {}): ConcurrencyLimiter {
  return new ConcurrencyLimiter(
    'llama',
    {
      limit: 64,
      queueSize: 100,
      maxWaitMs: 60_000,
      retryAfterSeconds: 1,
      detachedLimit: 16,
      fairQueue: true,
      ...overrides,
    },
    clock,
  );
}

/** A limiter of `slots` whose upstream was read once, `busy` of them taken by others. */
function reporting(slots: number, busy = 0, overrides: Partial<ConcurrencyLimiterOptions> = {}): ConcurrencyLimiter {
  const limiter = makeLimiter(overrides);
  limiter.setCapacity(slots);
  limiter.beginLoadReading().end(busy);
  return limiter;
}

/** Waits for a slot; `granted` is set once it is. */
function waiter(limiter: ConcurrencyLimiter): { release?: ReleaseSlot; error?: unknown } {
  const state: { release?: ReleaseSlot; error?: unknown } = {};
  limiter.wait(
    '',
    (release) => (state.release = release),
    (error) => (state.error = error),
  );
  return state;
}

beforeEach(() => {
  now = 1_000;
  // Slots are granted in a microtask (see GuardedCall.queue): only the timers are the test's.
  jest.useFakeTimers({ doNotFake: ['setImmediate', 'nextTick', 'queueMicrotask'] });
});

afterEach(() => {
  jest.useRealTimers();
});

describe('ConcurrencyLimiter under an upstream that reports its load', () => {
  it('slots busy with work it did not send are not free: the limit is what is left, down to 0, and rises as they end', () => {
    const limiter = reporting(4, 3);
    expect(limiter.slotsBusyElsewhere).toBe(3);
    expect(limiter.limit).toBe(1);
    const first = limiter.tryAcquire()!;
    expect(limiter.tryAcquire()).toBeUndefined();

    now += 1_000;
    limiter.beginLoadReading().end(5); // its own call, and every other slot busy (one of them in the server's queue)
    expect(limiter.slotsBusyElsewhere).toBe(4);
    expect(limiter.limit).toBe(0);
    first();
    const queued = waiter(limiter);
    expect(queued.release).toBeUndefined();

    limiter.beginLoadReading().end(3);
    expect(limiter.limit).toBe(1);
    expect(queued.release).toBeDefined();
    expect(limiter.inFlight).toBe(1);
  });

  it("its own calls are not counted as others' work, but only those the upstream surely saw", () => {
    const limiter = reporting(2);
    const held = [limiter.tryAcquire()!, limiter.tryAcquire()!];
    now += 1_000;
    limiter.beginLoadReading().end(2);
    expect(limiter.slotsBusyElsewhere).toBe(0);
    expect(limiter.limit).toBe(2);

    // One ends while the upstream is read: it may be in the count or not, so the count is taken as others'.
    const reading = limiter.beginLoadReading();
    held[0]();
    reading.end(2);
    expect(limiter.slotsBusyElsewhere).toBe(1);
    expect(limiter.limit).toBe(1);
    expect(limiter.tryAcquire()).toBeUndefined();

    // The next reading corrects it.
    limiter.beginLoadReading().end(1);
    expect(limiter.slotsBusyElsewhere).toBe(0);
    held[1]();
  });

  it('a call that took its slot just before a reading (within the settle time) is not taken as counted by it', () => {
    const limiter = reporting(2, 1);
    now += 1_000;
    const mine = limiter.tryAcquire()!;
    now += 5;
    // The server placed only the other client's request so far: 1 busy. Taking it as ours would free a slot.
    limiter.beginLoadReading(20).end(1);
    expect(limiter.slotsBusyElsewhere).toBe(1);
    expect(limiter.tryAcquire()).toBeUndefined();

    now += 100;
    limiter.beginLoadReading(20).end(2);
    expect(limiter.slotsBusyElsewhere).toBe(1);
    mine();
  });

  it('a call that starts during a reading is not subtracted from what the upstream reports', () => {
    const limiter = reporting(2);
    const reading = limiter.beginLoadReading();
    const mine = limiter.tryAcquire()!;
    reading.end(1); // another client's request
    expect(limiter.slotsBusyElsewhere).toBe(1);
    expect(limiter.tryAcquire()).toBeUndefined();
    mine();
  });

  it('an aborted call keeps its slot counted until a reading begun after the abort says it is free', () => {
    const limiter = reporting(1);
    const release = limiter.tryAcquire()!;
    const before = limiter.beginLoadReading();
    limiter.abortedCall();
    release();
    expect(limiter.abortedHeld).toBe(1);
    expect(limiter.limit).toBe(0);
    const next = waiter(limiter);
    before.end(0); // begun before the abort: says nothing of it
    expect(next.release).toBeUndefined();

    limiter.beginLoadReading().end(1); // the server still runs it
    expect(limiter.abortedHeld).toBe(0);
    expect(limiter.slotsBusyElsewhere).toBe(1);
    expect(next.release).toBeUndefined();

    limiter.beginLoadReading().end(0);
    expect(next.release).toBeDefined();
  });

  it('without a reading, an aborted call frees its slot after ABORTED_CALL_HOLD_MS', () => {
    const limiter = reporting(1);
    const release = limiter.tryAcquire()!;
    limiter.abortedCall();
    release();
    const next = waiter(limiter);
    jest.advanceTimersByTime(ABORTED_CALL_HOLD_MS - 1);
    expect(next.release).toBeUndefined();
    jest.advanceTimersByTime(1);
    expect(next.release).toBeDefined();
  });

  it('an upstream that does not report its load frees an aborted call at once (a capacity alone, as before)', () => {
    const limiter = makeLimiter();
    limiter.setCapacity(1);
    const release = limiter.tryAcquire()!;
    limiter.abortedCall();
    release();
    expect(limiter.abortedHeld).toBe(0);
    expect(limiter.tryAcquire()).toBeDefined();
  });

  it('forgetting the load (the upstream went down) gives the whole capacity back', () => {
    const limiter = reporting(3, 3);
    limiter.tryAcquire(); // refused
    const queued = waiter(limiter);
    limiter.forgetLoad();
    expect(limiter.limit).toBe(3);
    expect(queued.release).toBeDefined();
    expect(limiter.loadReported).toBe(false);
  });

  it('asks for a reading when a caller starts waiting on slots only the upstream can say are free, not on its own calls', () => {
    const limiter = reporting(2);
    const wanted = jest.fn();
    limiter.onLoadReadingWanted(wanted);
    limiter.tryAcquire();
    limiter.tryAcquire();
    waiter(limiter);
    expect(wanted).not.toHaveBeenCalled(); // its own calls: their end frees the slots

    const busy = reporting(2, 2);
    busy.onLoadReadingWanted(wanted);
    waiter(busy);
    expect(wanted).toHaveBeenCalledTimes(1);
    expect(busy.loadReadingWanted).toBe(true);
  });

  it('a kept call (every caller gone) keeps its slot under a capacity, and is kept only while a slot is left for live callers', () => {
    const limiter = reporting(3);
    const held = [limiter.tryAcquire()!, limiter.tryAcquire()!, limiter.tryAcquire()!];
    const live = waiter(limiter);
    const kept = limiter.detach(held[0]);
    expect(kept).toBeDefined();
    expect(limiter.detachedInFlight).toBe(1);
    expect(limiter.inFlight).toBe(3);
    expect(live.release).toBeUndefined(); // it waits here, not inside the upstream behind the kept call
    const second = limiter.detach(held[1]);
    expect(second).toBeDefined();
    expect(limiter.detach(held[2])).toBeUndefined(); // a third would leave live callers no slot: it is cancelled
    held[2]();
    expect(live.release).toBeDefined();
    kept!();
    kept!();
    second!();
    expect(limiter.detachedInFlight).toBe(0);
    expect(limiter.inFlight).toBe(1);
  });
});

describe('calls under an upstream that reports its load', () => {
  let orchestrator: Orchestrator | undefined;
  afterEach(async () => {
    await orchestrator?.close();
    orchestrator = undefined;
  });

  function setup(slots: number, dedup: { cancelWhenAbandoned: boolean } = { cancelWhenAbandoned: true }) {
    orchestrator = new Orchestrator({
      dedup,
      limits: { a: { limit: 8 } },
      upstreams: { llm: { members: [{ name: 'a', target: 'A' }] } },
    });
    const policy = orchestrator.policy({ breaker: 'llm', concurrency: true, dedup: true, timeout: 50 }, 'chat');
    const member = orchestrator.upstreams.get('llm')!.members[0];
    member.setHealth('up', { slots });
    member.limiter.beginLoadReading().end(0);
    return { orchestrator, policy, member };
  }

  it('a call timed out keeps its slot counted: the next waits in the queue until a reading finds the slot free', async () => {
    const { orchestrator, policy, member } = setup(1);
    const started: string[] = [];
    const work = (name: string, answer?: string) => (signal: AbortSignal) => {
      started.push(name);
      return new Promise<string>((resolve, reject) => {
        if (answer !== undefined) resolve(answer);
        signal.addEventListener('abort', () => reject(signal.reason));
      });
    };
    const first = orchestrator.run(policy, work('first'), { key: 'first' });
    const failed = expect(first).rejects.toMatchObject({ code: 'upstream_timeout' });
    await jest.advanceTimersByTimeAsync(50);
    await failed;
    expect(member.limiter.abortedHeld).toBe(1);

    const second = orchestrator.run(policy, work('second', 'ok'), { key: 'second' });
    await jest.advanceTimersByTimeAsync(0);
    expect(started).toEqual(['first']);
    expect(member.limiter.queued).toBe(1);

    member.limiter.beginLoadReading().end(0);
    await expect(second).resolves.toBe('ok');
    expect(started).toEqual(['first', 'second']);
  });

  it('a call every caller left, kept running, holds its slot: the next live call waits for it in the queue', async () => {
    const { orchestrator, policy, member } = setup(2, { cancelWhenAbandoned: false });
    const aborted: string[] = [];
    let finishKept: ((value: string) => void) | undefined;
    const endless = (name: string) => (signal: AbortSignal) =>
      new Promise<string>((resolve, reject) => {
        if (name === 'kept') finishKept = resolve;
        signal.addEventListener('abort', () => {
          aborted.push(name);
          reject(signal.reason);
        });
      });
    const slow = orchestrator.policy({ breaker: 'llm', concurrency: true, dedup: true, timeout: 60_000 }, 'slow');
    const leave = [new AbortController(), new AbortController()];
    const kept = orchestrator.run(slow, endless('kept'), { key: 'kept', signal: leave[0].signal });
    const cancelled = orchestrator.run(slow, endless('cancelled'), { key: 'cancelled', signal: leave[1].signal });
    await jest.advanceTimersByTimeAsync(0);
    leave[0].abort();
    leave[1].abort();
    await Promise.allSettled([kept, cancelled]);
    await jest.advanceTimersByTimeAsync(0);
    // One kept (in its slot), one cancelled: a live caller always has a slot that kept work cannot take.
    expect(aborted).toEqual(['cancelled']);
    expect(member.limiter.detachedInFlight).toBe(1);
    expect(member.limiter.inFlight).toBe(1);
    expect(member.limiter.abortedHeld).toBe(1);

    member.limiter.beginLoadReading().end(1); // the server runs the kept call only
    const live = orchestrator.run(policy, () => Promise.resolve('live'), { key: 'live' });
    await expect(live).resolves.toBe('live');

    // Both slots taken (the kept call, and a live one): the next live call waits here for the kept one to end.
    let release: ((value: string) => void) | undefined;
    const holding = orchestrator.run(slow, () => new Promise<string>((resolve) => (release = resolve)), {
      key: 'holding',
    });
    await jest.advanceTimersByTimeAsync(0);
    const next = orchestrator.run(slow, () => Promise.resolve('next'), { key: 'next' });
    await jest.advanceTimersByTimeAsync(0);
    expect(member.limiter.queued).toBe(1);
    finishKept!('kept answer');
    await expect(next).resolves.toBe('next');
    release!('held');
    await expect(holding).resolves.toBe('held');
    expect(member.limiter.detachedInFlight).toBe(0);
  });

  it('a pool orders a member whose slots are all busy elsewhere after one with a free slot', () => {
    orchestrator = new Orchestrator({
      upstreams: {
        llm: {
          members: [
            { name: 'a', target: 'A' },
            { name: 'b', target: 'B' },
          ],
        },
      },
    });
    orchestrator.policy({ breaker: 'llm', concurrency: true }, 'chat');
    const pool = orchestrator.upstreams.get('llm')!;
    for (const member of pool.members) member.setHealth('up', { slots: 2 });
    pool.members[0].limiter.beginLoadReading().end(2);
    pool.members[1].limiter.beginLoadReading().end(0);
    expect(pool.members[0].limiter.limit).toBe(0);
    expect(pool.order().map((m) => m.name)).toEqual(['b', 'a']);
    expect(pool.members[0].snapshot()).toMatchObject({ slots: 2, slotsBusyElsewhere: 2, limit: 0 });
    pool.members[0].setHealth('down', { detail: 'ECONNREFUSED' });
    expect(pool.members[0].snapshot().slotsBusyElsewhere).toBeUndefined();
    expect(pool.members[0].limiter.limit).toBe(2);
  });
});
