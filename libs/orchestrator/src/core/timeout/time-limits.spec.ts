import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { Observable, Subject } from 'rxjs';
import type { CallEvent } from '../events.js';
import { UpstreamTimeoutError } from '../errors.js';
import { withTimeLimits, type TimeLimits } from './time-limits.js';

type Event = CallEvent<string>;

const HEAD: Event = { kind: 'head', head: { contentType: 'text/event-stream' } };
const chunk = (text: string): Event => ({ kind: 'chunk', chunk: text });

/** A source the test drives by hand; `teardown` records its unsubscription. */
function drivenSource() {
  const subject = new Subject<Event>();
  const teardown = jest.fn();
  const source = new Observable<Event>((subscriber) => {
    const inner = subject.subscribe(subscriber);
    return () => {
      teardown();
      inner.unsubscribe();
    };
  });
  return { subject, teardown, source };
}

function observe(source: Observable<Event>, limits: TimeLimits) {
  const seen = { events: [] as Event[], error: undefined as unknown, completed: false };
  const subscription = source.pipe(withTimeLimits<string>(limits)).subscribe({
    next: (event) => seen.events.push(event),
    error: (error: unknown) => (seen.error = error),
    complete: () => (seen.completed = true),
  });
  return { seen, subscription };
}

describe('withTimeLimits', () => {
  beforeEach(() => {
    jest.useFakeTimers();
  });

  afterEach(() => {
    jest.useRealTimers();
  });

  it('fails a plain value later than totalMs with UpstreamTimeoutError("total") and unsubscribes the source', async () => {
    const { subject, teardown, source } = drivenSource();
    const { seen } = observe(source, { totalMs: 1_000, firstChunkMs: 5_000, idleMs: 5_000 });

    await jest.advanceTimersByTimeAsync(999);
    expect(seen.error).toBeUndefined();
    expect(teardown).not.toHaveBeenCalled();

    await jest.advanceTimersByTimeAsync(1);
    expect(seen.error).toBeInstanceOf(UpstreamTimeoutError);
    expect((seen.error as UpstreamTimeoutError).phase).toBe('total');
    expect((seen.error as UpstreamTimeoutError).limitMs).toBe(1_000);
    expect(teardown).toHaveBeenCalledTimes(1);
    expect(subject.observed).toBe(false);

    // The late answer goes nowhere.
    subject.next({ kind: 'value', value: 'late' });
    expect(seen.events).toEqual([]);
    expect(jest.getTimerCount()).toBe(0);
  });

  it('lets a plain value within totalMs through and clears its timer', async () => {
    const { subject, source } = drivenSource();
    const { seen } = observe(source, { totalMs: 1_000, firstChunkMs: 1_000, idleMs: 1_000 });
    await jest.advanceTimersByTimeAsync(900);
    subject.next({ kind: 'value', value: 'answer' });
    subject.complete();
    await jest.advanceTimersByTimeAsync(10_000);
    expect(seen.events).toEqual([{ kind: 'value', value: 'answer' }]);
    expect(seen.completed).toBe(true);
    expect(seen.error).toBeUndefined();
    expect(jest.getTimerCount()).toBe(0);
  });

  it('fails a stream whose first chunk comes after firstChunkMs with "first_chunk"', async () => {
    const { subject, teardown, source } = drivenSource();
    const { seen } = observe(source, { totalMs: 10_000, firstChunkMs: 2_000, idleMs: 10_000 });

    await jest.advanceTimersByTimeAsync(300);
    subject.next(HEAD); // the head arrives quickly, the data does not
    await jest.advanceTimersByTimeAsync(1_699);
    expect(seen.error).toBeUndefined();

    await jest.advanceTimersByTimeAsync(1);
    expect(seen.error).toBeInstanceOf(UpstreamTimeoutError);
    expect((seen.error as UpstreamTimeoutError).phase).toBe('first_chunk');
    expect((seen.error as UpstreamTimeoutError).limitMs).toBe(2_000);
    expect(teardown).toHaveBeenCalledTimes(1);
    expect(seen.events).toEqual([HEAD]);
  });

  it('fails a stream that stalls between chunks for longer than idleMs with "idle"', async () => {
    const { subject, teardown, source } = drivenSource();
    const { seen } = observe(source, { totalMs: 10_000, firstChunkMs: 1_000, idleMs: 1_000 });

    subject.next(HEAD);
    await jest.advanceTimersByTimeAsync(100);
    subject.next(chunk('a'));
    await jest.advanceTimersByTimeAsync(900);
    subject.next(chunk('b'));
    await jest.advanceTimersByTimeAsync(999);
    expect(seen.error).toBeUndefined();

    await jest.advanceTimersByTimeAsync(1);
    expect(seen.error).toBeInstanceOf(UpstreamTimeoutError);
    expect((seen.error as UpstreamTimeoutError).phase).toBe('idle');
    expect((seen.error as UpstreamTimeoutError).limitMs).toBe(1_000);
    expect(teardown).toHaveBeenCalledTimes(1);
    expect(seen.events).toEqual([HEAD, chunk('a'), chunk('b')]);
  });

  it('does not cut a long stream whose every gap is below idleMs, even past totalMs', async () => {
    const { subject, source } = drivenSource();
    const limits = { totalMs: 2_000, firstChunkMs: 2_000, idleMs: 1_000 };
    const startedAt = Date.now(); // the fake clock
    const { seen } = observe(source, limits);

    subject.next(HEAD);
    const sent: Event[] = [HEAD];
    for (let i = 0; i < 30; i++) {
      await jest.advanceTimersByTimeAsync(950);
      const event = chunk(`part ${i}`);
      sent.push(event);
      subject.next(event);
    }
    // 28.5 s in, far past totalMs.
    expect(Date.now() - startedAt).toBe(28_500);
    expect(seen.error).toBeUndefined();
    subject.complete();
    await jest.advanceTimersByTimeAsync(10_000);

    expect(seen.error).toBeUndefined();
    expect(seen.completed).toBe(true);
    expect(seen.events).toEqual(sent);
    expect(jest.getTimerCount()).toBe(0);
  });

  it('unsubscribing clears its timer and unsubscribes the source', async () => {
    const { teardown, source } = drivenSource();
    const { seen, subscription } = observe(source, { totalMs: 1_000, firstChunkMs: 1_000, idleMs: 1_000 });
    subscription.unsubscribe();
    expect(teardown).toHaveBeenCalledTimes(1);
    expect(jest.getTimerCount()).toBe(0);
    await jest.advanceTimersByTimeAsync(5_000);
    expect(seen.error).toBeUndefined();
  });

  it('passes a source error through unchanged', async () => {
    const { subject, source } = drivenSource();
    const { seen } = observe(source, { totalMs: 1_000, firstChunkMs: 1_000, idleMs: 1_000 });
    const error = new Error('upstream said no');
    subject.error(error);
    expect(seen.error).toBe(error);
    expect(jest.getTimerCount()).toBe(0);
  });

  describe('time the process spent busy is not charged to the upstream', () => {
    it('a timer that fires late (a blocked loop) is extended by its lateness, and an answer that then arrives is in time', async () => {
      const { subject, source } = drivenSource();
      const { seen } = observe(source, { totalMs: 1_000, firstChunkMs: 1_000, idleMs: 1_000 });
      await jest.advanceTimersByTimeAsync(900);
      // The loop is blocked for 500 ms: the clock moves, no timer can run.
      jest.setSystemTime(Date.now() + 500);
      await jest.advanceTimersByTimeAsync(100);
      expect(seen.error).toBeUndefined();
      subject.next({ kind: 'value', value: 'answered while the loop was busy' });
      expect(seen.events).toEqual([{ kind: 'value', value: 'answered while the loop was busy' }]);
      expect(seen.error).toBeUndefined();
    });

    it('still expires once the given-back time has passed with nothing from the upstream', async () => {
      const { source } = drivenSource();
      const { seen } = observe(source, { totalMs: 1_000, firstChunkMs: 1_000, idleMs: 1_000 });
      await jest.advanceTimersByTimeAsync(900);
      jest.setSystemTime(Date.now() + 500);
      await jest.advanceTimersByTimeAsync(100);
      expect(seen.error).toBeUndefined();
      await jest.advanceTimersByTimeAsync(500);
      expect(seen.error).toBeInstanceOf(UpstreamTimeoutError);
    });

    it('gives back at most the limit itself: a loop that stays blocked cannot hold a call forever', async () => {
      const { source } = drivenSource();
      const { seen } = observe(source, { totalMs: 1_000, firstChunkMs: 1_000, idleMs: 1_000 });
      for (let i = 0; i < 5 && !seen.error; i++) {
        jest.setSystemTime(Date.now() + 900);
        await jest.advanceTimersByTimeAsync(1_000);
      }
      expect(seen.error).toBeInstanceOf(UpstreamTimeoutError);
    });
  });
});
