import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { startMockProvider, type MockProvider, type MockProviderOptions } from '../../apps/mock-provider/src/index.js';
import { sseData, uniquePrompt } from '../support/gateway-harness.js';
import { GatedUpstream } from '../support/gated-upstream.js';
import { ensureBuilt, startGatewayProcess, untilCoordinated, type AppProcess } from '../support/gateway-process.js';
import { waitFor } from '../support/platforms.js';
import { redisServerMissing, startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';

/**
 * Four gateway replicas as separate processes, sharing one Redis this suite
 * owns: identical requests spread over them make one provider call in all,
 * streams included; a leader killed mid-call is taken over by exactly one
 * follower; an outage costs the provider about as many calls as one replica
 * would; Redis going away makes each replica act alone, and its return makes
 * them share again. A leader's error reaches the followers on other replicas
 * as the leader's own callers got it.
 */

const chat = (content: string, stream = false) =>
  JSON.stringify({ model: 'mock-model', stream, messages: [{ role: 'user', content }] });

async function ask(url: string, body: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-fleet', ...headers },
    body,
  });
  return {
    status: response.status,
    outcome: response.headers.get('x-orchestrator-dedup'),
    text: await response.text(),
  };
}

/** An answer with what a client can tell apart: status, headers that steer its retries, and the body. */
async function askWhole(url: string, path: string, body: string) {
  const response = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      authorization: 'Bearer sk-fleet',
      'x-api-key': 'sk-fleet',
      'anthropic-version': '2023-06-01',
    },
    body,
  });
  return {
    status: response.status,
    outcome: response.headers.get('x-orchestrator-dedup'),
    retryAfter: response.headers.get('retry-after'),
    shouldRetry: response.headers.get('x-should-retry'),
    text: await response.text(),
  };
}

interface ReplicaHealth {
  dedup: { inFlight: number; joined: number };
  coordination: { state: string } | null;
}

async function health(url: string): Promise<ReplicaHealth> {
  return (await (await fetch(`${url}/health`)).json()) as ReplicaHealth;
}

/** Polls a replica's /health until `condition` holds. */
async function waitForHealth(url: string, condition: (h: ReplicaHealth) => boolean, what: string): Promise<void> {
  for (const deadline = Date.now() + 10_000; ;) {
    if (condition(await health(url))) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20)); // polling interval
  }
}

/** Until a replica's flight is forgotten, i.e. its answer is in the window (memory and Redis). */
async function stored(url: string): Promise<void> {
  for (const deadline = Date.now() + 5_000; ;) {
    const health = (await (await fetch(`${url}/health`)).json()) as { dedup: { inFlight: number } };
    if (health.dedup.inFlight === 0) return;
    if (Date.now() > deadline) throw new Error('the answer was never stored');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('replicas sharing one Redis', () => {
  let redis: OwnedRedis;
  let provider: MockProvider;
  let replicas: AppProcess[] = [];

  beforeAll(async () => {
    const missing = redisServerMissing();
    if (missing) throw new Error(missing);
    await ensureBuilt();
  }, 180_000);
  let gate: GatedUpstream | undefined;
  afterEach(async () => {
    await Promise.all(replicas.map((replica) => replica.stop()));
    replicas = [];
    await gate?.close();
    gate = undefined;
    await provider?.close();
    await redis?.close();
  });
  afterAll(async () => {
    await redis?.close();
  });

  /** `gated`: the replicas reach the provider through `gate` (which can tell which replica sent a request). */
  const fleet = async (
    count = 4,
    mock: MockProviderOptions = { latencyMs: 1_000 },
    flags: string[] = [],
    gated = false,
  ) => {
    redis = await startOwnedRedis();
    provider = await startMockProvider(mock);
    if (gated) {
      gate = new GatedUpstream(provider.url);
      await gate.start();
    }
    replicas = await Promise.all(
      Array.from({ length: count }, () =>
        startGatewayProcess([
          '--upstream',
          gate?.url ?? provider.url,
          '--redis',
          redis.url,
          '--probe-interval',
          '0.2',
          ...(flags.includes('--breaker-open') ? [] : ['--breaker-open', '30']),
          ...flags,
        ]),
      ),
    );
    // Every replica has reached Redis (coordination ok) before traffic starts.
    await untilCoordinated(replicas);
    return replicas;
  };

  it('200 identical requests round-robin over 4 replicas: 1 provider call, one answer, joined on the replicas that did not call', async () => {
    const urls = (await fleet()).map((r) => r.url);
    const body = chat(uniquePrompt('fleet herd'));
    const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => ask(urls[i % 4], body)));
    expect(provider.stats().total).toBe(1);
    expect(answers.every((a) => a.status === 200)).toBe(true);
    expect(new Set(answers.map((a) => JSON.parse(a.text).id)).size).toBe(1);
    const outcomes = answers.map((a) => a.outcome);
    expect(outcomes.filter((o) => o === 'miss')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'joined' || o === 'cached')).toHaveLength(199);
  }, 60_000);

  it('the same with streams: 1 provider call, every client the complete chunk sequence', async () => {
    const urls = (await fleet(4, { latencyMs: 300, streamChunkDelayMs: 30 })).map((r) => r.url);
    const prompt = uniquePrompt('fleet stream with a few words to stream');
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => ask(urls[i % 4], chat(prompt, true))));
    expect(provider.stats().total).toBe(1);
    const texts = answers.map((a) =>
      sseData(a.text)
        .filter((d) => d !== '[DONE]')
        .map(
          (d) => (JSON.parse(d) as { choices: Array<{ delta: { content?: string } }> }).choices[0]?.delta.content ?? '',
        )
        .join(''),
    );
    expect(new Set(texts).size).toBe(1);
    expect(texts[0]).toBe(`Echo: ${prompt}`);
    expect(answers.every((a) => sseData(a.text).at(-1) === '[DONE]')).toBe(true);
  }, 60_000);

  it('the leader SIGKILLed mid-call: the waiters on other replicas are answered, from a single takeover call', async () => {
    const [leader, ...others] = await fleet(4, { latencyMs: 3_000 });
    const body = chat(uniquePrompt('leader dies'));
    void ask(leader.url, body).catch(() => undefined);
    await waitFor(() => provider.stats().total === 1, 10_000, 'the leader to call');
    const joinedBefore = await Promise.all(others.map(async (replica) => (await health(replica.url)).dedup.joined));
    const waiting = others.map((replica) => ask(replica.url, body));
    // They are following the leader's call before it dies.
    await Promise.all(
      others.map((replica, i) =>
        waitForHealth(replica.url, (h) => h.dedup.joined - joinedBefore[i] === 1, 'a replica to follow the leader'),
      ),
    );
    leader.kill();
    const answers = await Promise.all(waiting);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(new Set(answers.map((a) => JSON.parse(a.text).id)).size).toBe(1);
    expect(provider.stats().total).toBe(2); // the dead leader's call, and one takeover
  }, 60_000);

  it('an outage over 4 replicas: at most 5 calls reach the failing provider in all; every replica recovers by the probe', async () => {
    // An open period of an hour, longer than the test may take: a replica that recovers was let through by the probe.
    const urls = (await fleet(4, { latencyMs: 5 }, ['--retries', '0', '--breaker-open', '3600'], true)).map(
      (r) => r.url,
    );
    gate!.attributeTo(replicas.map((r) => r.pid));
    provider.setMode('error503');
    for (let i = 0; i < 24; i++) await ask(urls[i % 4], chat(uniquePrompt(`outage ${i}`)));
    // Model calls: the health probes (GET /v1/models, by the fleet's one prober) are counted apart.
    expect(provider.stats().byRoute['/v1/chat/completions']).toBeLessThanOrEqual(5);
    // One prober for the fleet, told by which replica sent each probe: ten more probes (each replica would have sent
    // some of them if each probed), all from one replica but the one that confirmed the outage before it opened.
    const seen = gate!.sent('/v1/models').total;
    await waitFor(() => gate!.sent('/v1/models').total >= seen + 10, 60_000, 'ten more health probes');
    const probes = gate!.sent('/v1/models');
    expect(probes.unknownSender).toBe(0);
    expect(probes.notByTheMost).toBeLessThanOrEqual(1);
    provider.setMode('ok');
    for (const url of urls) {
      for (;;) {
        if ((await ask(url, chat(uniquePrompt('after')))).status === 200) break;
        await new Promise((resolve) => setTimeout(resolve, 50)); // polling interval
      }
    }
  }, 300_000);

  it('Redis stopped mid-run: requests keep succeeding per replica; Redis back: sharing resumes', async () => {
    const urls = (await fleet(2, { latencyMs: 300 })).map((r) => r.url);
    await redis.kill();
    const alone = await Promise.all(urls.map((url) => ask(url, chat(uniquePrompt('redis gone')))));
    expect(alone.map((a) => a.status)).toEqual([200, 200]);
    await redis.restart();
    for (const replica of replicas) {
      for (const deadline = Date.now() + 10_000; ;) {
        const health = (await (await fetch(`${replica.url}/health`)).json()) as { coordination: { state: string } };
        // Tried again within a second of the next request: ask, then look.
        await ask(replica.url, chat(uniquePrompt('probe')));
        if (health.coordination.state === 'ok') break;
        if (Date.now() > deadline) throw new Error('a replica never shared again');
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
    const before = provider.stats().total;
    const body = chat(uniquePrompt('shared again'));
    const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => ask(urls[i % 2], body)));
    expect(answers.every((a) => a.status === 200)).toBe(true);
    expect(provider.stats().total - before).toBe(1);
  }, 60_000);

  it('Redis frozen (SIGSTOP): a herd of 100 on one replica makes 1 call, over 4 replicas at most 4; joined means joined', async () => {
    const urls = (await fleet(4, { latencyMs: 300 })).map((r) => r.url);
    redis.freeze();
    try {
      const onePrompt = chat(uniquePrompt('frozen, one replica'));
      const before = provider.stats().total;
      const herd = await Promise.all(Array.from({ length: 100 }, () => ask(urls[0], onePrompt)));
      expect(provider.stats().total - before).toBe(1);
      expect(herd.every((a) => a.status === 200)).toBe(true);
      expect(herd.filter((a) => a.outcome === 'miss')).toHaveLength(1);

      const fourPrompt = chat(uniquePrompt('frozen, four replicas'));
      const beforeFour = provider.stats().total;
      const four = await Promise.all(Array.from({ length: 100 }, (_, i) => ask(urls[i % 4], fourPrompt)));
      const calls = provider.stats().total - beforeFour;
      expect(calls).toBeLessThanOrEqual(4);
      expect(four.every((a) => a.status === 200)).toBe(true);
      // Every request that did not call was really joined to a call in its own replica.
      expect(four.filter((a) => a.outcome === 'miss')).toHaveLength(calls);
    } finally {
      redis.thaw();
    }
  }, 60_000);

  it('the leader SIGKILLed mid-stream: followers on other replicas get a leader_lost error event once its lease runs out', async () => {
    const [leader, ...others] = await fleet(4, { latencyMs: 100, streamChunkDelayMs: 200 });
    const words = Array.from({ length: 60 }, (_, i) => `w${i}`).join(' ');
    const body = chat(uniquePrompt(`a long stream ${words}`), true);
    void ask(leader.url, body).catch(() => undefined);
    await waitFor(() => provider.stats().total === 1, 10_000, 'the leader to call');
    const followers = others.map((replica) => ask(replica.url, body));
    // Every follower has part of the answer before the leader dies.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    leader.kill();
    // Followers that never noticed the lost leader would wait for good: the test would fail on its timeout.
    const answers = await Promise.all(followers);
    for (const answer of answers) {
      const events = sseData(answer.text);
      expect(events.length).toBeGreaterThan(1);
      const last = JSON.parse(events.at(-1)!) as { error?: { code?: string } };
      expect(last.error?.code).toBe('leader_lost');
    }
    expect(provider.stats().total).toBe(1);
  }, 300_000);

  it("a leader's error reaches its followers on the other replica as the leader got it: the provider's 503, 500 and 429, and the gateway's own timeout", async () => {
    redis = await startOwnedRedis();
    provider = await startMockProvider({ latencyMs: 5 });
    gate = new GatedUpstream(provider.url);
    await gate.start();
    // No retries and a breaker that stays closed: each error below is the answer of one call.
    const flags = [
      '--upstream',
      gate.url,
      '--redis',
      redis.url,
      '--retries',
      '0',
      '--breaker-failures',
      '100',
      '--timeout',
      '4',
    ];
    replicas = await Promise.all([startGatewayProcess(flags), startGatewayProcess(flags)]);
    const [leaderUrl, followerUrl] = replicas.map((r) => r.url);
    for (const url of [leaderUrl, followerUrl]) {
      await waitForHealth(url, (h) => h.coordination?.state === 'ok', 'the replica to reach Redis');
    }
    const joined = async () => (await health(followerUrl)).dedup.joined;

    /** The leader's call held at the gate until 3 requests on the other replica follow it; then `failure` answers it. */
    const herd = async (path: string, body: string, failure: () => void) => {
      const joinedBefore = await joined();
      const callsBefore = gate!.calls;
      gate!.hold();
      const leader = askWhole(leaderUrl, path, body);
      await waitFor(() => gate!.heldCount === 1, 10_000, "the leader's call to reach the gate");
      const followers = Array.from({ length: 3 }, () => askWhole(followerUrl, path, body));
      await waitForHealth(followerUrl, (h) => h.dedup.joined - joinedBefore === 3, 'the 3 followers to join');
      failure();
      const answers = { leader: await leader, followers: await Promise.all(followers) };
      gate!.release();
      expect(gate!.calls - callsBefore).toBe(1);
      expect(answers.leader.outcome).toBe('miss');
      expect(answers.followers.map((f) => f.outcome)).toEqual(['joined', 'joined', 'joined']);
      return answers;
    };
    const asSeen = ({ status, retryAfter, shouldRetry, text }: Awaited<ReturnType<typeof askWhole>>) => ({
      status,
      retryAfter,
      shouldRetry,
      text,
    });
    const chatPath = '/v1/chat/completions';

    const unavailable = await herd(chatPath, chat(uniquePrompt('leader 503')), () => {
      provider.setMode('error503', { retryAfterSeconds: 7 });
      gate!.release();
    });
    expect(asSeen(unavailable.leader)).toMatchObject({ status: 503, retryAfter: '7', shouldRetry: 'false' });
    expect(JSON.parse(unavailable.leader.text)).toMatchObject({ error: { code: 'service_unavailable' } });
    expect(unavailable.followers.map(asSeen)).toEqual(unavailable.followers.map(() => asSeen(unavailable.leader)));

    const limited = await herd(chatPath, chat(uniquePrompt('leader 429')), () => {
      provider.setMode('error429', { retryAfterSeconds: 1 });
      gate!.release();
    });
    expect(asSeen(limited.leader)).toMatchObject({ status: 429, retryAfter: '1', shouldRetry: 'true' });
    expect(limited.followers.map(asSeen)).toEqual(limited.followers.map(() => asSeen(limited.leader)));

    const failed = await herd(chatPath, chat(uniquePrompt('leader 500 mock:fail-500')), () => {
      provider.setMode('ok');
      gate!.release();
    });
    expect(asSeen(failed.leader)).toMatchObject({ status: 500, shouldRetry: 'false' });
    expect(failed.followers.map(asSeen)).toEqual(failed.followers.map(() => asSeen(failed.leader)));

    // The same on the Anthropic route, in Anthropic's error shape (each answer names its own request).
    const messages = JSON.stringify({
      model: 'mock-model',
      max_tokens: 16,
      messages: [{ role: 'user', content: uniquePrompt('leader 503 messages') }],
    });
    const anthropic = await herd('/v1/messages', messages, () => {
      provider.setMode('error503');
      gate!.release();
    });
    const withoutId = (a: Awaited<ReturnType<typeof askWhole>>) => {
      const { request_id: _id, ...rest } = JSON.parse(a.text) as { request_id?: string };
      return { ...asSeen(a), text: rest };
    };
    expect(withoutId(anthropic.leader)).toMatchObject({
      status: 503,
      text: { type: 'error', error: { type: 'overloaded_error' } },
    });
    expect(anthropic.followers.map(withoutId)).toEqual(anthropic.followers.map(() => withoutId(anthropic.leader)));

    // The gateway's own error: the held call runs out of its time limit (--timeout 4) at the gate.
    provider.setMode('ok');
    const timedOut = await herd(chatPath, chat(uniquePrompt('leader times out')), () => undefined);
    expect(asSeen(timedOut.leader)).toMatchObject({ status: 504, shouldRetry: 'false' });
    expect(JSON.parse(timedOut.leader.text)).toMatchObject({ error: { code: 'upstream_timeout' } });
    expect(timedOut.followers.map(asSeen)).toEqual(timedOut.followers.map(() => asSeen(timedOut.leader)));
  }, 90_000);

  it('--redis-prefix isolates everything, the answer window included', async () => {
    redis = await startOwnedRedis();
    provider = await startMockProvider({ latencyMs: 50 });
    const start = (prefix: string) =>
      startGatewayProcess(['--upstream', provider.url, '--redis', redis.url, '--redis-prefix', prefix]);
    replicas = await Promise.all([start('staging'), start('production'), start('production')]);
    const [staging, production, production2] = replicas.map((r) => r.url);
    const body = chat(uniquePrompt('prefixed'));
    expect((await ask(staging, body)).outcome).toBe('miss');
    await stored(staging);
    expect((await ask(production, body)).outcome).toBe('miss');
    expect(provider.stats().total).toBe(2);
    await stored(production);
    // Same prefix: the stored answer is shared.
    expect((await ask(production2, body)).outcome).toBe('cached');
    expect(provider.stats().total).toBe(2);
  }, 60_000);
});
