import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { withTimeout } from './bounded.js';

/** A promise the test settles by hand, with what became of the bounded one. */
function bounded(ms: number) {
  let resolve!: (value: string) => void;
  const pending = new Promise<string>((r) => (resolve = r));
  const seen = { value: undefined as string | undefined, error: undefined as Error | undefined };
  withTimeout(pending, ms, 'no answer from Redis').then(
    (value) => (seen.value = value),
    (error: Error) => (seen.error = error),
  );
  return { resolve, seen };
}

/** The event loop was busy for `ms` past the bound: the clock moved, then the bound's timer fires that late. */
async function blockLoopPast(boundMs: number, ms: number) {
  jest.setSystemTime(Date.now() + ms);
  await jest.advanceTimersByTimeAsync(boundMs);
}

describe('withTimeout', () => {
  beforeEach(() => {
    jest.useFakeTimers();
  });
  afterEach(() => {
    jest.useRealTimers();
  });

  it('resolves with the answer that comes in time', async () => {
    const { resolve, seen } = bounded(100);
    await jest.advanceTimersByTimeAsync(50);
    resolve('PONG');
    await jest.advanceTimersByTimeAsync(0);
    expect(seen).toEqual({ value: 'PONG', error: undefined });
  });

  it('rejects, naming the bound, when nothing answers', async () => {
    const { seen } = bounded(100);
    await jest.advanceTimersByTimeAsync(99);
    expect(seen.error).toBeUndefined();
    await jest.advanceTimersByTimeAsync(1);
    await jest.advanceTimersByTimeAsync(1); // the turn that reads what the socket holds
    expect(seen.error?.message).toBe('no answer from Redis within 100 ms');
  });

  it('does not charge the store for a busy event loop: a timer that fires late is extended by its lateness', async () => {
    const { resolve, seen } = bounded(100);
    // The loop is blocked for 600 ms (a herd being parsed); the store answered meanwhile, unread.
    await blockLoopPast(100, 500);
    expect(seen.error).toBeUndefined();
    resolve('PONG');
    await jest.advanceTimersByTimeAsync(0);
    expect(seen).toEqual({ value: 'PONG', error: undefined });
  });

  it('a store that stays silent past a busy loop still fails, within the bound once more', async () => {
    const { seen } = bounded(100);
    await blockLoopPast(100, 500);
    expect(seen.error).toBeUndefined();
    await jest.advanceTimersByTimeAsync(99);
    expect(seen.error).toBeUndefined();
    await jest.advanceTimersByTimeAsync(1);
    await jest.advanceTimersByTimeAsync(1); // the turn that reads what the socket holds
    expect(seen.error?.message).toBe('no answer from Redis within 100 ms');
  });

  it('an answer read in the same loop turn as the expiry wins over it', async () => {
    const { resolve, seen } = bounded(100);
    // The timer and the reply are due together: the expiry waits for this turn's I/O.
    await jest.advanceTimersByTimeAsync(99);
    setTimeout(() => resolve('PONG'), 1);
    await jest.advanceTimersByTimeAsync(1);
    await jest.advanceTimersByTimeAsync(0);
    expect(seen).toEqual({ value: 'PONG', error: undefined });
  });
});
