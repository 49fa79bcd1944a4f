import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { Keyv, type KeyvStoreAdapter } from 'keyv';
import {
  AnswerWindow,
  entrySize,
  type AnswerWindowOptions,
  type StoreState,
  type WindowPayload,
} from './answer-window.js';

const bytes = (n: number): WindowPayload<unknown> => ({
  kind: 'bytes',
  body: Buffer.alloc(n, 120),
  contentType: 'application/json',
});

/** A Keyv store that keeps entries in a Map and misbehaves on command. */
function faultyStore() {
  const data = new Map<string, unknown>();
  const control = { mode: 'ok' as 'ok' | 'hang' | 'fail', calls: 0 };
  const run = <T>(answer: () => T): Promise<T> => {
    control.calls++;
    if (control.mode === 'hang') return new Promise<T>(() => undefined);
    if (control.mode === 'fail') return Promise.reject(new Error('ECONNREFUSED 127.0.0.1:1'));
    return Promise.resolve(answer());
  };
  const adapter = {
    opts: {},
    namespace: undefined,
    get: (key: string) => run(() => data.get(key)),
    set: (key: string, value: unknown) => run(() => void data.set(key, value)),
    delete: (key: string) => run(() => data.delete(key)),
    clear: () => run(() => data.clear()),
    disconnect: () => run(() => undefined),
    on: () => adapter,
  } as unknown as KeyvStoreAdapter;
  const keyv = new Keyv({ store: adapter, serialize: undefined, deserialize: undefined });
  return { keyv, control, data };
}

function windowWith(overrides: Partial<AnswerWindowOptions> = {}) {
  const states: Array<StoreState> = [];
  const window = new AnswerWindow({
    maxEntries: 1_000,
    maxBytes: 1_000_000,
    storeTimeoutMs: 100,
    storeRetryMs: 1_000,
    onStoreState: (state) => states.push(state),
    ...overrides,
  });
  return { window, states };
}

describe('AnswerWindow', () => {
  afterEach(() => {
    jest.useRealTimers();
  });

  describe('a keeper of stream bytes', () => {
    /** Keeps copies, and counts what it was told to let go. */
    function keeper() {
      const released: string[] = [];
      return {
        released,
        keep: (chunks: readonly Buffer[], size: number) => {
          const copy = Buffer.concat(chunks, size);
          return { chunks: [copy], release: () => released.push(copy.toString()) };
        },
      };
    }
    const stream = (text: string): WindowPayload<unknown> => ({
      kind: 'stream',
      head: { contentType: 'text/event-stream' },
      chunks: [Buffer.from(text.slice(0, 3)), Buffer.from(text.slice(3))],
    });

    it("keeps a stored stream's bytes where the keeper puts them, and tells it when each is let go", async () => {
      const { window } = windowWith({ maxEntries: 2 });
      const bytesKeeper = keeper();
      window.keeper = bytesKeeper;
      await window.set('a', stream('data: a'), 60_000);
      const kept = window.getLocal('a') as Extract<WindowPayload<unknown>, { kind: 'stream' }>;
      expect(kept.chunks).toEqual([Buffer.from('data: a')]);
      await window.set('b', stream('data: b'), 60_000);
      await window.set('c', stream('data: c'), 60_000); // evicts a
      expect(bytesKeeper.released).toEqual(['data: a']);
      await window.set('b', stream('data: B'), 60_000); // replaces b
      expect(bytesKeeper.released).toEqual(['data: a', 'data: b']);
      await window.clear();
      expect(bytesKeeper.released.sort()).toEqual(['data: B', 'data: a', 'data: b', 'data: c']);
    });

    it('lets an expired stream go when it is looked up, and leaves text streams and plain answers alone', async () => {
      jest.useFakeTimers({ now: 1_000_000 });
      const { window } = windowWith();
      const bytesKeeper = keeper();
      window.keeper = bytesKeeper;
      await window.set('a', stream('data: a'), 1_000);
      const text: WindowPayload<unknown> = {
        kind: 'stream',
        head: { contentType: 'text/event-stream' },
        chunks: ['data: t'],
      };
      await window.set('t', text, 60_000);
      await window.set('p', bytes(10), 60_000);
      jest.setSystemTime(1_002_000);
      expect(window.getLocal('a')).toBeUndefined();
      expect(bytesKeeper.released).toEqual(['data: a']);
      expect((window.getLocal('t') as { chunks: unknown[] }).chunks).toEqual(['data: t']);
      await window.clear();
      expect(bytesKeeper.released).toEqual(['data: a']);
    });
  });

  describe('memory is bounded in bytes', () => {
    it('never holds more than maxBytes, evicting the least recently used', async () => {
      const { window } = windowWith({ maxBytes: 10 * (10_000 + 256) });
      for (let i = 0; i < 100; i++) await window.set(`k${i}`, bytes(10_000), 60_000);
      const health = window.health();
      expect(health.bytes).toBeLessThanOrEqual(health.maxBytes);
      expect(health.entries).toBe(10);
      expect(window.getLocal('k99')).toBeDefined();
      expect(window.getLocal('k0')).toBeUndefined();
    });

    it('counts what an entry holds: bytes, stream chunks, serialised values', () => {
      expect(entrySize(bytes(1_000))).toBeGreaterThanOrEqual(1_000);
      const stream = entrySize({
        kind: 'stream',
        head: { contentType: 'text/event-stream' },
        chunks: ['x'.repeat(500), 'y'.repeat(500)],
      });
      expect(stream).toBeGreaterThanOrEqual(1_000);
      expect(entrySize({ kind: 'value', value: { text: 'z'.repeat(1_000) } })).toBeGreaterThanOrEqual(1_000);
    });

    it('an expired entry is not returned', async () => {
      jest.useFakeTimers({ now: 1_000_000 });
      const { window } = windowWith();
      await window.set('k', bytes(10), 5_000);
      expect(window.getLocal('k')).toMatchObject({ storedAt: 1_000_000, expiresAt: 1_005_000 });
      jest.setSystemTime(1_005_001);
      expect(window.getLocal('k')).toBeUndefined();
    });
  });

  describe('a shared store never holds a request up', () => {
    let store: ReturnType<typeof faultyStore>;
    beforeEach(() => {
      store = faultyStore();
    });

    it('shares answers while the store answers, and keeps a shared hit in memory', async () => {
      const writer = windowWith({ stores: [store.keyv] }).window;
      await writer.set('k', bytes(10), 60_000);
      const reader = windowWith({ stores: [store.keyv] }).window;
      expect(reader.getLocal('k')).toBeUndefined();
      expect(await reader.get('k')).toMatchObject({ kind: 'bytes' });
      expect(reader.getLocal('k')).toMatchObject({ kind: 'bytes' });
    });

    it('a hung store: the look-up is a miss after storeTimeoutMs, reported once, then skipped until a retry succeeds', async () => {
      jest.useFakeTimers();
      const { window, states } = windowWith({ stores: [store.keyv] });
      store.control.mode = 'hang';
      const first = window.get('k');
      await jest.advanceTimersByTimeAsync(100 + 1); // the bound, then the turn that reads what the socket holds
      expect(await first).toBeUndefined();
      expect(states).toEqual(['degraded']);
      expect(window.health().store).toMatchObject({ state: 'degraded', error: expect.stringContaining('100 ms') });

      // Degraded: look-ups and writes answer at once, without touching the store.
      const calls = store.control.calls;
      expect(window.hasShared).toBe(false);
      expect(await window.get('other')).toBeUndefined();
      await window.set('other', bytes(10), 60_000);
      expect(store.control.calls).toBe(calls);
      expect(window.getLocal('other')).toBeDefined(); // memory still answers

      // Still hung at the first retry: it stays degraded, and says so once only.
      await jest.advanceTimersByTimeAsync(1_000 + 100);
      expect(states).toEqual(['degraded']);
      store.control.mode = 'ok';
      await jest.advanceTimersByTimeAsync(1_000 + 100);
      expect(states).toEqual(['degraded', 'ok']);
      expect(window.hasShared).toBe(true);
      await window.set('again', bytes(10), 60_000);
      expect([...store.data.keys()].some((key) => key.endsWith('again'))).toBe(true);
    });

    it('a failing store (connection refused) is a miss and degrades at once', async () => {
      const { window, states } = windowWith({ stores: [store.keyv] });
      store.control.mode = 'fail';
      expect(await window.get('k')).toBeUndefined();
      expect(states).toEqual(['degraded']);
      expect(window.health().store?.error).toContain('ECONNREFUSED');
    });

    it('an error the store reports on its own (a lost connection) degrades it', () => {
      const { window, states } = windowWith({ stores: [store.keyv] });
      store.keyv.emit('error', new Error('Socket closed unexpectedly'));
      expect(states).toEqual(['degraded']);
      expect(window.hasShared).toBe(false);
    });

    it('disconnect completes even when the store hangs', async () => {
      jest.useFakeTimers();
      const { window } = windowWith({ stores: [store.keyv] });
      store.control.mode = 'hang';
      let done = false;
      void window.disconnect().then(() => (done = true));
      await jest.advanceTimersByTimeAsync(1_000 + 1);
      expect(done).toBe(true);
    });
  });
});
