import { afterEach, describe, expect, it } from '@jest/globals';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { hashCredential } from '../../apps/mock-provider/src/index.js';
import { PLATFORMS, waitFor } from '../support/platforms.js';
import {
  countingFetch,
  postJson,
  send,
  startGateway,
  uniquePrompt,
  type GatewayUnderTest,
} from '../support/gateway-harness.js';

/**
 * One gateway, several keys: a tenant whose own requests fail cannot open the
 * breaker for the others; credentials and answer-changing headers keep
 * answers apart; abandoned work and floods do not starve a live tenant; a
 * provider's rate limit stays retryable by the SDK.
 */

const chat = (content: string) => ({ model: 'mock-model', messages: [{ role: 'user', content }] });
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const junk = () => Math.random().toString(36).slice(2, 12);
/** Paid calls: the chat completions that reached the provider (the breaker's health probe reads the free model list). */
const modelCalls = (gateway: GatewayUnderTest) => gateway.provider.stats().byRoute['/v1/chat/completions'] ?? 0;
/** Ways of writing one key that every provider reads as the same credential. */
const SPELLINGS = ['Bearer %', 'bearer %', 'BEARER %', 'Bearer  %', 'bEaReR %', 'Bearer\t%', 'Bearer   %  '];
/** The n-th spelling of `key`, with an `x-api-key` the provider never reads (Authorization wins) on every other one. */
const spelt = (key: string, n: number): Record<string, string> => ({
  authorization: SPELLINGS[n % SPELLINGS.length].replace('%', key),
  ...(n % 2 ? { 'x-api-key': `sk-junk-${junk()}` } : {}),
});

describe.each(PLATFORMS)('tenants (%s)', (platform) => {
  let g: GatewayUnderTest | undefined;
  afterEach(async () => {
    await g?.close();
    g = undefined;
  });
  const start = async (flags: string[] = [], mock = {}) => {
    g = await startGateway({ flags: ['--platform', platform, ...flags], mock });
    return g;
  };
  // With a key: the gateway may check keys (any key is let in when it does not).
  const breakerState = async (gateway: GatewayUnderTest) =>
    (await send(`${gateway.gatewayUrl}/health`, { headers: bearer('sk-victim') })).json.upstream.breaker as string;

  describe('failures are attributed before they count', () => {
    it.each([
      ['500s on its own prompts', [] as string[], (i: number) => `mock:fail-500 poison ${i}`, 500],
      // 2 s, not less: the victim's own calls (5 ms at the mock, in this process) must fit in it on a busy machine too,
      // where one of them can take most of that.
      [
        'its own generations running past --timeout',
        ['--timeout', '2'],
        (i: number) => `mock:slow-5000 long ${i}`,
        504,
      ],
    ])(
      'a tenant getting %s never opens the breaker for another: the victim keeps >= 99%% answered',
      async (_what, flags, prompt, status) => {
        const gateway = await start(['--retries', '0', ...flags]);
        // The victim is being served when the bad tenant arrives (with nobody else around, one tenant's failures
        // cannot be told from an outage, and do open the breaker: the next test).
        const victim = (i: number) =>
          postJson(
            `${gateway.gatewayUrl}/v1/chat/completions`,
            chat(uniquePrompt(`healthy ${i}`)),
            bearer('sk-victim'),
          );
        for (let i = 0; i < 3; i++) expect((await victim(-1 - i)).status).toBe(200);
        let stop = false;
        const badStatuses: number[] = [];
        let n = 0;
        // Eight loops of the bad tenant's requests, each different.
        const bad = Array.from({ length: 8 }, async () => {
          while (!stop) {
            const r = await postJson(
              `${gateway.gatewayUrl}/v1/chat/completions`,
              chat(uniquePrompt(prompt(n++))),
              bearer('sk-bad-tenant'),
            );
            badStatuses.push(r.status);
          }
        });
        let answered = 0;
        let victimRequests = 0;
        // At least 150 requests, and on until the bad tenant has failed 16 times meanwhile (each of its timeouts takes
        // --timeout): a count reached, not a duration guessed.
        while (victimRequests < 150 || badStatuses.length < 16)
          if ((await victim(victimRequests++)).status === 200) answered++;
        stop = true;
        await Promise.all(bad);
        expect(badStatuses.length).toBeGreaterThan(8);
        // The bad tenant got its own errors, never a refusal.
        expect([...new Set(badStatuses)]).toEqual([status]);
        expect(answered / victimRequests).toBeGreaterThanOrEqual(0.99);
        expect(await breakerState(gateway)).toBe('closed');
      },
      300_000,
    );

    it('an outage seen by one tenant only (no one else succeeding) still opens the breaker after 5 calls', async () => {
      const gateway = await start(['--retries', '0']);
      gateway.provider.setMode('error503');
      const before = modelCalls(gateway);
      const statuses: number[] = [];
      for (let i = 0; i < 12; i++) {
        statuses.push(
          (
            await postJson(
              `${gateway.gatewayUrl}/v1/chat/completions`,
              chat(uniquePrompt(`outage ${i}`)),
              bearer('sk-only'),
            )
          ).status,
        );
      }
      expect(modelCalls(gateway) - before).toBe(5);
      expect(statuses.filter((s) => s === 503)).toHaveLength(12);
      expect(await breakerState(gateway)).not.toBe('closed');
    });
  });

  describe('one caller posing as many', () => {
    it.each([
      [
        'one key, spelt differently each time, with a random x-api-key',
        [] as string[],
        (n: number) => spelt('sk-attacker', n),
      ],
      [
        'one gateway key spelt differently, with a random x-api-key (--gateway-keys)',
        ['--gateway-keys', 'sk-victim,sk-attacker'],
        (n: number) => spelt('sk-attacker', n),
      ],
      [
        'a fresh credential on every request (each one a new tenant for the provider too)',
        [] as string[],
        () => bearer(`sk-swarm-${junk()}`),
      ],
    ])(
      'poisoning as %s never opens the breaker for an established caller: the victim keeps >= 95%% answered',
      async (_what, flags, attacker) => {
        const gateway = await start(['--retries', '0', ...flags]);
        const victim = new OpenAI({ baseURL: `${gateway.gatewayUrl}/v1`, apiKey: 'sk-victim', maxRetries: 0 });
        const ask = (i: number) =>
          victim.chat.completions
            .create(chat(uniquePrompt(`victim ${i}`)) as OpenAI.ChatCompletionCreateParamsNonStreaming)
            .then(
              () => true,
              () => false,
            );
        for (let i = 0; i < 3; i++) expect(await ask(-1 - i)).toBe(true);
        let stop = false;
        let n = 0;
        const attackStatuses: number[] = [];
        const attack = Array.from({ length: 8 }, async () => {
          while (!stop) {
            const i = n++;
            const r = await postJson(
              `${gateway.gatewayUrl}/v1/chat/completions`,
              chat(uniquePrompt(`mock:fail-500 poison ${i}`)),
              attacker(i),
            );
            attackStatuses.push(r.status);
          }
        });
        let answered = 0;
        const victimRequests = 100;
        for (let i = 0; i < victimRequests; i++) if (await ask(i)) answered++;
        stop = true;
        await Promise.all(attack);
        expect(attackStatuses.length).toBeGreaterThan(50);
        // The attacker got its own errors: the provider's 500s, never a refusal meant for everyone.
        expect(attackStatuses.filter((status) => status === 503)).toHaveLength(0);
        expect(answered / victimRequests).toBeGreaterThanOrEqual(0.95);
        expect(await breakerState(gateway)).toBe('closed');
      },
      300_000,
    );

    it('an outage right after start, seen only by brand-new callers, still opens the breaker after 5 calls', async () => {
      const gateway = await start(['--retries', '0']);
      gateway.provider.setMode('error503');
      const before = modelCalls(gateway);
      const statuses: number[] = [];
      for (let i = 0; i < 12; i++) {
        statuses.push(
          (
            await postJson(
              `${gateway.gatewayUrl}/v1/chat/completions`,
              chat(uniquePrompt(`outage ${i}`)),
              bearer(`sk-new-${i}`),
            )
          ).status,
        );
      }
      expect(modelCalls(gateway) - before).toBe(5);
      expect(statuses.filter((s) => s === 503)).toHaveLength(12);
      expect(await breakerState(gateway)).not.toBe('closed');
    });

    it('an outage after callers were answered opens it after 5 calls, whoever sees it first', async () => {
      const gateway = await start(['--retries', '0']);
      for (const key of ['sk-old-1', 'sk-old-2']) {
        expect(
          (await postJson(`${gateway.gatewayUrl}/v1/chat/completions`, chat(uniquePrompt('before')), bearer(key)))
            .status,
        ).toBe(200);
      }
      gateway.provider.setMode('error503');
      const before = modelCalls(gateway);
      for (let i = 0; i < 12; i++) {
        // Established callers and new ones alike: the health probe confirms what the new callers see.
        const key = i % 3 === 0 ? `sk-new-${i}` : `sk-old-${1 + (i % 2)}`;
        expect(
          (await postJson(`${gateway.gatewayUrl}/v1/chat/completions`, chat(uniquePrompt(`outage ${i}`)), bearer(key)))
            .status,
        ).toBe(503);
      }
      expect(modelCalls(gateway) - before).toBe(5);
      expect(await breakerState(gateway)).not.toBe('closed');
    });

    it('20 spellings of one key under --requests-per-minute 5: 5 answered, one tenant in the request log, one answer shared', async () => {
      const log = join(mkdtempSync(join(tmpdir(), 'npo-identity-')), 'requests.jsonl');
      const gateway = await start(['--requests-per-minute', '5', '--request-log', log]);
      const url = `${gateway.gatewayUrl}/v1/chat/completions`;
      const prompt = uniquePrompt('spelt');
      const statuses: number[] = [];
      const outcomes: Array<string | null> = [];
      for (let i = 0; i < 20; i++) {
        const r = await postJson(url, chat(prompt), spelt('sk-limited', i));
        statuses.push(r.status);
        outcomes.push(r.headers.get('x-orchestrator-dedup'));
      }
      expect(statuses.filter((s) => s === 200)).toHaveLength(5);
      expect(statuses.filter((s) => s === 429)).toHaveLength(15);
      // One caller: the first spelling paid for the answer, the others were given it.
      expect(outcomes.slice(0, 5)).toEqual(['miss', 'cached', 'cached', 'cached', 'cached']);
      expect(gateway.provider.stats().total).toBe(1);
      // Another key is another caller, with its own allowance.
      expect((await postJson(url, chat(prompt), bearer('sk-other'))).status).toBe(200);
      await gateway.close();
      g = undefined;
      await waitFor(() => readFileSync(log, 'utf8').trim().split('\n').length === 21, 5_000, 'the request log');
      const lines = readFileSync(log, 'utf8')
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { tenant: string });
      expect(new Set(lines.slice(0, 20).map((line) => line.tenant)).size).toBe(1);
      expect(lines[20].tenant).not.toBe(lines[0].tenant);
      expect(lines[0].tenant).toMatch(/^[\w-]{12}$/);
    });
  });

  describe('one identity, and the headers that change an answer', () => {
    it('the same Basic authorization with different x-api-key values: two calls, two answers', async () => {
      const gateway = await start();
      const prompt = uniquePrompt('basic');
      const headers = (key: string) => ({ authorization: 'Basic aW5ncmVzczpzZWNyZXQ=', 'x-api-key': key });
      const a = await postJson(`${gateway.gatewayUrl}/v1/chat/completions`, chat(prompt), headers('sk-a'));
      const b = await postJson(`${gateway.gatewayUrl}/v1/chat/completions`, chat(prompt), headers('sk-b'));
      expect(a.headers.get('x-orchestrator-dedup')).toBe('miss');
      expect(b.headers.get('x-orchestrator-dedup')).toBe('miss');
      expect(b.json.id).not.toBe(a.json.id);
    });

    it("with --gateway-keys and the provider key from the environment, one gateway key never gets another's answer", async () => {
      g = await startGateway({
        flags: ['--platform', platform, '--gateway-keys', 'gk-1,gk-2'],
        env: { OPENAI_API_KEY: 'sk-provider' },
      });
      const prompt = uniquePrompt('gateway keys');
      const one = await postJson(`${g.gatewayUrl}/v1/chat/completions`, chat(prompt), bearer('gk-1'));
      const two = await postJson(`${g.gatewayUrl}/v1/chat/completions`, chat(prompt), bearer('gk-2'));
      const oneAgain = await postJson(`${g.gatewayUrl}/v1/chat/completions`, chat(prompt), bearer('gk-1'));
      expect([one, two, oneAgain].map((r) => r.headers.get('x-orchestrator-dedup'))).toEqual([
        'miss',
        'miss',
        'cached',
      ]);
      expect(two.json.id).not.toBe(one.json.id);
    });

    it('OpenAI-Organization and OpenAI-Project are forwarded, and a different project is a different answer', async () => {
      const gateway = await start();
      const prompt = uniquePrompt('projects');
      const client = (project: string) =>
        new OpenAI({
          baseURL: `${gateway.gatewayUrl}/v1`,
          apiKey: 'sk-org',
          organization: 'org-1',
          project,
          maxRetries: 0,
        });
      const a = await client('proj-a').chat.completions.create(
        chat(prompt) as OpenAI.ChatCompletionCreateParamsNonStreaming,
      );
      const b = await client('proj-b').chat.completions.create(
        chat(prompt) as OpenAI.ChatCompletionCreateParamsNonStreaming,
      );
      expect(b.id).not.toBe(a.id);
      const headers = gateway.provider.calls().map((c) => c.headers);
      expect(headers).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ 'openai-organization': 'org-1', 'openai-project': 'proj-a' }),
          expect.objectContaining({ 'openai-organization': 'org-1', 'openai-project': 'proj-b' }),
        ]),
      );
    });

    it('anthropic-beta and anthropic-version are in the key (--provider anthropic)', async () => {
      const gateway = await start(['--provider', 'anthropic']);
      const body = {
        model: 'claude-mock',
        max_tokens: 20,
        messages: [{ role: 'user', content: uniquePrompt('beta') }],
      };
      const plain = await postJson(`${gateway.gatewayUrl}/v1/messages`, body, { 'x-api-key': 'sk-ant' });
      const beta = await postJson(`${gateway.gatewayUrl}/v1/messages`, body, {
        'x-api-key': 'sk-ant',
        'anthropic-beta': 'tools-2024-04-04',
      });
      const version = await postJson(`${gateway.gatewayUrl}/v1/messages`, body, {
        'x-api-key': 'sk-ant',
        'anthropic-version': '2024-01-01',
      });
      expect([plain, beta, version].map((r) => r.headers.get('x-orchestrator-dedup'))).toEqual([
        'miss',
        'miss',
        'miss',
      ]);
      const betas = gateway.provider.calls().map((c) => c.headers?.['anthropic-beta']);
      expect(betas).toContain('tools-2024-04-04');
    });
  });

  describe('a fair share of the provider', () => {
    it("abandoned streams move to a small detached budget: a live tenant's first byte is not held up by them", async () => {
      // 4 slots, a detached budget of 1: 4 streams whose clients leave after the first chunk, and whose next chunk
      // would come after ten minutes (the gateway's --timeout is longer): none ends of itself while the test runs.
      const gateway = await start(['--concurrency', '4', '--timeout', '3600'], {
        latencyMs: 5,
        streamChunkDelayMs: 600_000,
      });
      const longPrompt = (i: number) => uniquePrompt(`abandoned ${i} ` + 'word '.repeat(20));
      const controllers = Array.from({ length: 4 }, () => new AbortController());
      await Promise.all(
        controllers.map(async (controller, i) => {
          const response = await fetch(`${gateway.gatewayUrl}/v1/chat/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...bearer('sk-leaver') },
            body: JSON.stringify({ ...chat(longPrompt(i)), stream: true }),
            signal: controller.signal,
          });
          const reader = response.body!.getReader();
          await reader.read();
          controller.abort();
        }),
      );
      await waitFor(
        () => gateway.provider.stats().inFlight <= 1,
        60_000,
        'the abandoned streams over the budget to be cancelled',
      );
      const live = await postJson(
        `${gateway.gatewayUrl}/v1/chat/completions`,
        chat(uniquePrompt('live')),
        bearer('sk-live'),
      );
      expect(live.status).toBe(200);
      // None of the abandoned streams ended of itself (each would take hours: a chunk every ten minutes): the live call did not wait for one to.
      const abandoned = gateway.provider.calls().filter((c) => c.stream);
      expect(abandoned).toHaveLength(4);
      expect(abandoned.every((c) => c.finishedAt === undefined || c.outcome === 'client_closed')).toBe(true);
      const limiter = (await send(`${gateway.gatewayUrl}/health`)).json.limiters.find(
        (l: { name: string }) => l.name === 'upstream',
      );
      expect(limiter.detached).toBeLessThanOrEqual(1);
    }, 300_000);

    it('a flood from one tenant delays another by a turn, not by the whole backlog', async () => {
      const gateway = await start(['--concurrency', '2'], { latencyMs: 150 });
      const url = `${gateway.gatewayUrl}/v1/chat/completions`;
      const order: string[] = [];
      const queued = async () =>
        (await send(`${gateway.gatewayUrl}/health`)).json.limiters.find((l: { name: string }) => l.name === 'upstream')
          .queued as number;
      const until = async (condition: () => Promise<boolean>, what: string) => {
        const deadline = Date.now() + 60_000;
        while (!(await condition())) {
          if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
          await new Promise((resolve) => setTimeout(resolve, 20)); // polling interval
        }
      };
      const flood = (label: string) =>
        postJson(url, chat(uniquePrompt(label)), bearer('sk-flood')).then(() => order.push('flood'));
      // Two of the flood hold both slots (3 s at the mock) while the other 28 and then the light request queue up: the
      // queue is looked at, not guessed from a delay, so the light request is known to wait behind the whole backlog.
      const holding = [flood('mock:slow-3000 flood 0'), flood('mock:slow-3000 flood 1')];
      await waitFor(() => gateway.provider.stats().total === 2, 10_000, 'the flood to take both slots');
      const backlog = Array.from({ length: 28 }, (_, i) => flood(`flood ${i + 2}`));
      await until(async () => (await queued()) === 28, 'the rest of the flood to queue');
      const light = postJson(url, chat(uniquePrompt('light')), bearer('sk-light')).then((r) => {
        order.push('light');
        return r;
      });
      await until(async () => (await queued()) === 29, 'the light request to queue behind the flood');
      expect(gateway.provider.stats().total).toBe(2); // both slots still held: nothing of the backlog went first
      expect((await light).status).toBe(200);
      await Promise.all([...holding, ...backlog]);
      // In turn: the light request has the next free slot, not the one after thirty.
      const lightCall = gateway.provider.calls().find((c) => c.authHash === hashCredential('sk-light'));
      expect(lightCall?.seq).toBeLessThanOrEqual(4);
      // As its client sees it: at most the two in flight and the next two finish before it, not thirty.
      expect(order.indexOf('light')).toBeLessThanOrEqual(4);
    }, 300_000);
  });

  describe('rate limits stay retryable', () => {
    it('a provider 429 reaches the SDK with its Retry-After and without x-should-retry: false, and the SDK retries it', async () => {
      const gateway = await start();
      gateway.provider.setMode('error429', { retryAfterSeconds: 0 });
      const raw = await postJson(
        `${gateway.gatewayUrl}/v1/chat/completions`,
        chat(uniquePrompt('limited')),
        bearer('sk-429'),
      );
      expect(raw.status).toBe(429);
      expect(raw.headers.get('retry-after')).toBe('0');
      expect(raw.headers.get('x-should-retry')).not.toBe('false');

      const counting = countingFetch();
      const client = new OpenAI({
        baseURL: `${gateway.gatewayUrl}/v1`,
        apiKey: 'sk-429',
        fetch: counting.fetch,
        maxRetries: 2,
      });
      const before = modelCalls(gateway);
      const error = await client.chat.completions
        .create(chat(uniquePrompt('sdk limited')) as OpenAI.ChatCompletionCreateParamsNonStreaming)
        .catch((e: unknown) => e);
      expect((error as { status?: number }).status).toBe(429);
      expect(counting.attempts()).toBe(3); // the SDK's own retries
      expect(gateway.provider.stats().total - before).toBe(3); // one call per attempt: the gateway did not retry too
      expect(await breakerState(gateway)).toBe('closed');
    });

    it("the gateway's own retry waits what a 503's Retry-After asks, and leaves a longer wait to the client", async () => {
      const gateway = await start(['--retries', '1']);
      gateway.provider.setMode('error503', { retryAfterSeconds: 1 });
      const before = gateway.provider.calls().length;
      await postJson(
        `${gateway.gatewayUrl}/v1/chat/completions`,
        chat(uniquePrompt('retry after 1')),
        bearer('sk-503'),
      );
      const calls = gateway.provider.calls().slice(before);
      expect(calls).toHaveLength(2);
      expect(calls[1].receivedAt - calls[0].receivedAt).toBeGreaterThanOrEqual(1_000);

      gateway.provider.setMode('error503', { retryAfterSeconds: 30 });
      const beforeLong = gateway.provider.stats().total;
      const long = await postJson(
        `${gateway.gatewayUrl}/v1/chat/completions`,
        chat(uniquePrompt('retry after 30')),
        bearer('sk-503'),
      );
      expect(long.status).toBe(503);
      expect(long.headers.get('retry-after')).toBe('30');
      expect(gateway.provider.stats().total - beforeLong).toBe(1);
    });
  });
});
