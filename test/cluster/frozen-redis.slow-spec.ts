import { afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { ensureBuilt, startGatewayProcess, type AppProcess } from '../support/gateway-process.js';
import { redisServerMissing, startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';

/**
 * Three gateway processes sharing one Redis this suite owns, which it then
 * freezes (SIGSTOP: connections stay open, nothing answers). Limits and caps
 * counted in Redis must not be passed replicas-times over
 * (--limits-without-redis closed refuses, share enforces each replica's
 * share), /health and the metrics say the fleet is split, and a herd against
 * a slow provider makes at most one call per replica with every caller
 * answered.
 */

const REPLICAS = 3;

interface Answer {
  status: number;
  retryAfter: string | null;
  code?: string;
}

async function ask(
  url: string,
  content: string,
  extra: Record<string, unknown> = {},
  caller = 'sk-frozen-caller',
): Promise<Answer> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${caller}` },
    body: JSON.stringify({ model: 'priced-model', temperature: 0, messages: [{ role: 'user', content }], ...extra }),
  });
  const body = (await response.json()) as { error?: { code?: string } };
  return { status: response.status, retryAfter: response.headers.get('retry-after'), code: body.error?.code };
}

async function health(url: string) {
  return (await (await fetch(`${url}/health`)).json()) as {
    status: string;
    redis: {
      state: string;
      probe: string;
      cause?: string;
      fleetSize: number;
      limitsWithoutRedis: string;
      eviction: { policy: string };
    } | null;
  };
}

async function until(
  condition: () => Promise<boolean>,
  what: string,
  ms = 20_000,
  last?: () => Promise<unknown>,
): Promise<void> {
  for (const deadline = Date.now() + ms; !(await condition());) {
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}${last ? `: ${JSON.stringify(await last())}` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, 50)); // polling interval
  }
}

describe('a frozen Redis under several replicas', () => {
  let redis: OwnedRedis | undefined;
  let provider: MockProvider | undefined;
  let replicas: AppProcess[] = [];

  beforeAll(async () => {
    const missing = redisServerMissing();
    if (missing) throw new Error(missing);
    await ensureBuilt();
  }, 180_000);
  afterEach(async () => {
    // Thawed before it is killed (close() sends SIGCONT too): nothing stays stopped.
    redis?.thaw();
    await Promise.all(replicas.map((replica) => replica.stop()));
    replicas = [];
    await provider?.close();
    await redis?.close();
    redis = undefined;
  });

  /** Three replicas that have all seen each other (the fleet's size is what `share` divides by). */
  const fleet = async (flags: string[], latencyMs = 5) => {
    redis = await startOwnedRedis();
    provider = await startMockProvider({ latencyMs });
    const dir = mkdtempSync(join(tmpdir(), 'npo-frozen-'));
    // 4 output tokens at 1 USD each, input free: every answer costs 4 USD, and holds 4 USD (max_tokens: 4) in flight.
    writeFileSync(join(dir, 'prices.json'), JSON.stringify({ 'priced-model': { input: 0, output: 1_000_000 } }));
    replicas = await Promise.all(
      Array.from({ length: REPLICAS }, () =>
        startGatewayProcess([
          '--upstream',
          provider!.url,
          '--redis',
          redis!.url,
          '--prices',
          join(dir, 'prices.json'),
          ...flags,
        ]),
      ),
    );
    const urls = replicas.map((r) => r.url);
    for (const url of urls)
      await until(async () => (await health(url)).redis?.fleetSize === REPLICAS, `${url} to see the whole fleet`);
    return urls;
  };

  /** Requests spread over the replicas, all at once; the answers' statuses and codes. */
  const burst = (urls: string[], n: number, label: string, extra: Record<string, unknown> = {}) =>
    Promise.all(
      Array.from({ length: n }, (_, i) => ask(urls[i % urls.length], `${label} ${i} ${Math.random()}`, extra)),
    );

  it('closed: with Redis frozen, requests under a rate limit are refused with 503 limits_unavailable and Retry-After, none admitted; /health says why', async () => {
    const urls = await fleet(['--requests-per-minute', '6', '--limits-without-redis', 'closed']);
    expect((await health(urls[0])).redis).toMatchObject({
      state: 'up',
      limitsWithoutRedis: 'closed',
      eviction: { policy: 'noeviction' },
    });
    // A start with Redis up says no outage.
    for (const replica of replicas) expect(replica.output()).not.toMatch(/unavailable|not usable/);
    redis!.freeze();
    const answers = await burst(urls, 30, 'closed');
    expect(answers.filter((a) => a.status === 200)).toHaveLength(0);
    for (const answer of answers) {
      expect(answer).toMatchObject({ status: 503, code: 'limits_unavailable' });
      expect(Number(answer.retryAfter)).toBeGreaterThanOrEqual(1);
    }
    expect(provider!.stats().total).toBe(0);
    for (const url of urls) {
      // Its probe notices, however few requests this replica sees.
      await until(async () => (await health(url)).redis?.probe === 'down', `${url}'s probe to notice`);
      expect((await health(url)).status).toBe('degraded');
      expect((await health(url)).redis).toMatchObject({ state: 'down', cause: 'timeout' });
      const metrics = await (await fetch(`${url}/orchestrator/metrics`)).text();
      expect(metrics).toMatch(/^gateway_redis_coordination_up 0$/m);
    }
    // Once Redis answers again, so does the fleet. (The counts sent before the freeze was noticed run in Redis when it
    // wakes: this caller's window may now be full, so another caller, counted under its own key, is asked.)
    redis!.thaw();
    for (const url of urls)
      await until(
        async () => (await health(url)).redis?.state === 'up',
        `${url} to be up again`,
        20_000,
        async () => (await health(url)).redis,
      );
    expect((await ask(urls[0], `after ${Math.random()}`, {}, 'sk-another-caller')).status).toBe(200);
    expect(await (await fetch(`${urls[0]}/orchestrator/metrics`)).text()).toMatch(/^gateway_redis_coordination_up 1$/m);
    // Each change said once, at the default level (info), the way back included, for the fleet and for each part.
    const count = (text: string, pattern: RegExp) => text.split('\n').filter((line) => pattern.test(line)).length;
    const parts = ['rate limits', 'replica coordination', 'spend caps'];
    const balanced = (output: string) =>
      count(output, /Redis answers again/) === 1 &&
      parts.every(
        (part) =>
          count(output, new RegExp(`${part} through Redis is back`)) ===
          count(output, new RegExp(`${part} through Redis unavailable`)),
      );
    for (const replica of replicas) {
      // Lines reach stdout in batches: wait for the last ones.
      await until(
        async () => balanced(replica.output()),
        'every outage line to have its back line',
        5_000,
        async () =>
          replica
            .output()
            .split('\n')
            .filter((l) => /Redis/.test(l)),
      );
      const output = replica.output();
      expect(count(output, /Redis is not usable \(timeout/)).toBe(1);
      expect(count(output, /Redis answers again/)).toBe(1);
      for (const part of parts)
        expect(count(output, new RegExp(`${part} through Redis unavailable`))).toBeLessThanOrEqual(1);
    }
  }, 120_000);

  it('share: with Redis frozen, a limit of 6 requests over 3 replicas admits at most 6 in all (2 each), and a cap of 12 USD spends at most 12', async () => {
    const urls = await fleet([
      '--requests-per-minute',
      '6',
      '--max-spend',
      '12/day',
      '--limits-without-redis',
      'share',
    ]);
    redis!.freeze();
    const answers = await burst(urls, 30, 'share', { max_tokens: 4 });
    const admitted = answers.filter((a) => a.status === 200).length;
    // Each replica enforces its share: 6 / 3 requests, and 12 / 3 USD (one 4 USD answer each).
    expect(admitted).toBeGreaterThanOrEqual(1);
    expect(admitted).toBeLessThanOrEqual(REPLICAS);
    expect(provider!.stats().total).toBe(admitted);
    for (const answer of answers.filter((a) => a.status !== 200)) {
      expect(answer.status).toBe(429);
      expect(['insufficient_quota', 'rate_limit_exceeded']).toContain(answer.code);
    }
  }, 120_000);

  it('share: a rate limit alone (no cap) admits at most the limit across the fleet while Redis is frozen', async () => {
    const urls = await fleet(['--requests-per-minute', '6', '--limits-without-redis', 'share']);
    redis!.freeze();
    const answers = await burst(urls, 30, 'share-rate');
    const admitted = answers.filter((a) => a.status === 200).length;
    expect(admitted).toBeGreaterThanOrEqual(1);
    expect(admitted).toBeLessThanOrEqual(6);
    for (const answer of answers.filter((a) => a.status !== 200))
      expect(answer).toMatchObject({ status: 429, code: 'rate_limit_exceeded' });
  }, 120_000);

  it('open (the old behaviour, on request): each replica applies the whole limit, so the fleet admits more than it', async () => {
    const urls = await fleet(['--requests-per-minute', '6', '--limits-without-redis', 'open']);
    redis!.freeze();
    const admitted = (await burst(urls, 30, 'open')).filter((a) => a.status === 200).length;
    expect(admitted).toBeGreaterThan(6);
  }, 120_000);

  it('a Redis that refuses the password: the fleet says degraded with cause auth from the start, /health/ready fails with --ready-requires-store, requests are answered', async () => {
    redis = await startOwnedRedis({ requirePassword: 'the-right-password' });
    provider = await startMockProvider({ latencyMs: 5 });
    const replica = await startGatewayProcess([
      '--upstream',
      provider.url,
      '--redis',
      `redis://:a-wrong-password@127.0.0.1:${redis.port}`,
      '--ready-requires-store',
    ]);
    replicas.push(replica);
    await until(async () => (await health(replica.url)).redis?.state === 'down', 'the replica to say Redis is down');
    const seen = await health(replica.url);
    expect(seen.status).toBe('degraded');
    expect(seen.redis).toMatchObject({ state: 'down', cause: 'auth' });
    const ready = await fetch(`${replica.url}/health/ready`);
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { details: Record<string, unknown> }).details.redis).toMatchObject({
      status: 'down',
      cause: 'auth',
    });
    expect((await ask(replica.url, `auth ${Math.random()}`)).status).toBe(200);
    expect(await (await fetch(`${replica.url}/orchestrator/metrics`)).text()).toMatch(
      /^gateway_redis_coordination_up 0$/m,
    );
    // No password in what the gateway says.
    expect(replica.output()).not.toContain('a-wrong-password');
  }, 120_000);

  it('a herd against a slow provider while Redis is frozen: at most one call per replica, every caller answered', async () => {
    const urls = await fleet([], 1_500);
    redis!.freeze();
    const prompt = `herd ${Math.random()}`;
    const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => ask(urls[i % urls.length], prompt)));
    expect(answers.map((a) => a.status)).toEqual(Array.from({ length: 30 }, () => 200));
    expect(provider!.stats().total).toBeGreaterThanOrEqual(1);
    expect(provider!.stats().total).toBeLessThanOrEqual(REPLICAS);

    // Again once every replica knows Redis is down: still one call per replica at most.
    for (const url of urls) await until(async () => (await health(url)).redis?.state === 'down', `${url} to notice`);
    const before = provider!.stats().total;
    const again = `herd again ${Math.random()}`;
    const second = await Promise.all(Array.from({ length: 30 }, (_, i) => ask(urls[i % urls.length], again)));
    expect(second.every((a) => a.status === 200)).toBe(true);
    expect(provider!.stats().total - before).toBeLessThanOrEqual(REPLICAS);
  }, 120_000);
});
