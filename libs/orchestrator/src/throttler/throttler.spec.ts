import { afterAll, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { createClient } from '@keyv/redis';
import { startOwnedRedis, type OwnedRedis } from '../../../../test/support/redis-server.js';
import { MemoryWindowCounters, RedisThrottlerStorage } from './index.js';

describe('MemoryWindowCounters', () => {
  it('counts hits in fixed windows, refuses past the limit until the window ends, then starts again', async () => {
    let now = 1_000_000;
    const counters = new MemoryWindowCounters(() => now);
    const hit = () => counters.increment('k', 10_000, 2, 0, 'requests');
    expect((await hit()).isBlocked).toBe(false);
    now += 3_000;
    expect(await hit()).toEqual({ totalHits: 2, timeToExpire: 7, isBlocked: false, timeToBlockExpire: 0 });
    expect(await hit()).toMatchObject({ isBlocked: true, timeToBlockExpire: 7 });
    now += 7_000;
    expect(await hit()).toMatchObject({ totalHits: 1, isBlocked: false });
    expect(await counters.add('t', 10_000, 5)).toEqual({ total: 5, timeToExpire: 10 });
    expect(await counters.add('t', 10_000, 0)).toEqual({ total: 5, timeToExpire: 10 });
  });
});

describe("RedisThrottlerStorage (a Redis of its own, never the machine's)", () => {
  let redis: OwnedRedis;
  let client: ReturnType<typeof createClient>;
  const prefix = `npo-test-${process.pid}-${Date.now()}`;
  beforeAll(async () => {
    redis = await startOwnedRedis();
    client = createClient({ url: redis.url, disableOfflineQueue: true });
    client.on('error', () => undefined);
    await client.connect();
  });
  afterAll(async () => {
    await client?.quit().catch(() => undefined);
    await redis?.close();
  });

  it('shares counts between two storages (two replicas), with Retry-After from the window', async () => {
    const a = new RedisThrottlerStorage({ client, prefix });
    const b = new RedisThrottlerStorage({ client, prefix });
    expect((await a.increment('key', 5_000, 3, 0, 'r')).totalHits).toBe(1);
    expect((await b.increment('key', 5_000, 3, 0, 'r')).totalHits).toBe(2);
    expect((await a.increment('key', 5_000, 3, 0, 'r')).isBlocked).toBe(false);
    const refused = await b.increment('key', 5_000, 3, 0, 'r');
    expect(refused).toMatchObject({ isBlocked: true, totalHits: 4 });
    expect(refused.timeToBlockExpire).toBeGreaterThanOrEqual(1);
    expect(refused.timeToBlockExpire).toBeLessThanOrEqual(5);
    expect((await a.increment('key', 5_000, 3, 0, 'r')).isBlocked).toBe(true);
    expect(await a.add('tokens', 5_000, 40)).toMatchObject({ total: 40 });
    expect(await b.add('tokens', 5_000, 2)).toMatchObject({ total: 42 });
  });

  it('counts alone, and says so once, while Redis does not answer; then shares again', async () => {
    const states: string[] = [];
    let down = true;
    const flaky = {
      sendCommand: (args: string[]) => (down ? new Promise<unknown>(() => undefined) : client.sendCommand(args)),
    };
    const storage = new RedisThrottlerStorage({
      client: flaky,
      prefix,
      opTimeoutMs: 50,
      retryMs: 100,
      onState: (s) => states.push(s),
    });
    // The clock is the test's: the 50 ms time limit and the 100 ms retry pass when it says so (Redis's own answers
    // still come over the socket), so a slow machine can neither expire an answer nor keep one waiting.
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
    try {
      const first = storage.increment('outage', 5_000, 1, 0, 'r');
      await jest.advanceTimersByTimeAsync(60); // past its 50 ms time limit
      expect((await first).isBlocked).toBe(false); // the time limit answered it, from the local count
      // Degraded: counted alone, without asking Redis (whose command would never be answered).
      expect((await storage.increment('outage', 5_000, 1, 0, 'r')).isBlocked).toBe(true);
      expect(states).toEqual(['degraded']);
      down = false;
      await jest.advanceTimersByTimeAsync(100);
      expect((await storage.increment('outage', 5_000, 1, 0, 'r')).totalHits).toBe(1);
      expect(states).toEqual(['degraded', 'ok']);
    } finally {
      jest.useRealTimers();
    }
  });
});
