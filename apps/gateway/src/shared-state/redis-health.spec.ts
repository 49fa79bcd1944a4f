import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { RedisHealth, RedisUnavailableError, causeOf, type RedisCommandClient } from './redis-health.js';

const PERIOD = 500;

/** A Redis stand-in: answers at once, or (frozen) keeps every command pending until thawed, as a SIGSTOPped server does. */
class FakeRedis implements RedisCommandClient {
  frozen = false;
  failWith?: Error;
  config: Record<string, string> | Error = { 'maxmemory-policy': 'noeviction', maxmemory: '0' };
  fleet = 3;
  probes = 0;
  private pending: Array<() => void> = [];

  sendCommand(args: string[]): Promise<unknown> {
    if (args[0] === 'EVAL') this.probes++;
    if (this.failWith) return Promise.reject(this.failWith);
    const answer = () => {
      if (args[0] === 'CONFIG') {
        if (this.config instanceof Error) throw this.config;
        return [args[2], this.config[args[2]]];
      }
      return args[0] === 'EVAL' ? this.fleet : 'OK';
    };
    if (!this.frozen) return Promise.resolve().then(answer);
    return new Promise((resolve, reject) =>
      this.pending.push(() => {
        try {
          resolve(answer());
        } catch (error) {
          reject(error);
        }
      }),
    );
  }

  thaw(): void {
    this.frozen = false;
    for (const answer of this.pending.splice(0)) answer();
  }
}

function lines() {
  const warn: string[] = [];
  const info: string[] = [];
  return { warn, info, log: { warn: (line: string) => warn.push(line), info: (line: string) => info.push(line) } };
}

/** Lets promise callbacks run (fake timers do not touch them). */
async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}

describe('RedisHealth', () => {
  beforeEach(() => {
    jest.useFakeTimers();
  });
  afterEach(() => {
    jest.useRealTimers();
  });

  it('a frozen Redis is down within two probe periods (an unanswered probe at the next period), said once, and back once it answers', async () => {
    const redis = new FakeRedis();
    const out = lines();
    const health = new RedisHealth({
      client: redis,
      prefix: 'npo',
      periodMs: PERIOD,
      connected: Promise.resolve(),
      log: out.log,
    });
    health.start();
    await settle();
    expect(health.state).toBe('up');
    expect(health.fleetSize).toBe(3);

    redis.frozen = true;
    // Period 1 sends a probe that gets no answer; period 2 finds it unanswered (once the loop turn's I/O is read).
    await jest.advanceTimersByTimeAsync(PERIOD);
    expect(health.state).toBe('up');
    await jest.advanceTimersByTimeAsync(PERIOD + 1);
    expect(health.state).toBe('down');
    expect(health.problem?.cause).toBe('timeout');
    // More periods while frozen: no more lines, no pile of probes.
    const probes = redis.probes;
    await jest.advanceTimersByTimeAsync(10 * PERIOD);
    expect(redis.probes).toBe(probes);
    expect(out.warn.filter((l) => /Redis is not usable/.test(l))).toHaveLength(1);
    // The last known fleet size stays while Redis is away.
    expect(health.fleetSize).toBe(3);

    redis.thaw();
    await settle();
    expect(health.state).toBe('up');
    expect(out.info.filter((l) => /Redis answers again/.test(l))).toHaveLength(1);
    health.close();
  });

  it('while down, commands through the gate fail at once (no wait for their own bound); they go through again once it is up', async () => {
    const redis = new FakeRedis();
    const health = new RedisHealth({
      client: redis,
      prefix: 'npo',
      periodMs: PERIOD,
      connected: Promise.resolve(),
      log: lines().log,
    });
    const gated = health.gate(redis);
    health.start();
    await settle();
    redis.frozen = true;
    await jest.advanceTimersByTimeAsync(2 * PERIOD + 1);
    await expect(gated.sendCommand(['GET', 'x'])).rejects.toBeInstanceOf(RedisUnavailableError);
    redis.thaw();
    await settle();
    await expect(gated.sendCommand(['GET', 'x'])).resolves.toBe('OK');
    health.close();
  });

  it('at start, a command waits for the first connection instead of failing as offline, and no outage is said', async () => {
    const redis = new FakeRedis();
    const out = lines();
    let connect!: () => void;
    const connected = new Promise<void>((resolve) => (connect = resolve));
    const health = new RedisHealth({ client: redis, prefix: 'npo', periodMs: PERIOD, connected, log: out.log });
    health.start();
    let answered: unknown;
    void health
      .gate(redis)
      .sendCommand(['GET', 'x'])
      .then((v) => (answered = v));
    await settle();
    expect(answered).toBeUndefined();
    expect(health.state).toBe('starting');
    connect();
    await settle();
    expect(answered).toBe('OK');
    expect(health.state).toBe('up');
    expect(out.warn).toEqual([]);
    health.close();
  });

  it('a part that failed for want of an answer is back when Redis answers again, with its back line, even with no traffic to tell it', async () => {
    const redis = new FakeRedis();
    const out = lines();
    const health = new RedisHealth({
      client: redis,
      prefix: 'npo',
      periodMs: PERIOD,
      connected: Promise.resolve(),
      log: out.log,
    });
    health.start();
    await settle();
    redis.frozen = true;
    health.report('spend-caps', 'degraded', new Error('no answer from Redis within 500 ms'));
    await jest.advanceTimersByTimeAsync(2 * PERIOD + 1);
    expect(health.state).toBe('down');
    redis.thaw();
    await settle();
    expect(health.state).toBe('up');
    expect(out.info.filter((l) => /spend caps through Redis is back/.test(l))).toHaveLength(1);
    health.close();
  });

  it('a part that timed out while the probes never missed is back once a probe sent after its failure is answered', async () => {
    const redis = new FakeRedis();
    const out = lines();
    const health = new RedisHealth({
      client: redis,
      prefix: 'npo',
      periodMs: PERIOD,
      connected: Promise.resolve(),
      log: out.log,
    });
    health.start();
    await settle();
    health.report('rate-limits', 'degraded', new Error('no answer from Redis within 500 ms'));
    expect(health.state).toBe('down');
    await jest.advanceTimersByTimeAsync(PERIOD);
    expect(health.state).toBe('up');
    expect(out.info.filter((l) => /rate limits through Redis is back/.test(l))).toHaveLength(1);
    health.close();
  });

  it('names the cause: an AUTH refusal the connection reported explains the probe failing as offline', async () => {
    const redis = new FakeRedis();
    const health = new RedisHealth({
      client: redis,
      prefix: 'npo',
      periodMs: PERIOD,
      connected: Promise.resolve(),
      log: lines().log,
    });
    health.connectionFailed(new Error('WRONGPASS invalid username-password pair or user is disabled.'));
    redis.failWith = new Error('The client is offline');
    health.start();
    await settle();
    expect(health.state).toBe('down');
    expect(health.problem).toMatchObject({ cause: 'auth', error: expect.stringMatching(/WRONGPASS/) });
    health.close();
  });

  it('a part failing (cross-slot) makes the fleet down even while PING-like probes pass, and its back line comes once', async () => {
    const redis = new FakeRedis();
    const out = lines();
    const health = new RedisHealth({
      client: redis,
      prefix: 'npo',
      periodMs: PERIOD,
      connected: Promise.resolve(),
      log: out.log,
    });
    health.start();
    await settle();
    health.report('rate-limits', 'degraded', new Error("CROSSSLOT Keys in request don't hash to the same slot"));
    health.report('rate-limits', 'degraded', new Error("CROSSSLOT Keys in request don't hash to the same slot"));
    await jest.advanceTimersByTimeAsync(3 * PERIOD);
    expect(health.state).toBe('down');
    expect(health.view()).toMatchObject({
      state: 'down',
      cause: 'cross-slot',
      parts: { 'rate-limits': { cause: 'cross-slot' } },
    });
    expect(out.warn.filter((l) => /rate limits through Redis unavailable/.test(l))).toHaveLength(1);
    health.report('rate-limits', 'ok');
    health.report('rate-limits', 'ok');
    expect(health.state).toBe('up');
    expect(out.info.filter((l) => /rate limits through Redis is back/.test(l))).toHaveLength(1);
    health.close();
  });

  it("warns when the eviction policy may evict the fleet's keys (volatile-* too), and says unknown when CONFIG is refused", async () => {
    const redis = new FakeRedis();
    redis.config = { 'maxmemory-policy': 'volatile-lru', maxmemory: '104857600' };
    const out = lines();
    const health = new RedisHealth({
      client: redis,
      prefix: 'npo',
      periodMs: PERIOD,
      connected: Promise.resolve(),
      log: out.log,
    });
    health.start();
    await settle();
    expect(health.view().eviction).toEqual({ policy: 'volatile-lru', maxmemory: 104857600, keysMayBeEvicted: true });
    expect(out.warn.filter((l) => /maxmemory-policy is volatile-lru/.test(l))).toHaveLength(1);
    health.close();

    const managed = new FakeRedis();
    managed.config = new Error("ERR unknown command 'CONFIG'");
    const quiet = lines();
    const second = new RedisHealth({
      client: managed,
      prefix: 'npo',
      periodMs: PERIOD,
      connected: Promise.resolve(),
      log: quiet.log,
    });
    second.start();
    await settle();
    expect(second.view().eviction).toEqual({ policy: 'unknown', maxmemory: null, keysMayBeEvicted: null });
    expect(quiet.warn.filter((l) => /maxmemory-policy unknown/.test(l))).toHaveLength(1);
    // CONFIG refused is no outage.
    expect(second.state).toBe('up');
    second.close();

    const safe = new FakeRedis();
    const none = lines();
    const third = new RedisHealth({
      client: safe,
      prefix: 'npo',
      periodMs: PERIOD,
      connected: Promise.resolve(),
      log: none.log,
    });
    third.start();
    await settle();
    expect(third.view().eviction).toEqual({ policy: 'noeviction', maxmemory: 0, keysMayBeEvicted: false });
    expect(none.warn).toEqual([]);
    third.close();
  });

  it('tells causes apart', () => {
    expect(causeOf(new Error('NOAUTH Authentication required.'))).toBe('auth');
    expect(causeOf(Object.assign(new Error('self-signed certificate'), { code: 'DEPTH_ZERO_SELF_SIGNED_CERT' }))).toBe(
      'tls',
    );
    expect(causeOf(new Error("CROSSSLOT Keys in request don't hash to the same slot"))).toBe('cross-slot');
    expect(causeOf(new Error('MOVED 3999 127.0.0.1:6381'))).toBe('topology');
    expect(causeOf(new Error('CLUSTERDOWN The cluster is down'))).toBe('topology');
    expect(causeOf(new Error("OOM command not allowed when used memory > 'maxmemory'."))).toBe('out-of-memory');
    expect(causeOf(new Error('no answer from Redis within 500 ms'))).toBe('timeout');
    expect(causeOf(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' }))).toBe(
      'unreachable',
    );
  });
});
