import { afterEach, describe, expect, it } from '@jest/globals';
import { mkdtempSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { Budgets } from '../../apps/gateway/src/budgets/budgets.service.js';
import {
  countingFetch,
  postJson,
  sseData,
  startGateway as startOn,
  uniquePrompt,
  type GatewayUnderTest,
} from '../support/gateway-harness.js';
import { PLATFORMS, waitFor } from '../support/platforms.js';

/**
 * Budgets and keys through the real gateway in front of the simulated
 * provider, whose usage is known: its prompt tokens are the words of the
 * messages, its completion tokens the words it echoes back.
 */

const chat = (content: string, extra: Record<string, unknown> = {}) => ({
  model: 'priced-model',
  temperature: 0,
  messages: [{ role: 'user' as const, content }],
  ...extra,
});
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
// Three words in, four out (the mock's echo): 7 tokens; at 1 USD per token in and out (1e6 per 1M), 7 USD per answer.
const threeWords = (label: string) => `${label}-${Math.random().toString(36).slice(2, 8)} two three`;

/** Polls an async condition (bounded). */
async function eventually(condition: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'npo-budgets-'));
}

describe.each(PLATFORMS)('budgets and keys (%s)', (platform) => {
  let g: GatewayUnderTest | undefined;
  afterEach(async () => {
    await g?.close();
    g = undefined;
  });
  // Every gateway of this suite on the platform under test.
  const startGateway = (options: Parameters<typeof startOn>[0] = {}) =>
    startOn({ ...options, flags: ['--platform', platform, ...(options.flags ?? [])] });

  describe('virtual keys', () => {
    const keysFile = (dir: string, keys: Record<string, unknown>) => {
      const file = join(dir, 'keys.json');
      writeFileSync(`${file}.tmp`, JSON.stringify(keys));
      renameSync(`${file}.tmp`, file);
      return file;
    };

    it('refuses an unknown key with a 401 the SDK reads, lets a listed one in, and never sends the client key upstream', async () => {
      const dir = tempDir();
      const file = keysFile(dir, { 'sk-team-alpha-0001': { name: 'alpha' } });
      g = await startGateway({ flags: ['--keys-file', file], env: { OPENAI_API_KEY: 'sk-provider-key' } });
      const unknown = new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: 'sk-not-listed-0000', maxRetries: 0 });
      await expect(unknown.chat.completions.create(chat('hello there'))).rejects.toMatchObject({
        status: 401,
        code: 'invalid_api_key',
      });
      const known = new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: 'sk-team-alpha-0001', maxRetries: 0 });
      const answer = await known.chat.completions.create(chat(uniquePrompt('hello')));
      expect(answer.choices[0].message.content).toContain('hello');
      const calls = g.provider.calls();
      expect(calls).toHaveLength(1);
      // The provider saw the gateway's key, not the client's.
      const { createHash } = await import('node:crypto');
      expect(calls[0].authHash).toBe(createHash('sha256').update('sk-provider-key').digest('hex').slice(0, 12));
    });

    it('accepts a key listed by its sha256, and ORCHESTRATOR_KEYS inline', async () => {
      const { createHash } = await import('node:crypto');
      const hashed = `sha256:${createHash('sha256').update('sk-hashed-key-1234').digest('hex')}`;
      g = await startGateway({ env: { ORCHESTRATOR_KEYS: JSON.stringify({ [hashed]: { name: 'hashed' } }) } });
      expect(
        (await postJson(`${g.gatewayUrl}/v1/chat/completions`, chat(uniquePrompt('a')), bearer('sk-hashed-key-1234')))
          .status,
      ).toBe(200);
      expect(
        (await postJson(`${g.gatewayUrl}/v1/chat/completions`, chat(uniquePrompt('a')), bearer('sk-hashed-key-1235')))
          .status,
      ).toBe(401);
    });

    it('reloads the file when it changes and on SIGHUP; a bad file keeps the keys in force and names the problem', async () => {
      const dir = tempDir();
      const file = keysFile(dir, { 'sk-first-key-0001': { name: 'first' } });
      const lines: string[] = [];
      const logger = {
        log: (m: unknown) => lines.push(String(m)),
        warn: (m: unknown) => lines.push(String(m)),
        error: () => undefined,
      };
      g = await startGateway({ flags: ['--keys-file', file], logger });
      const status = async (key: string) =>
        (await postJson(`${g!.gatewayUrl}/v1/chat/completions`, chat(uniquePrompt('r')), bearer(key))).status;
      expect(await status('sk-second-key-002')).toBe(401);

      keysFile(dir, { 'sk-first-key-0001': { name: 'first' }, 'sk-second-key-002': { name: 'second' } });
      await eventually(async () => (await status('sk-second-key-002')) === 200, 5_000);

      // A broken file: the previous keys stay, one line says why, no key in it.
      writeFileSync(file, '{"sk-third-key-0003": {"name": "third"}, oops');
      await waitFor(() => lines.some((l) => l.includes('not reloaded')), 5_000);
      expect(await status('sk-second-key-002')).toBe(200);
      expect(await status('sk-third-key-0003')).toBe(401);
      const problem = lines.find((l) => l.includes('not reloaded'))!;
      expect(problem).toContain('not valid JSON');
      expect(lines.join('\n')).not.toContain('sk-');

      // SIGHUP reads the file again (a change the watcher may not see, e.g. on a network file system).
      const budgets = g.app.get(Budgets);
      writeFileSync(file, JSON.stringify({ 'sk-third-key-0003': { name: 'third' } }));
      process.emit('SIGHUP', 'SIGHUP');
      // Debounced as file changes are (a burst of signals reads the file once).
      await waitFor(() => budgets.keys!.find('sk-third-key-0003')?.name === 'third', 5_000);
      expect(budgets.keys!.find('sk-first-key-0001')).toBeUndefined();
    });

    it('names the caller by its key: two keys never share an answer, one key does', async () => {
      g = await startGateway({
        env: {
          ORCHESTRATOR_KEYS: JSON.stringify({ 'sk-key-aaaa-0001': { name: 'a' }, 'sk-key-bbbb-0002': { name: 'b' } }),
        },
      });
      const body = chat(uniquePrompt('shared'));
      const first = await postJson(`${g.gatewayUrl}/v1/chat/completions`, body, bearer('sk-key-aaaa-0001'));
      const again = await postJson(`${g.gatewayUrl}/v1/chat/completions`, body, bearer('sk-key-aaaa-0001'));
      const other = await postJson(`${g.gatewayUrl}/v1/chat/completions`, body, bearer('sk-key-bbbb-0002'));
      expect([
        first.headers.get('x-orchestrator-dedup'),
        again.headers.get('x-orchestrator-dedup'),
        other.headers.get('x-orchestrator-dedup'),
      ]).toEqual(['miss', 'cached', 'miss']);
    });
  });

  describe('rate limits', () => {
    it('answers the request over the limit with a 429 rate_limit_exceeded and Retry-After, which the SDK retries', async () => {
      g = await startGateway({ flags: ['--requests-per-minute', '2', '--rate-window', '1'] });
      const url = `${g.gatewayUrl}/v1/chat/completions`;
      const me = bearer('sk-one-client');
      expect((await postJson(url, chat(uniquePrompt('1')), me)).status).toBe(200);
      expect((await postJson(url, chat(uniquePrompt('2')), me)).status).toBe(200);
      const refused = await postJson(url, chat(uniquePrompt('3')), me);
      expect(refused.status).toBe(429);
      expect(refused.json.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded' });
      expect(refused.headers.get('retry-after')).toBe('1');
      expect(refused.headers.get('x-should-retry')).toBe('true');
      // Refused before the provider: only the two admitted calls reached it.
      expect(g.provider.stats().total).toBe(2);

      // The official SDK waits as told and tries again in the next window.
      const counted = countingFetch();
      const sdk = new OpenAI({
        baseURL: `${g.gatewayUrl}/v1`,
        apiKey: 'sk-one-client',
        fetch: counted.fetch,
        maxRetries: 2,
      });
      // A fresh window, filled.
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      expect((await postJson(url, chat(uniquePrompt('fill')), me)).status).toBe(200);
      expect((await postJson(url, chat(uniquePrompt('fill')), me)).status).toBe(200);
      const answer = await sdk.chat.completions.create(chat(uniquePrompt('after')));
      expect(answer.choices).toHaveLength(1);
      // Refused once, then answered after Retry-After.
      expect(counted.attempts()).toBe(2);
    }, 20_000);

    it('counts limits per key: one key over its own limit leaves another key served', async () => {
      g = await startGateway({
        env: {
          ORCHESTRATOR_KEYS: JSON.stringify({
            'sk-small-key-001': { name: 'small', requestsPerMinute: 1 },
            'sk-large-key-002': { name: 'large' },
          }),
        },
        flags: ['--requests-per-minute', '3'],
      });
      const url = `${g.gatewayUrl}/v1/chat/completions`;
      expect((await postJson(url, chat(uniquePrompt('s')), bearer('sk-small-key-001'))).status).toBe(200);
      expect((await postJson(url, chat(uniquePrompt('s')), bearer('sk-small-key-001'))).status).toBe(429);
      for (let i = 0; i < 3; i++)
        expect((await postJson(url, chat(uniquePrompt('l')), bearer('sk-large-key-002'))).status).toBe(200);
      expect((await postJson(url, chat(uniquePrompt('l')), bearer('sk-large-key-002'))).status).toBe(429);
    });

    it('refuses further requests once the tokens the provider reported reach --tokens-per-minute', async () => {
      g = await startGateway({ flags: ['--tokens-per-minute', '14'] });
      const url = `${g.gatewayUrl}/v1/chat/completions`;
      // 7 tokens each (3 in, 4 out): the second reaches 14.
      expect((await postJson(url, chat(threeWords('a')))).status).toBe(200);
      expect((await postJson(url, chat(threeWords('b')))).status).toBe(200);
      const refused = await postJson(url, chat(threeWords('c')));
      expect(refused.status).toBe(429);
      expect(refused.json.error.message).toContain('14 of 14 tokens');
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    });
  });

  describe('spend caps', () => {
    const prices = (dir: string) => {
      const file = join(dir, 'prices.json');
      writeFileSync(
        file,
        JSON.stringify({ 'priced-model': { input: 1_000_000, output: 1_000_000 }, '*': { input: 0, output: 0 } }),
      );
      return file;
    };

    it('refuses with 429 insufficient_quota and x-should-retry: false exactly when the priced usage reaches the cap', async () => {
      const dir = tempDir();
      g = await startGateway({ flags: ['--prices', prices(dir), '--max-spend', '14/day'] });
      const url = `${g.gatewayUrl}/v1/chat/completions`;
      expect((await postJson(url, chat(threeWords('a')))).status).toBe(200);
      // 7 of 14 USD: still under.
      expect((await postJson(url, chat(threeWords('b')))).status).toBe(200);
      // 14 of 14 USD: reached.
      const refused = await postJson(url, chat(threeWords('c')));
      expect(refused.status).toBe(429);
      expect(refused.json.error).toMatchObject({ code: 'insufficient_quota', type: 'insufficient_quota' });
      expect(refused.headers.get('x-should-retry')).toBe('false');
      expect(g.provider.stats().total).toBe(2);
      // The SDK does not retry it.
      const counted = countingFetch();
      const sdk = new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: 'sk-any', fetch: counted.fetch });
      await expect(sdk.chat.completions.create(chat(threeWords('d')))).rejects.toMatchObject({ status: 429 });
      expect(counted.attempts()).toBe(1);
    });

    it('counts a stream whose client did not ask for usage, and hides the usage chunk from that client', async () => {
      const dir = tempDir();
      g = await startGateway({ flags: ['--prices', prices(dir), '--max-spend', '14/day'] });
      const url = `${g.gatewayUrl}/v1/chat/completions`;
      const streamed = await postJson(url, chat(threeWords('s'), { stream: true }));
      expect(streamed.status).toBe(200);
      const events = sseData(streamed.text);
      expect(events[events.length - 1]).toBe('[DONE]');
      const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as { choices: unknown[]; usage?: unknown });
      expect(chunks.every((c) => c.choices.length === 1 && (c.usage === undefined || c.usage === null))).toBe(true);
      // The gateway asked the provider for usage.
      expect(g.provider.calls()[0].stream).toBe(true);
      // 7 USD from the stream + 7 from this answer reach the 14 USD cap.
      expect((await postJson(url, chat(threeWords('w')))).status).toBe(200);
      expect((await postJson(url, chat(threeWords('x')))).status).toBe(429);
    });

    it('keeps the usage chunk for a client that asked for it, and with --no-stream-usage does not ask', async () => {
      const dir = tempDir();
      g = await startGateway({ flags: ['--prices', prices(dir), '--max-spend', '7/day', '--no-stream-usage'] });
      const url = `${g.gatewayUrl}/v1/chat/completions`;
      const asked = sseData(
        (await postJson(url, chat(threeWords('u'), { stream: true, stream_options: { include_usage: true } }))).text,
      );
      expect(JSON.parse(asked[asked.length - 2])).toMatchObject({
        choices: [],
        usage: { prompt_tokens: 3, completion_tokens: 4 },
      });
      // That one was counted (it reported usage): the cap of 7 is reached.
      expect((await postJson(url, chat(threeWords('v')))).status).toBe(429);
    });

    it('joined and cached answers cost nothing and are counted as money saved; spend survives a restart (--spend-file)', async () => {
      const dir = tempDir();
      const spendFile = join(dir, 'spend.json');
      const flags = ['--prices', prices(dir), '--max-spend', '14/day', '--spend-file', spendFile];
      g = await startGateway({ flags, mock: { latencyMs: 200 } });
      const url = `${g.gatewayUrl}/v1/chat/completions`;
      const body = chat(threeWords('same'));
      const herd = await Promise.all(Array.from({ length: 5 }, () => postJson(url, body)));
      expect(herd.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
      const cached = await postJson(url, body);
      expect(cached.headers.get('x-orchestrator-dedup')).toBe('cached');
      expect(g.provider.stats().total).toBe(1);
      const totals = g.app.get(Budgets).ledger.snapshot();
      const today = Object.entries(totals).find(([id]) => id.startsWith('day:') && id.endsWith(':*'))![1];
      // One paid answer (7 USD), five free copies (35 USD saved).
      expect(today).toEqual({ spentNano: 7e9, savedNano: 35e9 });
      const health = (await (await fetch(`${g.gatewayUrl}/health`)).json()) as { budgets: Record<string, unknown> };
      expect(health.budgets).toMatchObject({
        maxSpend: { usd: 14, period: 'day' },
        day: { spent: 7, saved: 35 },
        keys: null,
      });
      // Under the cap: the copies did not count.
      expect((await postJson(url, chat(threeWords('next')))).status).toBe(200);
      await g.close();

      // Restarted: 14 USD already spent today.
      expect(JSON.parse(readFileSync(spendFile, 'utf8')).totals).toBeDefined();
      g = await startGateway({ flags });
      expect((await postJson(`${g.gatewayUrl}/v1/chat/completions`, chat(threeWords('after')))).status).toBe(429);
    });

    it('counts an Anthropic stream from its own usage events (input at the start, output at the end)', async () => {
      const dir = tempDir();
      g = await startGateway({ flags: ['--provider', 'anthropic', '--prices', prices(dir)] });
      const client = new Anthropic({ baseURL: g.gatewayUrl, apiKey: 'sk-ant-client', maxRetries: 0 });
      const stream = client.messages.stream({
        model: 'priced-model',
        max_tokens: 100,
        messages: [{ role: 'user', content: threeWords('anthropic') }],
      });
      const message = await stream.finalMessage();
      const tokens = message.usage.input_tokens + message.usage.output_tokens;
      expect(message.usage.input_tokens).toBeGreaterThan(0);
      expect(message.usage.output_tokens).toBeGreaterThan(0);
      // The spend is booked once the gateway has seen the stream's end, which may come after the client's last event.
      const spentToday = () =>
        Object.entries(g!.app.get(Budgets).ledger.snapshot()).find(
          ([id]) => id.startsWith('day:') && id.endsWith(':*'),
        )?.[1].spentNano;
      await waitFor(() => spentToday() !== undefined && spentToday()! > 0, 10_000, 'the stream to be booked');
      expect(spentToday()).toBe(tokens * 1e9);
    });

    it('caps one key by its own maxSpend, leaving the others served', async () => {
      const dir = tempDir();
      g = await startGateway({
        flags: ['--prices', prices(dir)],
        env: {
          ORCHESTRATOR_KEYS: JSON.stringify({
            'sk-capped-key-01': { name: 'capped', maxSpend: '7/month' },
            'sk-free-key-0002': { name: 'free' },
          }),
        },
      });
      const url = `${g.gatewayUrl}/v1/chat/completions`;
      expect((await postJson(url, chat(threeWords('c1')), bearer('sk-capped-key-01'))).status).toBe(200);
      const refused = await postJson(url, chat(threeWords('c2')), bearer('sk-capped-key-01'));
      expect(refused.status).toBe(429);
      expect(refused.json.error.message).toContain('"capped"');
      expect((await postJson(url, chat(threeWords('f1')), bearer('sk-free-key-0002'))).status).toBe(200);
    });
  });

  describe('the request log', () => {
    it('writes one line per request with hashes and figures, never the prompt or the key', async () => {
      const dir = tempDir();
      const log = join(dir, 'requests.jsonl');
      writeFileSync(join(dir, 'p.json'), JSON.stringify({ 'priced-model': { input: 1_000_000, output: 1_000_000 } }));
      g = await startGateway({
        flags: ['--request-log', log, '--prices', join(dir, 'p.json')],
        env: { ORCHESTRATOR_KEYS: JSON.stringify({ 'sk-logged-key-01': { name: 'logged' } }) },
      });
      const url = `${g.gatewayUrl}/v1/chat/completions`;
      const body = chat(threeWords('secret-prompt'));
      await postJson(url, body, bearer('sk-logged-key-01'));
      await postJson(url, body, bearer('sk-logged-key-01'));
      await g.close();
      g = undefined;
      await waitFor(() => readFileSync(log, 'utf8').trim().split('\n').length === 2, 5_000);
      const text = readFileSync(log, 'utf8');
      expect(text).not.toContain('secret-prompt');
      expect(text).not.toContain('sk-logged');
      const [miss, cached] = text
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      expect(miss).toMatchObject({
        outcome: 'miss',
        model: 'priced-model',
        status: 200,
        tokensIn: 3,
        tokensOut: 4,
        cost: 7,
        saved: 0,
        route: 'chat',
      });
      expect(cached).toMatchObject({ outcome: 'cached', cost: 0, saved: 7, key: miss.key, tenant: miss.tenant });
      expect(miss.tenant).toMatch(/^[\w-]{12}$/);
      expect(typeof miss.latencyMs).toBe('number');
    });
  });
});
