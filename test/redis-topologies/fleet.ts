import { expect } from '@jest/globals';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMockProvider, type MockProvider, type MockProviderOptions } from '../../apps/mock-provider/src/index.js';
import { uniquePrompt } from '../support/gateway-harness.js';
import { startGatewayProcess, untilCoordinated, type AppProcess } from '../support/gateway-process.js';

/**
 * Four gateway replicas sharing one Redis, whatever its topology (the suites
 * in this folder give `--redis` and its TLS flags), and the checks every
 * topology must pass: one upstream call per herd, a rate limit and a spend
 * cap counted exactly across the replicas.
 */

/** Herds ask with a key without limits; one key is limited to `RATE` requests a minute, one to `CAP_USD` a day. */
export const RATE = 6;
export const CAP_USD = 16;
const KEY = 'sk-topology-herd-0001';
// Reads /health (the control routes want an admin key once keys are on).
const ADMIN_KEY = 'sk-topology-admin-001';
const RATE_KEY = 'sk-topology-rate-0001';
// Under a fleet-wide cap too (--max-spend): each request is held against two scopes.
const SPEND_KEY = 'sk-topology-spend-001';

export interface Fleet {
  provider: MockProvider;
  replicas: AppProcess[];
  urls: string[];
  stop(): Promise<void>;
}

export async function startFleet(
  redisFlags: string[],
  options: { count?: number; mock?: MockProviderOptions; flags?: string[] } = {},
): Promise<Fleet> {
  const provider = await startMockProvider(options.mock ?? { latencyMs: 300 });
  const dir = mkdtempSync(join(tmpdir(), 'npo-topology-'));
  writeFileSync(
    join(dir, 'keys.json'),
    JSON.stringify({
      [KEY]: { name: 'herd' },
      [ADMIN_KEY]: { name: 'admin', admin: true },
      [RATE_KEY]: { name: 'rated', requestsPerMinute: RATE },
      [SPEND_KEY]: { name: 'capped', maxSpend: `${CAP_USD}/day` },
    }),
  );
  // 4 output tokens at 1 USD each, input free: an answer with max_tokens 4 holds 4 USD in flight.
  writeFileSync(join(dir, 'prices.json'), JSON.stringify({ 'priced-model': { input: 0, output: 1_000_000 } }));
  const replicas: AppProcess[] = [];
  const stop = async () => {
    await Promise.all(replicas.map((replica) => replica.stop()));
    await provider.close();
  };
  try {
    const started = await Promise.all(
      Array.from({ length: options.count ?? 4 }, () =>
        startGatewayProcess([
          '--upstream',
          provider.url,
          ...redisFlags,
          '--keys-file',
          join(dir, 'keys.json'),
          '--prices',
          join(dir, 'prices.json'),
          '--max-spend',
          '100000/day',
          '--rate-window',
          '60',
          '--log-level',
          'warn',
          ...(options.flags ?? []),
        ]),
      ),
    );
    replicas.push(...started);
    await coordinated(replicas);
    return { provider, replicas, urls: replicas.map((r) => r.url), stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Until every replica says it coordinates through Redis. */
export function coordinated(replicas: AppProcess[], timeoutMs = 20_000): Promise<void> {
  return untilCoordinated(replicas, { timeoutMs, headers: { authorization: `Bearer ${ADMIN_KEY}` } });
}

export async function ask(url: string, content: string, options: { key?: string; maxTokens?: number } = {}) {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${options.key ?? KEY}` },
    body: JSON.stringify({
      model: 'priced-model',
      ...(options.maxTokens ? { max_tokens: options.maxTokens } : {}),
      messages: [{ role: 'user', content }],
    }),
  });
  const text = await response.text();
  let code: string | undefined;
  try {
    code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
  } catch {
    code = undefined;
  }
  return { status: response.status, text, code };
}

/** `count` identical requests round-robin over the replicas at once: every one answered; how many upstream calls and answers. */
async function herd(fleet: Fleet, label: string, count: number): Promise<{ calls: number; answers: number }> {
  const before = fleet.provider.stats().total;
  const prompt = uniquePrompt(label);
  const answers = await Promise.all(
    Array.from({ length: count }, (_, i) => ask(fleet.urls[i % fleet.urls.length], prompt)),
  );
  expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
  return {
    calls: fleet.provider.stats().total - before,
    answers: new Set(answers.map((a) => (JSON.parse(a.text) as { id: string }).id)).size,
  };
}

/** `count` identical requests round-robin over the replicas: one upstream call, one answer for all. */
export async function expectOneCallPerHerd(fleet: Fleet, label: string, count = 40): Promise<void> {
  expect(await herd(fleet, label, count)).toEqual({ calls: 1, answers: 1 });
}

/**
 * After a failover: herds until one makes a single call (a replica whose
 * last Redis operation failed acts alone for a second, and learns the new
 * master on its next try), then `herds` more in a row must each make one.
 */
export async function expectCoordinatedAgain(
  fleet: Fleet,
  label: string,
  herds = 3,
  timeoutMs = 30_000,
): Promise<void> {
  for (let i = 0, deadline = Date.now() + timeoutMs; ; i++) {
    const { calls } = await herd(fleet, `${label} settling ${i}`, 20);
    if (calls === 1) break;
    if (Date.now() > deadline)
      throw new Error(
        `herds still made ${calls} calls:\n${fleet.replicas.map((r) => r.output().slice(-1_500)).join('\n---\n')}`,
      );
  }
  for (let i = 0; i < herds; i++) await expectOneCallPerHerd(fleet, `${label} ${i}`, 20);
}

/** 4 x RATE different requests at once, spread over the replicas: exactly RATE are let in. */
export async function expectExactRateLimit(fleet: Fleet): Promise<void> {
  const answers = await Promise.all(
    Array.from({ length: 4 * RATE }, (_, i) =>
      ask(fleet.urls[i % fleet.urls.length], uniquePrompt(`rate ${i}`), { key: RATE_KEY }),
    ),
  );
  expect(answers.filter((a) => a.status === 200)).toHaveLength(RATE);
  expect(new Set(answers.filter((a) => a.status !== 200).map((a) => `${a.status} ${a.code}`))).toEqual(
    new Set(['429 rate_limit_exceeded']),
  );
}

/**
 * 40 different requests at once, each holding 4 USD, against the key's cap of
 * CAP_USD (and a fleet-wide cap it is far from): exactly CAP_USD / 4 answered,
 * then every replica refuses.
 */
export async function expectExactSpendCap(fleet: Fleet): Promise<void> {
  const answers = await Promise.all(
    Array.from({ length: 40 }, (_, i) =>
      ask(fleet.urls[i % fleet.urls.length], uniquePrompt(`spend ${i}`), { key: SPEND_KEY, maxTokens: 4 }),
    ),
  );
  const refused = new Set(answers.filter((a) => a.status !== 200).map((a) => `${a.status} ${a.code}`));
  expect(answers.filter((a) => a.status === 200)).toHaveLength(CAP_USD / 4);
  expect(refused).toEqual(new Set(['429 insufficient_quota']));
  for (const url of fleet.urls)
    expect((await ask(url, uniquePrompt('after the cap'), { key: SPEND_KEY, maxTokens: 4 })).code).toBe(
      'insufficient_quota',
    );
}
