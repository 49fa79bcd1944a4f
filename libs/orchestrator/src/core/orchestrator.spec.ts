import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { KeyvCacheableMemory } from 'cacheable';
import { Keyv } from 'keyv';
import { Observable, Subject, lastValueFrom, of, type Subscription } from 'rxjs';
import { CircuitBreaker } from './breaker/circuit-breaker.js';
import { isTransientFailure, isUpstreamFailure } from './breaker/failure-classifier.js';
import type { CallWork } from './call.js';
import { ConcurrencyLimiter } from './concurrency/concurrency-limiter.js';
import { AnswerWindow, type WindowPayload } from './dedup/answer-window.js';
import { FlightOutgrownError, SingleFlight, type LeadOptions } from './dedup/single-flight.js';
import { CircuitOpenError, UpstreamTimeoutError } from './errors.js';
import { RawResponse, type CallEvent } from './events.js';
import { Orchestrator, type StartedCall } from './orchestrator.js';
import type { RoutePolicy } from './policy.js';
import { RetryPolicy } from './retry/retry.policy.js';
import type { RetryOptions } from './retry/retry.options.js';
import type { TimeLimits } from './timeout/time-limits.js';

const WINDOW_DEFAULTS = { maxEntries: 10_000, maxBytes: 64 * 1024 * 1024, storeTimeoutMs: 100, storeRetryMs: 1_000 };
const memoryWindow = (maxEntries: number) => new AnswerWindow({ ...WINDOW_DEFAULTS, maxEntries });

/** A policy as these tests build it by hand: parts made in the test, and the dedup key with it. */
interface CallPolicy {
  dedup?: { key: string; window?: AnswerWindow; windowMs: number; maxEntryBytes: number; cancelWhenAbandoned: boolean };
  breaker?: CircuitBreaker;
  limiter?: ConcurrencyLimiter;
  timeLimits?: TimeLimits;
  retry?: Required<RetryOptions>;
}

/** An Orchestrator driven through its low-level `start`, with hand-made route policies. */
class CallPipeline {
  private readonly orchestrator = new Orchestrator();

  get inFlight(): number {
    return this.orchestrator.health().inFlight;
  }

  get outcomes() {
    return this.orchestrator.outcomes;
  }

  start<T>(policy: CallPolicy, work: CallWork<T>): Promise<StartedCall<T>> {
    const { dedup, retry, ...parts } = policy;
    const { key, ...settings } = dedup ?? { key: undefined };
    const route: RoutePolicy = {
      name: 'test',
      ...parts,
      retry: retry && new RetryPolicy(retry),
      dedup:
        dedup &&
        ({ ...settings, cacheAnswers: dedup.window !== undefined, maxEntries: 10_000 } as RoutePolicy['dedup']),
    };
    return this.orchestrator.start(route, { key }, work);
  }
}

type Event = CallEvent<string>;
type DedupPolicy = NonNullable<CallPolicy['dedup']>;

const HEAD: Event = { kind: 'head', head: { contentType: 'text/event-stream' } };
const chunk = (text: string): Event => ({ kind: 'chunk', chunk: text });
const value = (text: string): Event => ({ kind: 'value', value: text });

function httpError(status: number): Error {
  return Object.assign(new Error(`HTTP ${status}`), { status });
}

/** Lets pending promise callbacks (and the window's async store) run. */
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

/** One upstream call as the work saw it; the test drives its events. */
interface UpstreamCall {
  signal: AbortSignal;
  events: Subject<Event>;
  unsubscribed: boolean;
}

/** Work whose every call is recorded and driven by hand. */
function upstream() {
  const calls: UpstreamCall[] = [];
  const work = jest.fn<CallWork<string>>(
    (signal) =>
      new Observable<Event>((subscriber) => {
        const call: UpstreamCall = { signal, events: new Subject<Event>(), unsubscribed: false };
        calls.push(call);
        const inner = call.events.subscribe(subscriber);
        return () => {
          call.unsubscribed = true;
          inner.unsubscribe();
        };
      }),
  );
  return { work, calls };
}

interface Watched {
  events: Event[];
  error: unknown;
  completed: boolean;
  subscription: Subscription;
}

function watch(events: Observable<Event>): Watched {
  const seen = { events: [], error: undefined, completed: false } as unknown as Watched;
  seen.subscription = events.subscribe({
    next: (event) => seen.events.push(event),
    error: (error: unknown) => (seen.error = error),
    complete: () => (seen.completed = true),
  });
  return seen;
}

function dedup(key: string, overrides: Partial<DedupPolicy> = {}): DedupPolicy {
  return { key, windowMs: 60_000, maxEntryBytes: 1_000_000, cancelWhenAbandoned: false, ...overrides };
}

function makeBreaker(overrides: Partial<ConstructorParameters<typeof CircuitBreaker>[1]> = {}): CircuitBreaker {
  return new CircuitBreaker('upstream', {
    failureThreshold: 5,
    openMs: 10_000,
    maxOpenMultiplier: 64,
    probeIntervalMs: 500,
    probeTimeoutMs: 2_000,
    unansweredMs: 10_000,
    isFailure: isUpstreamFailure,
    ...overrides,
  });
}

async function openBreaker(breaker: CircuitBreaker): Promise<void> {
  for (let i = 0; i < 5; i++) await breaker.execute(() => Promise.reject(httpError(503))).catch(() => undefined);
  expect(breaker.state).toBe('open');
}

describe('CallPipeline', () => {
  const cleanups: Array<() => void> = [];
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup();
    jest.useRealTimers();
  });
  const track = <T extends { shutdown(): void }>(thing: T): T => {
    cleanups.push(() => thing.shutdown());
    return thing;
  };

  describe('dedup: one call per key', () => {
    it('concurrent start() calls with the same key run the work once (miss, joined, joined)', async () => {
      const pipeline = new CallPipeline();
      const window = memoryWindow(100);
      const { work, calls } = upstream();
      const policy: CallPolicy = { dedup: dedup('same', { window }) };

      const started = await Promise.all([1, 2, 3].map(() => pipeline.start(policy, work)));
      expect(started.map((s) => s.outcome)).toEqual(['miss', 'joined', 'joined']);
      const watchers = started.map((s) => watch(s.events));
      await flush();
      expect(work).toHaveBeenCalledTimes(1);
      expect(pipeline.inFlight).toBe(1);

      // One more arrives while the call runs.
      const late = await pipeline.start(policy, work);
      expect(late.outcome).toBe('joined');
      watchers.push(watch(late.events));

      calls[0].events.next(value('the answer'));
      calls[0].events.complete();
      await flush();
      for (const watcher of watchers) {
        expect(watcher.events).toEqual([value('the answer')]);
        expect(watcher.completed).toBe(true);
        expect(watcher.error).toBeUndefined();
      }
      expect(work).toHaveBeenCalledTimes(1);
      expect(pipeline.outcomes).toEqual({ miss: 1, joined: 3, cached: 0 });
    });

    it('merges calls in flight without a window too, and keeps distinct keys apart', async () => {
      const pipeline = new CallPipeline();
      const { work, calls } = upstream();
      const a1 = await pipeline.start({ dedup: dedup('a') }, work);
      const a2 = await pipeline.start({ dedup: dedup('a') }, work);
      const b = await pipeline.start({ dedup: dedup('b') }, work);
      expect([a1.outcome, a2.outcome, b.outcome]).toEqual(['miss', 'joined', 'miss']);
      const [wa1, wa2, wb] = [watch(a1.events), watch(a2.events), watch(b.events)];
      await flush();
      expect(work).toHaveBeenCalledTimes(2);
      calls[0].events.next(value('A'));
      calls[0].events.complete();
      calls[1].events.next(value('B'));
      calls[1].events.complete();
      expect(wa1.events).toEqual([value('A')]);
      expect(wa2.events).toEqual([value('A')]);
      expect(wb.events).toEqual([value('B')]);
    });

    it('a joiner that subscribes halfway through a stream receives every chunk from the first', async () => {
      const pipeline = new CallPipeline();
      const { work, calls } = upstream();
      const policy: CallPolicy = { dedup: dedup('stream') };
      const leader = watch((await pipeline.start(policy, work)).events);
      await flush();
      const call = calls[0];
      call.events.next(HEAD);
      call.events.next(chunk('one '));
      call.events.next(chunk('two '));

      const joined = await pipeline.start(policy, work);
      expect(joined.outcome).toBe('joined');
      const joiner = watch(joined.events);
      expect(joiner.events).toEqual([HEAD, chunk('one '), chunk('two ')]);

      call.events.next(chunk('three'));
      call.events.complete();
      const all = [HEAD, chunk('one '), chunk('two '), chunk('three')];
      expect(leader.events).toEqual(all);
      expect(joiner.events).toEqual(all);
      expect(joiner.completed).toBe(true);
      expect(work).toHaveBeenCalledTimes(1);
    });

    it('an error reaches every subscriber, the entry is removed, and the next start() runs the work again', async () => {
      const pipeline = new CallPipeline();
      const window = memoryWindow(100);
      const { work, calls } = upstream();
      const policy: CallPolicy = { dedup: dedup('fails', { window }) };
      const started = [await pipeline.start(policy, work), await pipeline.start(policy, work)];
      const watchers = started.map((s) => watch(s.events));
      await flush();
      const third = watch((await pipeline.start(policy, work)).events);
      watchers.push(third);
      expect(pipeline.inFlight).toBe(1);

      const error = httpError(500);
      calls[0].events.error(error);
      await flush();
      for (const watcher of watchers) expect(watcher.error).toBe(error);
      expect(pipeline.inFlight).toBe(0);
      // Failures are not kept.
      expect(await window.get('fails')).toBeUndefined();

      const again = await pipeline.start(policy, work);
      expect(again.outcome).toBe('miss');
      const watcher = watch(again.events);
      await flush();
      expect(work).toHaveBeenCalledTimes(2);
      calls[1].events.next(value('recovered'));
      calls[1].events.complete();
      expect(watcher.events).toEqual([value('recovered')]);
    });

    it('removes the in-flight entry on success (after the window holds the answer)', async () => {
      const pipeline = new CallPipeline();
      const window = memoryWindow(100);
      const { work, calls } = upstream();
      const policy: CallPolicy = { dedup: dedup('ok', { window }) };
      const watcher = watch((await pipeline.start(policy, work)).events);
      await flush();
      calls[0].events.next(value('done'));
      calls[0].events.complete();
      expect(watcher.completed).toBe(true);
      await flush();
      expect(pipeline.inFlight).toBe(0);
      expect(await window.get('ok')).toMatchObject({ kind: 'value', value: 'done' });

      const cached = await pipeline.start(policy, work);
      expect(cached.outcome).toBe('cached');
      expect(watch(cached.events).events).toEqual([value('done')]);
      expect(work).toHaveBeenCalledTimes(1);
    });

    it('removes the in-flight entry on success without a window', async () => {
      const pipeline = new CallPipeline();
      const { work, calls } = upstream();
      watch((await pipeline.start({ dedup: dedup('ok') }, work)).events);
      await flush();
      calls[0].events.next(value('done'));
      calls[0].events.complete();
      expect(pipeline.inFlight).toBe(0);
      expect((await pipeline.start({ dedup: dedup('ok') }, work)).outcome).toBe('miss');
    });

    it('replays a finished stream from the window as a stream', async () => {
      const pipeline = new CallPipeline();
      const window = memoryWindow(100);
      const { work, calls } = upstream();
      const policy: CallPolicy = { dedup: dedup('sse', { window }) };
      watch((await pipeline.start(policy, work)).events);
      await flush();
      for (const event of [HEAD, chunk('a'), chunk('b')]) calls[0].events.next(event);
      calls[0].events.complete();
      await flush();
      const cached = await pipeline.start(policy, work);
      expect(cached.outcome).toBe('cached');
      const replay = watch(cached.events);
      expect(replay.events).toEqual([HEAD, chunk('a'), chunk('b')]);
      expect(replay.completed).toBe(true);
    });

    it('does not keep an answer larger than maxEntryBytes', async () => {
      const pipeline = new CallPipeline();
      const window = memoryWindow(100);
      const { work, calls } = upstream();
      const policy: CallPolicy = { dedup: dedup('big', { window, maxEntryBytes: 10 }) };
      const watcher = watch((await pipeline.start(policy, work)).events);
      await flush();
      calls[0].events.next(value('x'.repeat(100)));
      calls[0].events.complete();
      await flush();
      expect(watcher.events).toEqual([value('x'.repeat(100))]);
      expect(pipeline.inFlight).toBe(0);
      expect(await window.get('big')).toBeUndefined();
      expect((await pipeline.start(policy, work)).outcome).toBe('miss');
    });
  });

  describe('abandonment', () => {
    it('cancelWhenAbandoned=false keeps a started call running after every subscriber left, and its answer lands in the window', async () => {
      const pipeline = new CallPipeline();
      const window = memoryWindow(100);
      const { work, calls } = upstream();
      const policy: CallPolicy = { dedup: dedup('kept', { window, cancelWhenAbandoned: false }) };
      const leader = watch((await pipeline.start(policy, work)).events);
      const joiner = watch((await pipeline.start(policy, work)).events);
      await flush();
      const call = calls[0];

      leader.subscription.unsubscribe();
      joiner.subscription.unsubscribe();
      await flush();
      expect(call.signal.aborted).toBe(false);
      expect(call.unsubscribed).toBe(false);
      expect(pipeline.inFlight).toBe(1);

      call.events.next(value('finished anyway'));
      call.events.complete();
      await flush();
      expect(pipeline.inFlight).toBe(0);

      const retry = await pipeline.start(policy, work);
      expect(retry.outcome).toBe('cached');
      expect(watch(retry.events).events).toEqual([value('finished anyway')]);
      expect(work).toHaveBeenCalledTimes(1);
    });

    it('cancelWhenAbandoned=true aborts the work once the last subscriber left', async () => {
      const pipeline = new CallPipeline();
      const window = memoryWindow(100);
      const { work, calls } = upstream();
      const policy: CallPolicy = { dedup: dedup('cancelled', { window, cancelWhenAbandoned: true }) };
      const leader = watch((await pipeline.start(policy, work)).events);
      const joiner = watch((await pipeline.start(policy, work)).events);
      await flush();
      const call = calls[0];

      leader.subscription.unsubscribe();
      expect(call.signal.aborted).toBe(false); // one caller is still there
      joiner.subscription.unsubscribe();
      expect(call.signal.aborted).toBe(true);
      expect(call.unsubscribed).toBe(true);
      await flush();
      expect(pipeline.inFlight).toBe(0);
      expect(await window.get('cancelled')).toBeUndefined();
      expect((await pipeline.start(policy, work)).outcome).toBe('miss');
    });

    it('a call still waiting for a concurrency slot is cancelled when abandoned and never runs its work', async () => {
      const pipeline = new CallPipeline();
      const limiter = new ConcurrencyLimiter('upstream', {
        limit: 1,
        queueSize: 10,
        maxWaitMs: 60_000,
        retryAfterSeconds: 1,
        detachedLimit: 1,
        fairQueue: true,
      });
      const hold = await limiter.acquire();
      const { work } = upstream();
      const policy: CallPolicy = { dedup: dedup('queued', { cancelWhenAbandoned: false }), limiter };

      const watcher = watch((await pipeline.start(policy, work)).events);
      await flush();
      expect(limiter.queued).toBe(1);
      expect(pipeline.inFlight).toBe(1);

      watcher.subscription.unsubscribe();
      await flush();
      expect(limiter.queued).toBe(0);
      expect(pipeline.inFlight).toBe(0);

      hold();
      await flush();
      expect(work).not.toHaveBeenCalled();
      expect(limiter.inFlight).toBe(0);
    });

    it('a call that waits for a slot makes no AbortController (nor does its work, which takes no signal)', async () => {
      const Original = globalThis.AbortController;
      let made = 0;
      globalThis.AbortController = class extends Original {
        constructor() {
          super();
          made++;
        }
      };
      try {
        const pipeline = new CallPipeline();
        const limiter = new ConcurrencyLimiter('upstream', {
          limit: 1,
          queueSize: 10,
          maxWaitMs: 60_000,
          retryAfterSeconds: 1,
          detachedLimit: 1,
          fairQueue: true,
        });
        const hold = await limiter.acquire();
        const answer = new Subject<Event>();
        const watcher = watch((await pipeline.start({ limiter }, () => answer)).events);
        await flush();
        expect(limiter.queued).toBe(1);

        hold();
        await flush();
        answer.next(value('after the wait'));
        answer.complete();
        await flush();
        expect(watcher.events).toEqual([value('after the wait')]);
        expect(limiter.inFlight).toBe(0);
        expect(made).toBe(0);
      } finally {
        globalThis.AbortController = Original;
      }
    });

    it('a call abandoned while it is the half-open probe does not leave the breaker refusing forever', async () => {
      jest.useFakeTimers({ doNotFake: ['setImmediate', 'nextTick', 'queueMicrotask'] });
      const breaker = track(makeBreaker({ openMs: 10_000 }));
      const pipeline = new CallPipeline();
      const { work, calls } = upstream();
      await openBreaker(breaker);
      await jest.advanceTimersByTimeAsync(10_000);
      expect(breaker.state).toBe('half_open');

      // The probe reaches a still-hung upstream, and its client hangs up.
      const probe = watch((await pipeline.start({ breaker }, work)).events);
      await flush();
      expect(work).toHaveBeenCalledTimes(1);
      probe.subscription.unsubscribe();
      expect(calls[0].signal.aborted).toBe(true);
      await flush();

      // Within one more open period, a request is let through again.
      await jest.advanceTimersByTimeAsync(10_000);
      const next = watch((await pipeline.start({ breaker }, work)).events);
      await flush();
      expect(next.error).toBeUndefined();
      expect(work).toHaveBeenCalledTimes(2);
      calls[1].events.next(value('back'));
      calls[1].events.complete();
      await flush();
      expect(next.events).toEqual([value('back')]);
      expect(breaker.state).toBe('closed');
    });
  });

  describe('order: breaker, slot, timed call', () => {
    it('an open breaker refuses before a concurrency slot is taken', async () => {
      const breaker = track(makeBreaker());
      await openBreaker(breaker);
      const limiter = new ConcurrencyLimiter('upstream', {
        limit: 2,
        queueSize: 10,
        maxWaitMs: 60_000,
        retryAfterSeconds: 1,
        detachedLimit: 1,
        fairQueue: true,
      });
      const acquire = jest.spyOn(limiter, 'acquire');
      const pipeline = new CallPipeline();
      const { work } = upstream();

      for (const policy of [
        { breaker, limiter },
        { breaker, limiter, dedup: dedup('refused') },
      ] as CallPolicy[]) {
        const watcher = watch((await pipeline.start(policy, work)).events);
        await flush();
        expect(watcher.error).toBeInstanceOf(CircuitOpenError);
        expect((watcher.error as CircuitOpenError).retryAfterSeconds).toBeGreaterThan(0);
      }
      expect(acquire).not.toHaveBeenCalled();
      expect(limiter.inFlight).toBe(0);
      expect(limiter.queued).toBe(0);
      expect(work).not.toHaveBeenCalled();
      expect(pipeline.inFlight).toBe(0);
    });

    it('a cached answer is served while the breaker is open, and a joined call never touches the breaker or a slot', async () => {
      const breaker = track(makeBreaker());
      const limiter = new ConcurrencyLimiter('upstream', {
        limit: 1,
        queueSize: 0,
        maxWaitMs: 60_000,
        retryAfterSeconds: 1,
        detachedLimit: 1,
        fairQueue: true,
      });
      const window = memoryWindow(100);
      const pipeline = new CallPipeline();
      const { work, calls } = upstream();
      const policy: CallPolicy = { dedup: dedup('shared', { window }), breaker, limiter };

      const leader = watch((await pipeline.start(policy, work)).events);
      await flush();
      expect(limiter.inFlight).toBe(1);
      // The only slot is taken and the queue holds nobody: a joiner would be refused if it asked for one.
      const joiner = watch((await pipeline.start(policy, work)).events);
      await flush();
      expect(joiner.error).toBeUndefined();
      calls[0].events.next(value('v'));
      calls[0].events.complete();
      await flush();
      expect(leader.events).toEqual([value('v')]);
      expect(joiner.events).toEqual([value('v')]);

      await openBreaker(breaker);
      const cached = await pipeline.start(policy, work);
      expect(cached.outcome).toBe('cached');
      const watcher = watch(cached.events);
      expect(watcher.events).toEqual([value('v')]);
      expect(watcher.error).toBeUndefined();
      expect(work).toHaveBeenCalledTimes(1);
    });

    it('a timeout aborts the work through its AbortSignal and counts as a breaker failure', async () => {
      jest.useFakeTimers({ doNotFake: ['setImmediate', 'nextTick', 'queueMicrotask'] });
      const breaker = track(makeBreaker());
      const limiter = new ConcurrencyLimiter('upstream', {
        limit: 1,
        queueSize: 10,
        maxWaitMs: 60_000,
        retryAfterSeconds: 1,
        detachedLimit: 1,
        fairQueue: true,
      });
      const pipeline = new CallPipeline();
      const { work, calls } = upstream();
      const policy: CallPolicy = {
        breaker,
        limiter,
        timeLimits: { totalMs: 1_000, firstChunkMs: 1_000, idleMs: 1_000 },
      };

      const watcher = watch((await pipeline.start(policy, work)).events);
      await flush();
      const call = calls[0];
      await jest.advanceTimersByTimeAsync(999);
      expect(call.signal.aborted).toBe(false);

      await jest.advanceTimersByTimeAsync(1);
      await flush();
      expect(call.signal.aborted).toBe(true);
      expect(call.signal.reason).toBeInstanceOf(UpstreamTimeoutError);
      expect(call.unsubscribed).toBe(true);
      expect(watcher.error).toBeInstanceOf(UpstreamTimeoutError);
      expect((watcher.error as UpstreamTimeoutError).phase).toBe('total');
      expect(breaker.snapshot().consecutiveFailures).toBe(1);
      expect(limiter.inFlight).toBe(0);
    });

    it('a stream that stalls after its first chunk is aborted and recorded as a breaker failure', async () => {
      jest.useFakeTimers({ doNotFake: ['setImmediate', 'nextTick', 'queueMicrotask'] });
      const breaker = track(makeBreaker());
      const pipeline = new CallPipeline();
      const { work, calls } = upstream();
      const policy: CallPolicy = { breaker, timeLimits: { totalMs: 1_000, firstChunkMs: 1_000, idleMs: 500 } };

      const watcher = watch((await pipeline.start(policy, work)).events);
      await flush();
      const call = calls[0];
      call.events.next(HEAD);
      call.events.next(chunk('partial'));
      await flush();
      await jest.advanceTimersByTimeAsync(500);
      await flush();
      expect(call.signal.aborted).toBe(true);
      expect((watcher.error as UpstreamTimeoutError).phase).toBe('idle');
      expect(watcher.events).toEqual([HEAD, chunk('partial')]);
      expect(breaker.snapshot().consecutiveFailures).toBe(1);
    });
  });

  describe('the in-flight entry belongs to its own flight', () => {
    it('a retry started while the failed flight is being cleaned up leads a new flight that stays joinable', async () => {
      const pipeline = new CallPipeline();
      const { work, calls } = upstream();
      const policy: CallPolicy = { dedup: dedup('retry') };
      const first = await pipeline.start(policy, work);
      let retry: Promise<StartedCall<string>> | undefined;
      // The caller retries from its error handler, i.e. before the failed flight's own cleanup has run.
      first.events.subscribe({
        error: () => {
          retry = pipeline.start(policy, work);
        },
      });
      await flush();

      calls[0].events.error(httpError(502));
      await flush();
      expect(retry).toBeDefined();
      const second = await retry!;
      expect(second.outcome).toBe('miss');
      const secondWatcher = watch(second.events);
      await flush();
      expect(secondWatcher.error).toBeUndefined();
      expect(work).toHaveBeenCalledTimes(2);

      // The first flight's cleanup is over; the second is still the flight for the key.
      expect(pipeline.inFlight).toBe(1);
      const third = await pipeline.start(policy, work);
      expect(third.outcome).toBe('joined');
      const thirdWatcher = watch(third.events);
      calls[1].events.next(value('second try'));
      calls[1].events.complete();
      expect(secondWatcher.events).toEqual([value('second try')]);
      expect(thirdWatcher.events).toEqual([value('second try')]);
      expect(work).toHaveBeenCalledTimes(2);
      expect(pipeline.inFlight).toBe(0);
    });

    it('the same, with a window', async () => {
      const pipeline = new CallPipeline();
      const window = memoryWindow(100);
      const { work, calls } = upstream();
      const policy: CallPolicy = { dedup: dedup('retry', { window }) };
      const first = await pipeline.start(policy, work);
      let retry: Promise<StartedCall<string>> | undefined;
      first.events.subscribe({
        error: () => {
          retry = pipeline.start(policy, work);
        },
      });
      await flush();
      calls[0].events.error(httpError(502));
      await flush();
      expect(retry).toBeDefined();
      const second = await retry!;
      expect(second.outcome).toBe('miss');
      watch(second.events);
      await flush();
      expect(pipeline.inFlight).toBe(1);
      expect((await pipeline.start(policy, work)).outcome).toBe('joined');
      expect(work).toHaveBeenCalledTimes(2);
    });
  });

  describe('retries', () => {
    afterEach(() => {
      jest.restoreAllMocks();
    });
    const FAKE = {
      doNotFake: ['setImmediate', 'nextTick', 'queueMicrotask'] as Array<
        'setImmediate' | 'nextTick' | 'queueMicrotask'
      >,
    };
    const retryPolicy = (retries: number) => ({
      retries,
      baseDelayMs: 100,
      maxDelayMs: 2_000,
      shouldRetry: isTransientFailure,
    });

    it("retries a transient failure with a fresh signal per attempt, and delivers the retry's answer", async () => {
      jest.useFakeTimers(FAKE);
      const { work, calls } = upstream();
      const watcher = watch((await new CallPipeline().start({ retry: retryPolicy(1) }, work)).events);
      await flush();
      calls[0].events.error(httpError(503));
      await jest.advanceTimersByTimeAsync(100); // the first back-off is at most baseDelayMs
      expect(work).toHaveBeenCalledTimes(2);
      expect(calls[0].signal.aborted).toBe(true);
      expect(calls[1].signal).not.toBe(calls[0].signal);
      calls[1].events.next(value('second time lucky'));
      calls[1].events.complete();
      await flush();
      expect(watcher.events).toEqual([value('second time lucky')]);
      expect(watcher.error).toBeUndefined();
    });

    it('waits a back-off of at most min(maxDelayMs, baseDelayMs * 2^n) before each retry, and stops after `retries`', async () => {
      jest.useFakeTimers(FAKE);
      jest.spyOn(Math, 'random').mockReturnValue(0.999);
      const { work, calls } = upstream();
      const watcher = watch((await new CallPipeline().start({ retry: retryPolicy(2) }, work)).events);
      await flush();
      calls[0].events.error(httpError(502));
      await jest.advanceTimersByTimeAsync(98);
      expect(work).toHaveBeenCalledTimes(1);
      await jest.advanceTimersByTimeAsync(2);
      expect(work).toHaveBeenCalledTimes(2);
      calls[1].events.error(Object.assign(new Error('reset'), { code: 'ECONNRESET' }));
      await jest.advanceTimersByTimeAsync(198);
      expect(work).toHaveBeenCalledTimes(2);
      await jest.advanceTimersByTimeAsync(2);
      expect(work).toHaveBeenCalledTimes(3);
      const last = httpError(504);
      calls[2].events.error(last);
      await jest.advanceTimersByTimeAsync(10_000);
      expect(work).toHaveBeenCalledTimes(3);
      expect(watcher.error).toBe(last);
    });

    it.each<[string, () => unknown]>([
      ['a timeout', () => new UpstreamTimeoutError('total', 1_000)],
      ['a 400', () => httpError(400)],
      ['a 500', () => httpError(500)],
    ])('does not retry %s', async (_, makeError) => {
      jest.useFakeTimers(FAKE);
      const { work, calls } = upstream();
      const watcher = watch((await new CallPipeline().start({ retry: retryPolicy(3) }, work)).events);
      await flush();
      const error = makeError();
      calls[0].events.error(error);
      await jest.advanceTimersByTimeAsync(10_000);
      expect(work).toHaveBeenCalledTimes(1);
      expect(watcher.error).toBe(error);
    });

    it('never retries once a stream has started', async () => {
      jest.useFakeTimers(FAKE);
      const { work, calls } = upstream();
      const watcher = watch((await new CallPipeline().start({ retry: retryPolicy(3) }, work)).events);
      await flush();
      calls[0].events.next(HEAD);
      calls[0].events.next(chunk('a'));
      const cut = Object.assign(new Error('terminated'), { code: 'UND_ERR_SOCKET' });
      calls[0].events.error(cut);
      await jest.advanceTimersByTimeAsync(10_000);
      expect(work).toHaveBeenCalledTimes(1);
      expect(watcher.events).toEqual([HEAD, chunk('a')]);
      expect(watcher.error).toBe(cut);
    });

    it('counts every attempt as a breaker failure and never retries into the open breaker', async () => {
      jest.useFakeTimers(FAKE);
      const breaker = track(makeBreaker({ failureThreshold: 2 }));
      const { work, calls } = upstream();
      const watcher = watch((await new CallPipeline().start({ breaker, retry: retryPolicy(5) }, work)).events);
      await flush();
      calls[0].events.error(httpError(503));
      await jest.advanceTimersByTimeAsync(100);
      expect(breaker.snapshot().consecutiveFailures).toBe(1);
      calls[1].events.error(httpError(503));
      await jest.advanceTimersByTimeAsync(5_000);
      expect(breaker.state).toBe('open');
      expect(work).toHaveBeenCalledTimes(2);
      expect(watcher.error).toBeInstanceOf(CircuitOpenError);
    });

    it('with a health probe, a retry waits (within the back-off bound) for the upstream to come back', async () => {
      jest.useFakeTimers(FAKE);
      let healthy = false;
      const breaker = track(
        makeBreaker({ failureThreshold: 1, probeIntervalMs: 500, healthProbe: async () => healthy }),
      );
      const { work, calls } = upstream();
      const watcher = watch((await new CallPipeline().start({ breaker, retry: retryPolicy(1) }, work)).events);
      await flush();
      calls[0].events.error(httpError(503));
      await jest.advanceTimersByTimeAsync(200);
      expect(breaker.state).toBe('open');
      expect(work).toHaveBeenCalledTimes(1);
      healthy = true;
      await jest.advanceTimersByTimeAsync(500);
      expect(breaker.state).toBe('closed');
      expect(work).toHaveBeenCalledTimes(2);
      calls[1].events.next(value('back'));
      calls[1].events.complete();
      await flush();
      expect(watcher.events).toEqual([value('back')]);
    });

    it('with a health probe that keeps failing, the retry is refused once the back-off bound has passed', async () => {
      jest.useFakeTimers(FAKE);
      jest.spyOn(Math, 'random').mockReturnValue(0.999); // a back-off of 99.9 ms
      const breaker = track(makeBreaker({ failureThreshold: 1, probeIntervalMs: 500, healthProbe: async () => false }));
      const { work, calls } = upstream();
      const watcher = watch((await new CallPipeline().start({ breaker, retry: retryPolicy(1) }, work)).events);
      await flush();
      calls[0].events.error(httpError(503));
      // Back-off (about 99 ms), then at most maxDelayMs (2 000 ms) of waiting for the breaker to close.
      await jest.advanceTimersByTimeAsync(2_090);
      expect(watcher.error).toBeUndefined();
      await jest.advanceTimersByTimeAsync(20);
      expect(watcher.error).toBeInstanceOf(CircuitOpenError);
      expect(work).toHaveBeenCalledTimes(1);
    });
  });

  describe('memory', () => {
    it('100,000 distinct keys leave nothing in flight and at most 1,000 answers in the window', async () => {
      const memory = new KeyvCacheableMemory({ lruSize: 1_000, useClone: false });
      const store = new Keyv({ store: memory, serialize: undefined, deserialize: undefined });
      const window = new AnswerWindow({ ...WINDOW_DEFAULTS, maxEntries: 1_000, stores: [store] });
      const pipeline = new CallPipeline();
      const work = jest.fn<CallWork<string>>(() => of(value('answer')));

      for (let i = 0; i < 100_000; i++) {
        const started = await pipeline.start({ dedup: dedup(`key-${i}`, { window }) }, work);
        await lastValueFrom(started.events);
      }
      await flush();

      expect(work).toHaveBeenCalledTimes(100_000);
      expect(pipeline.outcomes).toEqual({ miss: 100_000, joined: 0, cached: 0 });
      expect(pipeline.inFlight).toBe(0);
      expect(memory.store.size).toBeLessThanOrEqual(1_000);
      expect(memory.store.size).toBeGreaterThan(0);
      // The newest answers are the ones kept.
      expect(await window.get('key-99999')).toMatchObject({ kind: 'value', value: 'answer' });
      expect(await window.get('key-0')).toBeUndefined();
    }, 120_000);

    it('the default in-memory window is bounded by maxEntries too', async () => {
      const window = memoryWindow(100);
      const pipeline = new CallPipeline();
      const work: CallWork<string> = () => of(value('answer'));
      for (let i = 0; i < 5_000; i++) {
        await lastValueFrom((await pipeline.start({ dedup: dedup(`key-${i}`, { window }) }, work)).events);
      }
      await flush();
      expect(pipeline.inFlight).toBe(0);
      let kept = 0;
      for (let i = 0; i < 5_000; i++) if (await window.get(`key-${i}`)) kept++;
      expect(kept).toBeLessThanOrEqual(100);
      expect(kept).toBeGreaterThan(0);
    });
  });
});

describe('SingleFlight', () => {
  const options = (overrides: Partial<LeadOptions<string>> = {}): LeadOptions<string> => ({
    cancelWhenAbandoned: () => false,
    maxEntryBytes: 1_000_000,
    ...overrides,
  });

  it('a failed flight cleaning up does not remove a newer flight under the same key', () => {
    const flights = new SingleFlight<string>();
    const firstSource = new Subject<Event>();
    const first = flights.lead('k', firstSource, options());
    let second: Observable<Event> | undefined;
    first.subscribe({ error: () => (second = flights.lead('k', new Subject<Event>(), options())) });

    firstSource.error(new Error('boom'));
    expect(second).toBeDefined();
    expect(flights.join('k')).toBe(second);
    expect(flights.size).toBe(1);
  });

  it('a finished flight stays joinable until its answer is written, then leaves without touching a newer flight', async () => {
    const flights = new SingleFlight<string>();
    let finishWrite!: () => void;
    const written = new Promise<void>((resolve) => (finishWrite = resolve));
    const stored: WindowPayload<string>[] = [];
    const firstSource = new Subject<Event>();
    const first = flights.lead(
      'k',
      firstSource,
      options({
        onSuccess: (entry) => {
          stored.push(entry);
          return written;
        },
      }),
    );
    first.subscribe();
    firstSource.next(value('v'));
    firstSource.complete();
    expect(stored).toEqual([{ kind: 'value', value: 'v', tag: undefined, storedAt: 0, expiresAt: 0 }]);
    // Until the window holds it, a late caller still joins (and is answered by replay).
    expect(flights.join('k')).toBe(first);

    const second = flights.lead('k', new Subject<Event>(), options());
    finishWrite();
    await flush();
    expect(flights.join('k')).toBe(second);
    expect(flights.size).toBe(1);
  });

  it('keeps a small raw answer apart from the buffer it was read into, and a large one as it is', () => {
    const flights = new SingleFlight<RawResponse>();
    const stored: WindowPayload<RawResponse>[] = [];
    const keep = (key: string, body: Buffer) => {
      const source = new Subject<CallEvent<RawResponse>>();
      flights
        .lead(key, source, {
          cancelWhenAbandoned: () => false,
          maxEntryBytes: 1_000_000,
          onSuccess: (entry) => void stored.push(entry),
        })
        .subscribe();
      source.next({ kind: 'value', value: new RawResponse(body, 'application/json') });
      source.complete();
    };
    // As a socket read hands it over: a view of the read's own ArrayBuffer, the response's headers before it.
    const bytes = new TextEncoder().encode(`HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n{"ok":true}`);
    const read = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
    const small = read.subarray(read.length - 11);
    const large = Buffer.alloc(64 * 1024, 'a');
    keep('small', small);
    keep('large', large);
    const [smallEntry, largeEntry] = stored as Array<Extract<WindowPayload<RawResponse>, { kind: 'bytes' }>>;
    expect(smallEntry.body.equals(small)).toBe(true);
    expect(smallEntry.body.buffer).not.toBe(read.buffer);
    // Into the pool every small answer shares: no ArrayBuffer of its own.
    expect(smallEntry.body.buffer.byteLength).toBe(Buffer.poolSize);
    expect(largeEntry.body).toBe(large);
  });

  it('removes a finished flight once its answer is written', async () => {
    const flights = new SingleFlight<string>();
    const source = new Subject<Event>();
    flights.lead('k', source, options({ onSuccess: () => Promise.resolve() })).subscribe();
    source.next(value('v'));
    source.complete();
    await flush();
    expect(flights.size).toBe(0);
    expect(flights.join('k')).toBeUndefined();
  });
});

describe('SingleFlight: what the streams in flight keep together', () => {
  const options = (stored: WindowPayload<string>[]): LeadOptions<string> => ({
    cancelWhenAbandoned: () => false,
    maxEntryBytes: 8,
    onSuccess: (entry) => {
      stored.push(entry);
      return Promise.resolve();
    },
  });

  it('past maxHeldBytes together, the stream whose chunk crosses it is no longer joined nor kept; the others are', async () => {
    const flights = new SingleFlight<string>({ maxHeldBytes: 10 });
    const stored: WindowPayload<string>[] = [];
    const a = new Subject<Event>();
    const b = new Subject<Event>();
    const seenA: string[] = [];
    flights.lead('a', a, options(stored)).subscribe((e) => e.kind === 'chunk' && seenA.push(String(e.chunk)));
    flights.lead('b', b, options(stored)).subscribe();
    a.next(HEAD);
    b.next(HEAD);
    a.next(chunk('aaaaaa'));
    expect(flights.heldBytes).toBe(6);
    // b's 6 bytes would make 12 of 10: b lets its copy go, a keeps its own.
    b.next(chunk('bbbbbb'));
    expect(flights.heldBytes).toBe(6);
    expect(flights.join('b')).toBeUndefined();
    expect(flights.join('a')).toBeDefined();
    a.next(chunk('a'));
    a.complete();
    b.next(chunk('b'));
    b.complete();
    await flush();
    // a's readers got every byte; a was kept, b (which outgrew the shared bound) was not.
    expect(seenA.join('')).toBe('aaaaaaa');
    expect(stored).toEqual([
      {
        kind: 'stream',
        head: { contentType: 'text/event-stream' },
        chunks: ['aaaaaa', 'a'],
        tag: undefined,
        storedAt: 0,
        expiresAt: 0,
      },
    ]);
    expect(flights.heldBytes).toBe(0);
  });

  it('a stream past maxEntryBytes goes on reaching its callers; one subscribing after it let its copy go is refused', async () => {
    const flights = new SingleFlight<string>();
    const source = new Subject<Event>();
    const seen: string[] = [];
    flights.lead('k', source, options([])).subscribe((e) => e.kind === 'chunk' && seen.push(String(e.chunk)));
    const late = flights.join('k')!;
    source.next(HEAD);
    source.next(chunk('123456789'));
    expect(flights.join('k')).toBeUndefined();
    expect(flights.heldBytes).toBe(0);
    let refused: unknown;
    late.subscribe({ error: (error: unknown) => (refused = error) });
    expect(refused).toBeInstanceOf(FlightOutgrownError);
    source.next(chunk('0'));
    source.complete();
    await flush();
    expect(seen.join('')).toBe('1234567890');
  });

  it('a caller subscribing after the end gets every event, then the end: a completion or an error', async () => {
    const flights = new SingleFlight<string>();
    const kinds = (events: Observable<Event>) => {
      const seen: string[] = [];
      events.subscribe({
        next: (e) => seen.push(e.kind === 'chunk' ? String(e.chunk) : e.kind),
        error: (error: unknown) => seen.push(`error ${(error as Error).message}`),
        complete: () => seen.push('complete'),
      });
      return seen;
    };
    const completing = new Subject<Event>();
    const completed = flights.lead('done', completing, {
      ...options([]),
      onSuccess: () => new Promise<void>(() => {}),
    });
    completed.subscribe();
    completing.next(HEAD);
    completing.next(chunk('ab'));
    completing.complete();
    await flush();
    const afterCompletion = kinds(flights.join('done')!);

    const failing = new Subject<Event>();
    const failed = flights.lead('failed', failing, options([]));
    failed.subscribe({ error: () => undefined });
    failing.next(HEAD);
    failing.next(chunk('cd'));
    failing.error(new Error('lost'));
    const afterError = kinds(failed);
    await flush();
    expect(afterCompletion).toEqual(['head', 'ab', 'complete']);
    expect(afterError).toEqual(['head', 'cd', 'error lost']);
  });

  it('a stream cancelled when its callers left hands its share back: the next one is kept', async () => {
    const flights = new SingleFlight<string>({ maxHeldBytes: 10 });
    const stored: WindowPayload<string>[] = [];
    const first = new Subject<Event>();
    const leaving = flights.lead('first', first, { ...options(stored), cancelWhenAbandoned: () => true }).subscribe();
    first.next(HEAD);
    first.next(chunk('1234567'));
    expect(flights.heldBytes).toBe(7);
    leaving.unsubscribe();
    expect(flights.heldBytes).toBe(0);
    const second = new Subject<Event>();
    flights.lead('second', second, options(stored)).subscribe();
    second.next(HEAD);
    second.next(chunk('1234567'));
    second.complete();
    await flush();
    expect(stored).toHaveLength(1);
    expect(flights.heldBytes).toBe(0);
  });
});

describe('calls in flight and the callers waiting on them', () => {
  it('a herd of 5 is one call with 5 callers; a caller that leaves is counted out; a finished call is gone', async () => {
    const orchestrator = new Orchestrator();
    const policy = orchestrator.policy({ dedup: true, breaker: 'llm' }, 'summaries');
    let release!: (value: string) => void;
    const answer = new Promise<string>((resolve) => (release = resolve));
    const leaving = new AbortController();
    const herd = Array.from({ length: 5 }, (_, i) =>
      orchestrator
        .run(policy, () => answer, { key: 'same', signal: i === 4 ? leaving.signal : undefined })
        .catch((error: unknown) => error),
    );
    await new Promise((resolve) => setImmediate(resolve));
    const [flight] = orchestrator.flightsInFlight();
    expect(flight).toMatchObject({ route: 'summaries', upstream: 'llm', callers: 5 });
    // A one-way digest of the key, never the key.
    expect(flight.key).toHaveLength(12);
    expect(flight.key).not.toContain('same');
    expect(orchestrator.health().callersWaiting).toBe(5);
    leaving.abort(new Error('gone'));
    expect(orchestrator.flightsInFlight()[0].callers).toBe(4);
    release('done');
    await Promise.all(herd);
    expect(orchestrator.flightsInFlight()).toEqual([]);
    expect(orchestrator.health()).toMatchObject({ inFlight: 0, callersWaiting: 0 });
    await orchestrator.close();
  });
});

describe("a leader's tag, and answers found in this process", () => {
  const work =
    (answer: Subject<CallEvent<string>>): CallWork<string> =>
    () =>
      answer;

  it("a call joined in flight and its answer replayed from the window both carry the leader's tag; peeking counts nothing", async () => {
    const orchestrator = new Orchestrator({ dedup: { cacheAnswers: true } });
    const policy = orchestrator.policy({ dedup: true }, 'tagged');
    const answer = new Subject<CallEvent<string>>();
    const leader = orchestrator.startLocal<string>(policy, { key: 'k', tag: { model: 'm-1' } }, work(answer))!;
    const leaderEvents: string[] = [];
    leader.events.subscribe((event) => event.kind === 'value' && leaderEvents.push(event.value));

    const peeked = orchestrator.peekLocal<string>(policy, { key: 'k' });
    expect(peeked?.tag).toEqual({ model: 'm-1' });
    expect(orchestrator.outcomes).toEqual({ miss: 1, joined: 0, cached: 0 });
    const joined = orchestrator.answerLocal(policy, { key: 'k' }, peeked!);
    expect(joined).toMatchObject({ outcome: 'joined', tag: { model: 'm-1' } });
    expect(orchestrator.outcomes).toEqual({ miss: 1, joined: 1, cached: 0 });
    const joinedEvents: string[] = [];
    joined.events.subscribe((event) => event.kind === 'value' && joinedEvents.push(event.value));

    answer.next({ kind: 'value', value: 'the answer' });
    answer.complete();
    await new Promise((resolve) => setImmediate(resolve));
    expect(leaderEvents).toEqual(['the answer']);
    expect(joinedEvents).toEqual(['the answer']);

    const cached = orchestrator.findLocal<string>(policy, { key: 'k' });
    expect(cached).toMatchObject({
      outcome: 'cached',
      tag: { model: 'm-1' },
      stored: { kind: 'value', value: 'the answer' },
    });
    expect(orchestrator.outcomes).toEqual({ miss: 1, joined: 1, cached: 1 });
    // Nothing under another key, and nothing for a caller that asks for a fresh answer.
    expect(orchestrator.peekLocal(policy, { key: 'other' })).toBeUndefined();
    expect(orchestrator.peekLocal(policy, { key: 'k', reuse: { noCache: true } })).toBeUndefined();
    await orchestrator.close();
  });

  it('an answer older than the caller accepts (max-age) is not found', async () => {
    jest.useFakeTimers({ now: 1_000_000 });
    try {
      const orchestrator = new Orchestrator({ dedup: { cacheAnswers: true } });
      const policy = orchestrator.policy({ dedup: true }, 'aged');
      const answer = new Subject<CallEvent<string>>();
      orchestrator.startLocal<string>(policy, { key: 'k' }, work(answer))!.events.subscribe();
      answer.next({ kind: 'value', value: 'v' });
      answer.complete();
      jest.setSystemTime(1_000_000 + 5_000);
      expect(orchestrator.peekLocal(policy, { key: 'k', reuse: { maxAgeMs: 10_000 } })).toMatchObject({
        ageSeconds: 5,
      });
      expect(orchestrator.peekLocal(policy, { key: 'k', reuse: { maxAgeMs: 2_000 } })).toBeUndefined();
      await orchestrator.close();
    } finally {
      jest.useRealTimers();
    }
  });
});
