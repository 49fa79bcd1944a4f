import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import type { LoggerService } from '@nestjs/common';
import OpenAI from 'openai';
import { PLATFORMS, waitFor } from '../support/platforms.js';
import { postJson, send, startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';
import { redisServerMissing, startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';

/**
 * The gateway with --redis in front of a Redis server this suite owns (its own
 * process and port): killed, frozen and restarted under it. Whatever Redis
 * does, requests are answered from memory while it is still down (none waits
 * for it to come back); the outage is logged once and shown in /health;
 * sharing resumes when Redis is back.
 *
 * Redis is only restarted or thawed after the requests made meanwhile were
 * answered: a request that waited on Redis would never be answered, and the
 * test would fail on its (generous) timeout, however slow the machine is.
 */

/** A logger that keeps what the gateway says, to count outage lines. */
class CapturingLogger implements LoggerService {
  readonly lines: string[] = [];
  log(message: unknown) {
    this.lines.push(`log ${String(message)}`);
  }
  warn(message: unknown) {
    this.lines.push(`warn ${String(message)}`);
  }
  error(message: unknown) {
    this.lines.push(`error ${String(message)}`);
  }
  count(pattern: RegExp): number {
    return this.lines.filter((line) => pattern.test(line)).length;
  }
}

const OUTAGE = /answer window store unavailable/;
const RECOVERY = /answer window store reachable again/;

const chat = (prompt: string) => ({ model: 'mock-model', messages: [{ role: 'user', content: prompt }] });
const HEADERS = { authorization: 'Bearer sk-redis-outage' };

/** A chat request through the gateway. */
async function chatThrough(gateway: GatewayUnderTest, prompt: string) {
  return postJson(`${gateway.gatewayUrl}/v1/chat/completions`, chat(prompt), HEADERS);
}

async function health(gateway: GatewayUnderTest) {
  return (await send(`${gateway.gatewayUrl}/health`)).json;
}

/** Until A's flight is forgotten, i.e. its answer is written to the window (memory, and Redis when it is up). */
async function untilWritten(gateway: GatewayUnderTest): Promise<void> {
  await until(async () => (await health(gateway)).dedup.inFlight === 0, 'the answer to be written');
}

/**
 * An answer A stores is found by B. Right after Redis returns, one store
 * operation may still miss its time bound on a busy machine (a miss, never a
 * wrong answer), so fresh prompts are tried until one is shared.
 */
async function sharingResumes(a: GatewayUnderTest, b: GatewayUnderTest, label: string): Promise<void> {
  let last: string | null = null;
  for (const deadline = Date.now() + CONDITION_WAIT_MS; Date.now() < deadline;) {
    const prompt = uniquePrompt(label);
    expect((await chatThrough(a, prompt)).headers.get('x-orchestrator-dedup')).toBe('miss');
    await untilWritten(a);
    last = (await chatThrough(b, prompt)).headers.get('x-orchestrator-dedup');
    if (last === 'cached') return;
  }
  throw new Error(`sharing did not resume: B's last outcome was ${last}`);
}

/** How long a condition is waited for: generous, since it only bounds how long a broken run takes to say so. */
const CONDITION_WAIT_MS = 60_000;
/** Each test's timeout: several condition waits. */
const TEST_TIMEOUT_MS = 300_000;

/** Polls an async condition (no fixed sleeps). */
async function until(condition: () => Promise<boolean>, what: string): Promise<void> {
  for (const deadline = Date.now() + CONDITION_WAIT_MS; !(await condition());) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe.each(PLATFORMS)('Redis faults under the gateway (%s)', (platform) => {
  let redis: OwnedRedis;
  let provider: MockProvider;
  const gateways: GatewayUnderTest[] = [];
  let logger: CapturingLogger;

  beforeAll(async () => {
    const missing = redisServerMissing();
    if (missing) throw new Error(missing);
    provider = await startMockProvider({ latencyMs: 5 });
  });
  afterAll(async () => {
    await provider?.close();
  });
  afterEach(async () => {
    for (const gateway of gateways.splice(0)) await gateway.close();
    await redis?.close();
  }, TEST_TIMEOUT_MS);

  async function gateway(url: string, withLogger = false): Promise<GatewayUnderTest> {
    if (withLogger) logger = new CapturingLogger();
    const started = await startGateway({
      // An outage is noticed after a 100 ms Redis timeout: the suite's requests meet several.
      flags: ['--platform', platform, '--redis', url, '--dedup-window', '120', '--redis-timeout', '0.1'],
      provider,
      logger: withLogger ? logger : false,
    });
    gateways.push(started);
    return started;
  }

  it(
    'Redis down at start: the gateway starts, answers from memory, says degraded once, and shares again once Redis is up',
    async () => {
      redis = await startOwnedRedis();
      await redis.kill();
      const a = await gateway(redis.url, true);

      for (let i = 0; i < 5; i++) expect((await chatThrough(a, uniquePrompt('down at start'))).status).toBe(200);
      const repeat = uniquePrompt('repeat while down');
      await chatThrough(a, repeat);
      expect((await chatThrough(a, repeat)).headers.get('x-orchestrator-dedup')).toBe('cached'); // from memory

      const degraded = await health(a);
      expect(degraded.status).toBe('degraded');
      expect(degraded.store).toMatchObject({ state: 'degraded', error: expect.any(String) });
      expect(logger.count(OUTAGE)).toBe(1);
      expect(logger.count(RECOVERY)).toBe(0);

      await redis.restart();
      await waitFor(() => logger.count(RECOVERY) === 1, CONDITION_WAIT_MS, 'the recovery line');
      // The window and the replica coordination each try Redis again on their own (every second).
      await until(async () => (await health(a)).status === 'ok', 'health to be ok again');
      expect(logger.count(OUTAGE)).toBe(1);

      // Sharing resumes: an answer A stores now is found by another replica.
      const b = await gateway(redis.url);
      await sharingResumes(a, b, 'after recovery');
    },
    TEST_TIMEOUT_MS,
  );

  // Nest's logger is one per process, so with two replicas here the log is checked in the one-replica cases.
  it(
    'Redis killed mid-run: requests keep succeeding while it is down, and sharing resumes after a restart',
    async () => {
      redis = await startOwnedRedis();
      const a = await gateway(redis.url);
      const b = await gateway(redis.url);
      const shared = uniquePrompt('before the kill');
      await chatThrough(a, shared);
      await untilWritten(a);
      expect((await chatThrough(b, shared)).headers.get('x-orchestrator-dedup')).toBe('cached');

      await redis.kill();
      const results = await Promise.all(
        Array.from({ length: 40 }, (_, i) => chatThrough(i % 2 ? a : b, uniquePrompt(`killed ${i}`))),
      );
      for (const response of results) expect(response.status).toBe(200);
      expect(redis.pid).toBeUndefined(); // answered while Redis was down
      for (const replica of [a, b]) expect((await health(replica)).store.state).toBe('degraded');

      await redis.restart();
      for (const replica of [a, b])
        await until(async () => (await health(replica)).store.state === 'ok', 'both replicas to see Redis back');
      await sharingResumes(a, b, 'after the restart');
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'Redis frozen (SIGSTOP): no request waits on it; 100 concurrent requests through the official SDK are all answered',
    async () => {
      redis = await startOwnedRedis();
      const a = await gateway(redis.url, true);
      await chatThrough(a, uniquePrompt('warm'));
      await until(async () => (await health(a)).store.state === 'ok', 'the store to be reachable before the freeze');
      // A slow operation on a busy machine may already have been reported (and its recovery): count from here.
      const outagesBefore = logger.count(OUTAGE);
      const recoveriesBefore = logger.count(RECOVERY);
      redis.freeze();
      // The SDK's own timeout stays out of it (its default is 10 minutes): the answers come while Redis is frozen.
      const client = new OpenAI({ baseURL: `${a.gatewayUrl}/v1`, apiKey: 'sk-redis-outage', maxRetries: 0 });
      const answers = await Promise.all(
        Array.from({ length: 100 }, (_, i) =>
          client.chat.completions.create(
            chat(uniquePrompt(`frozen ${i}`)) as OpenAI.ChatCompletionCreateParamsNonStreaming,
          ),
        ),
      );
      expect(answers).toHaveLength(100);
      expect((await health(a)).store.state).toBe('degraded');
      expect(logger.count(OUTAGE) - outagesBefore).toBe(1);

      redis.thaw();
      await waitFor(() => logger.count(RECOVERY) - recoveriesBefore === 1, CONDITION_WAIT_MS, 'the recovery line');
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'Redis refusing auth: answered from memory, reported degraded with the reason',
    async () => {
      redis = await startOwnedRedis({ requirePassword: 'right-password' });
      const wrong = redis.url.replace('right-password', 'wrong-password');
      const a = await gateway(wrong, true);
      expect((await chatThrough(a, uniquePrompt('auth refused'))).status).toBe(200);
      const state = await health(a);
      expect(state.status).toBe('degraded');
      expect(JSON.stringify(state)).not.toContain('wrong-password');
      expect(logger.count(OUTAGE)).toBe(1);
      expect(logger.lines.join('\n')).not.toContain('wrong-password');
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'shutdown completes while Redis is frozen',
    async () => {
      redis = await startOwnedRedis();
      const a = await gateway(redis.url);
      await chatThrough(a, uniquePrompt('before freeze'));
      redis.freeze();
      // Thawed only once the gateway has closed: a shutdown that waited on Redis would never end.
      await gateways.splice(gateways.indexOf(a), 1)[0].close();
      redis.thaw();
    },
    TEST_TIMEOUT_MS,
  );
});
