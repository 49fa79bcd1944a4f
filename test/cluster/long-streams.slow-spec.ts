import { afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { longReply } from '../../apps/mock-provider/src/content.js';
import { sseData, uniquePrompt } from '../support/gateway-harness.js';
import { ensureBuilt, startGatewayProcess, untilCoordinated, type AppProcess } from '../support/gateway-process.js';
import { redisServerMissing, startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';

/**
 * Streams too long for what a replica keeps of its streams in flight (`--in-flight-max-bytes`, 4 MiB by default):
 * ten of about 790 KB each at once, herds of 30 callers per key spread over the replicas. The callers that joined a
 * stream follow it to its end on every replica, whatever the bound lets go for late joiners; and a Redis that
 * evicts the calls' keys under memory pressure never gives the callers of one herd two different bodies.
 */

const KEYS = 10;
const CALLERS = 30;
/** About 790 KB of stream: the mock's `mock:long-<KiB>` answer in some 1 150 events of 512 bytes of content each. */
const LONG_KIB = 576;
/** Callers of a key arrive this far apart: the herd spreads over about two seconds of a three-second stream. */
const ARRIVAL_GAP_MS = 70;

const chat = (content: string) =>
  JSON.stringify({ model: 'mock-model', stream: true, messages: [{ role: 'user', content }] });

interface Answer {
  key: number;
  status: number;
  text: string;
}

async function ask(url: string, key: number, body: string): Promise<Answer> {
  try {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-long' },
      body,
    });
    return { key, status: response.status, text: await response.text() };
  } catch (error) {
    // A connection cut mid-answer: counted as a broken answer, not a failed test run.
    return { key, status: 0, text: `cut: ${(error as Error).message}` };
  }
}

/** The content an answer streamed, whole only when it ended with `[DONE]`. */
function content(answer: Answer): { complete: boolean; text: string; ids: Set<string>; lost: boolean } {
  const data = sseData(answer.text);
  const ids = new Set<string>();
  let text = '';
  let lost = false;
  for (const d of data) {
    if (d === '[DONE]') continue;
    const parsed = JSON.parse(d) as {
      id?: string;
      error?: { code?: string };
      choices?: Array<{ delta: { content?: string } }>;
    };
    if (parsed.error) {
      if (parsed.error.code === 'leader_lost') lost = true;
      continue;
    }
    if (parsed.id) ids.add(parsed.id);
    text += parsed.choices?.[0]?.delta.content ?? '';
  }
  return { complete: answer.status === 200 && data.at(-1) === '[DONE]', text, ids, lost };
}

/**
 * Every key's herd: its first caller on the first replica (which then leads all ten streams), the others spread
 * round robin over the replicas and over the time the streams run, so most join a stream already under way.
 */
async function herds(urls: string[], label: string): Promise<Answer[]> {
  const bodies = Array.from({ length: KEYS }, (_, k) => chat(`${uniquePrompt(`${label} ${k}`)} mock:long-${LONG_KIB}`));
  const asks: Array<Promise<Answer>> = bodies.map((body, k) => ask(urls[0], k, body));
  for (let i = 1; i < CALLERS; i++) {
    await new Promise((resolve) => setTimeout(resolve, ARRIVAL_GAP_MS));
    for (let k = 0; k < KEYS; k++) asks.push(ask(urls[(i + k) % urls.length], k, bodies[k]));
  }
  return Promise.all(asks);
}

/** The answer's content as the mock streams it: numbered pieces, so a missing event shows. */
const EXPECTED = longReply(LONG_KIB).text;

/**
 * Per key: the distinct bodies its callers got, how many were whole, how many lost; `mixed`: answers with bytes of
 * two calls (two ids), or whose content is not the answer's start (an event missing: a hole).
 */
function tally(answers: Answer[]) {
  const perKey = Array.from({ length: KEYS }, () => ({
    bodies: new Set<string>(),
    calls: new Set<string>(),
    complete: 0,
    lost: 0,
    mixed: 0,
  }));
  for (const answer of answers) {
    const got = content(answer);
    const key = perKey[answer.key];
    if (got.lost) key.lost++;
    if (got.ids.size > 1 || !EXPECTED.startsWith(got.text) || (got.complete && got.text !== EXPECTED)) key.mixed++;
    for (const id of got.ids) key.calls.add(id);
    if (got.complete) {
      key.complete++;
      key.bodies.add(answer.text);
    }
  }
  return perKey;
}

describe('streams longer than a replica keeps in flight, across replicas sharing one Redis', () => {
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
    provider = undefined;
    await redis?.close();
    redis = undefined;
  });

  const fleet = async (count: number, redisArgs: string[] = []) => {
    redis = await startOwnedRedis({ args: () => redisArgs });
    // Events back to back, 1 ms apart: each stream runs a few seconds, while its herd arrives.
    provider = await startMockProvider({ latencyMs: 300, streamChunkDelayMs: 1 });
    const url = redis.url;
    const upstream = provider.url;
    replicas = await Promise.all(
      Array.from({ length: count }, () => startGatewayProcess(['--upstream', upstream, '--redis', url])),
    );
    await untilCoordinated(replicas);
    return replicas.map((r) => r.url);
  };

  it('3 replicas at default flags, 10 keys x 30 stream callers of ~790 KB: no leader_lost, every caller the whole, identical body, one call per key', async () => {
    const urls = await fleet(3);
    const answers = await herds(urls, 'long fleet');
    const perKey = tally(answers);
    const summary = perKey.map(
      (k) =>
        `${k.complete}/${CALLERS} whole, ${k.lost} lost, ${k.bodies.size} bodies, ${k.calls.size} calls, ${k.mixed} mixed`,
    );
    expect({
      lost: perKey.reduce((n, k) => n + k.lost, 0),
      mixed: perKey.reduce((n, k) => n + k.mixed, 0),
      summary,
    }).toEqual({ lost: 0, mixed: 0, summary });
    for (const key of perKey) {
      expect(key.complete).toBe(CALLERS);
      expect(key.bodies.size).toBe(1);
    }
    expect(provider!.stats().byRoute['/v1/chat/completions']).toBe(KEYS);
  }, 300_000);

  it('Redis evicting keys (maxmemory 4mb, allkeys-lru): no caller gets bytes of two calls, and every whole answer of a key is the same body', async () => {
    const urls = await fleet(3, ['--maxmemory', '4mb', '--maxmemory-policy', 'allkeys-lru']);
    const answers = await herds(urls, 'long evicted');
    const perKey = tally(answers);
    const calls = provider!.stats().byRoute['/v1/chat/completions'];
    const summary = perKey.map(
      (k) =>
        `${k.complete}/${CALLERS} whole, ${k.lost} lost, ${k.bodies.size} bodies, ${k.calls.size} calls, ${k.mixed} mixed`,
    );
    // Eviction may cost calls (a herd's keys gone, some of its callers lead again) but never mixes them.
    expect({
      mixed: perKey.reduce((n, k) => n + k.mixed, 0),
      twoBodies: perKey.filter((k) => k.bodies.size > 1).length,
      summary,
    }).toEqual({
      mixed: 0,
      twoBodies: 0,
      summary,
    });
    expect(calls).toBeGreaterThanOrEqual(KEYS);
    // Reported for the record: how many calls eviction cost.
    console.log(`eviction: ${calls} provider calls for ${KEYS} keys; ${summary.join('; ')}`);
  }, 300_000);
});

describe('streams longer than a worker keeps in flight, across the workers of one gateway (--workers 2)', () => {
  let provider: MockProvider | undefined;
  let gateway: AppProcess | undefined;

  beforeAll(async () => {
    await ensureBuilt();
  }, 180_000);
  afterEach(async () => {
    await gateway?.stop();
    gateway = undefined;
    await provider?.close();
    provider = undefined;
  });

  it('--workers 2 at default flags, 10 keys x 30 stream callers of ~790 KB: no leader_lost, every caller the whole, identical body, one call per key', async () => {
    provider = await startMockProvider({ latencyMs: 300, streamChunkDelayMs: 1 });
    // Two Nest apps booting at once on a busy machine take long.
    gateway = await startGatewayProcess(['--upstream', provider.url, '--workers', '2'], {}, 120_000);
    const url = gateway.url;
    for (const deadline = Date.now() + 120_000; ;) {
      const health = (await (await fetch(`${url}/health`)).json()) as { workers?: { reporting: number } };
      if (health.workers === undefined || health.workers.reporting === 2) break;
      if (Date.now() > deadline) throw new Error('the workers never both reported');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const answers = await herds([url], 'long workers');
    const perKey = tally(answers);
    const summary = perKey.map(
      (k) =>
        `${k.complete}/${CALLERS} whole, ${k.lost} lost, ${k.bodies.size} bodies, ${k.calls.size} calls, ${k.mixed} mixed`,
    );
    expect({
      lost: perKey.reduce((n, k) => n + k.lost, 0),
      mixed: perKey.reduce((n, k) => n + k.mixed, 0),
      summary,
    }).toEqual({ lost: 0, mixed: 0, summary });
    for (const key of perKey) {
      expect(key.complete).toBe(CALLERS);
      expect(key.bodies.size).toBe(1);
    }
    expect(provider.stats().byRoute['/v1/chat/completions']).toBe(KEYS);
  }, 300_000);
});
