import { afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { countingFetch, uniquePrompt } from '../support/gateway-harness.js';
import { ensureBuilt, startGatewayProcess, type AppProcess } from '../support/gateway-process.js';
import { redisServerMissing, startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';

/**
 * Two gateway processes sharing one Redis this suite owns: a key's request
 * limit and its spend cap are counted across both, so a client spreading its
 * requests over the replicas gets no more than the limit.
 */

const chat = (content: string) => ({
  model: 'priced-model',
  temperature: 0,
  messages: [{ role: 'user' as const, content }],
});

async function ask(url: string, content: string, key = 'sk-fleet-key-0001') {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify(chat(content)),
  });
  return {
    status: response.status,
    retryAfter: response.headers.get('retry-after'),
    body: (await response.json()) as { error?: { code?: string } },
  };
}

describe('budgets shared by replicas through Redis', () => {
  let redis: OwnedRedis | undefined;
  let provider: MockProvider | undefined;
  let replicas: AppProcess[] = [];

  beforeAll(async () => {
    const missing = redisServerMissing();
    if (missing) throw new Error(missing);
    await ensureBuilt();
  }, 180_000);
  afterEach(async () => {
    await Promise.all(replicas.map((replica) => replica.stop()));
    replicas = [];
    await provider?.close();
    await redis?.close();
  });

  const fleet = async (flags: string[]) => {
    redis = await startOwnedRedis();
    provider = await startMockProvider({ latencyMs: 5 });
    const dir = mkdtempSync(join(tmpdir(), 'npo-fleet-'));
    writeFileSync(
      join(dir, 'keys.json'),
      JSON.stringify({
        'sk-fleet-key-0001': { name: 'fleet', requestsPerMinute: 4, maxSpend: '21/day' },
        'sk-other-key-0002': { name: 'other' },
      }),
    );
    writeFileSync(
      join(dir, 'prices.json'),
      JSON.stringify({ 'priced-model': { input: 1_000_000, output: 1_000_000 } }),
    );
    replicas = await Promise.all(
      [0, 1].map(() =>
        startGatewayProcess([
          '--upstream',
          provider!.url,
          '--redis',
          redis!.url,
          '--keys-file',
          join(dir, 'keys.json'),
          '--prices',
          join(dir, 'prices.json'),
          ...flags,
        ]),
      ),
    );
    return replicas.map((r) => r.url);
  };

  it('a key limited to 4 requests per window gets 4 across both replicas, then 429 with Retry-After on either', async () => {
    const [a, b] = await fleet(['--rate-window', '5']);
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await ask(i % 2 ? b : a, uniquePrompt('spread'))).status);
    expect(statuses).toEqual([200, 200, 200, 200]);
    for (const url of [a, b]) {
      const refused = await ask(url, uniquePrompt('over'));
      expect(refused.status).toBe(429);
      expect(refused.body.error?.code).toBe('rate_limit_exceeded');
      expect(Number(refused.retryAfter)).toBeGreaterThanOrEqual(1);
      expect(Number(refused.retryAfter)).toBeLessThanOrEqual(5);
    }
    // Another key is not limited by this one's count.
    expect((await ask(b, uniquePrompt('other'), 'sk-other-key-0002')).status).toBe(200);
    expect(provider!.stats().total).toBe(5);

    // The official SDK sees a retryable 429: it waits as Retry-After says and is answered in the next window.
    const counted = countingFetch();
    const sdk = new OpenAI({
      baseURL: `${a}/v1`,
      apiKey: 'sk-fleet-key-0001',
      fetch: counted.fetch,
      maxRetries: 1,
      timeout: 60_000,
    });
    const answer = await sdk.chat.completions.create(chat(uniquePrompt('sdk')));
    expect(answer.choices).toHaveLength(1);
    expect(counted.attempts()).toBe(2);
  }, 60_000);

  it('a real SIGHUP re-reads the keys file: a bad one is refused in one line (no key in it) and the old keys stay', async () => {
    provider = await startMockProvider({ latencyMs: 5 });
    const dir = mkdtempSync(join(tmpdir(), 'npo-hup-'));
    const keys = join(dir, 'keys.json');
    writeFileSync(keys, JSON.stringify({ 'sk-hup-key-00001': { name: 'hup' } }));
    const gateway = await startGatewayProcess(['--upstream', provider.url, '--keys-file', keys]);
    replicas.push(gateway);
    expect((await ask(gateway.url, uniquePrompt('before'), 'sk-hup-key-00001')).status).toBe(200);
    writeFileSync(keys, '{"sk-hup-key-00002": {"name": "new"}, broken');
    process.kill(gateway.pid, 'SIGHUP');
    for (const deadline = Date.now() + 5_000; !gateway.output().includes('not reloaded (SIGHUP)');) {
      if (Date.now() > deadline) throw new Error(`no reload line:\n${gateway.output()}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(gateway.output()).not.toContain('sk-hup');
    // Still running, with the keys it had.
    expect((await ask(gateway.url, uniquePrompt('after'), 'sk-hup-key-00001')).status).toBe(200);
    expect((await ask(gateway.url, uniquePrompt('after'), 'sk-hup-key-00002')).status).toBe(401);
  }, 60_000);

  it('a per-key spend cap counts what both replicas spent', async () => {
    const [a, b] = await fleet(['--rate-window', '60']);
    // 7 USD per answer (3 tokens in, 4 out, 1 USD each): three answers reach the cap of 21, on either replica.
    expect((await ask(a, `one ${Math.random()} x`)).status).toBe(200);
    expect((await ask(b, `two ${Math.random()} x`)).status).toBe(200);
    expect((await ask(a, `three ${Math.random()} x`)).status).toBe(200);
    const refused = await ask(b, `four ${Math.random()} x`);
    expect(refused.status).toBe(429);
    expect(refused.body.error?.code).toBe('insufficient_quota');
  }, 60_000);

  it('100 concurrent requests over 4 replicas on a cap worth 4: at most 5 answered (holds are taken in Redis)', async () => {
    redis = await startOwnedRedis();
    provider = await startMockProvider({ latencyMs: 300 });
    const dir = mkdtempSync(join(tmpdir(), 'npo-holds-'));
    // 4 output tokens at 1 USD each, input free: every answer costs 4 USD, and holds 4 USD (max_tokens: 4) in flight.
    writeFileSync(join(dir, 'prices.json'), JSON.stringify({ 'priced-model': { input: 0, output: 1_000_000 } }));
    replicas = await Promise.all(
      [0, 1, 2, 3].map(() =>
        startGatewayProcess([
          '--upstream',
          provider!.url,
          '--redis',
          redis!.url,
          '--prices',
          join(dir, 'prices.json'),
          '--max-spend',
          '16/day',
          '--log-level',
          'warn',
        ]),
      ),
    );
    const urls = replicas.map((r) => r.url);
    const statuses = await Promise.all(
      Array.from({ length: 100 }, async (_, i) => {
        const response = await fetch(`${urls[i % 4]}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'priced-model',
            max_tokens: 4,
            messages: [{ role: 'user', content: `c${i}-${Math.random()} two three` }],
          }),
        });
        const body = (await response.json()) as { error?: { code?: string } };
        return response.status === 200 ? 200 : `${response.status} ${body.error?.code}`;
      }),
    );
    const ok = statuses.filter((s) => s === 200).length;
    expect(ok).toBeGreaterThanOrEqual(1);
    expect(ok).toBeLessThanOrEqual(5);
    expect(new Set(statuses.filter((s) => s !== 200))).toEqual(new Set(['429 insufficient_quota']));
    expect(provider.stats().total).toBe(ok);
    // And the fleet stays at its cap afterwards, on every replica.
    for (const url of urls) {
      const after = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'priced-model',
          max_tokens: 4,
          messages: [{ role: 'user', content: `after ${Math.random()} x` }],
        }),
      });
      if (ok >= 4) expect(after.status).toBe(429);
      await after.arrayBuffer();
    }
  }, 90_000);
});
