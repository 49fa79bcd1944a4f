import { afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { APIError } from 'openai';
import { Budgets } from '../../apps/gateway/src/budgets/budgets.service.js';
import { postJson, startGateway, type GatewayUnderTest } from '../support/gateway-harness.js';
import { ensureBuilt, startGatewayProcess, type AppProcess } from '../support/gateway-process.js';

/**
 * Spend caps that fail closed, through the real gateway in front of the
 * simulated provider (prompt tokens are the words of the messages, completion
 * tokens the words of its echo: "one two three" costs 3 in and 4 out).
 */

const messages = (content: string) => [{ role: 'user' as const, content }];
const words = (label: string) => `${label}${Math.random().toString(36).slice(2, 8)} two three`;

function spentToday(g: GatewayUnderTest): number {
  const totals = g.app.get(Budgets).ledger.snapshot();
  return Object.entries(totals).find(([id]) => id.startsWith('day:') && id.endsWith(':*'))?.[1].spentNano ?? 0;
}

function pricesFile(prices: Record<string, unknown>): string {
  const file = join(mkdtempSync(join(tmpdir(), 'npo-caps-')), 'prices.json');
  writeFileSync(file, JSON.stringify(prices));
  return file;
}

describe('spend caps fail closed', () => {
  let g: GatewayUnderTest | undefined;
  afterEach(async () => {
    await g?.close();
    g = undefined;
  });

  it('refuses a model without a known price under a cap, naming the model and the flags that price it', async () => {
    g = await startGateway({ flags: ['--max-spend', '5/day'] });
    const sdk = new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: 'sk-client-0001', maxRetries: 0 });
    const error = await sdk.chat.completions
      .create({ model: 'mystery-model-7b', messages: messages(words('u')) })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).status).toBe(400);
    expect((error as APIError).code).toBe('model_not_priced');
    expect((error as APIError).message).toContain('"mystery-model-7b"');
    expect((error as APIError).message).toContain('--prices');
    expect((error as APIError).message).toContain('--default-price');
    expect(g.provider.stats().total).toBe(0);
    // A body without a model is refused the same way.
    const unnamed = await postJson(`${g.gatewayUrl}/v1/chat/completions`, { messages: messages(words('n')) });
    expect(unnamed.status).toBe(400);
    expect(unnamed.json.error.code).toBe('model_not_priced');
  });

  it('lets an unknown model through without a cap, and prices it with --default-price under one', async () => {
    g = await startGateway();
    expect(
      (
        await postJson(`${g.gatewayUrl}/v1/chat/completions`, {
          model: 'mystery-model-7b',
          messages: messages(words('a')),
        })
      ).status,
    ).toBe(200);
    await g.close();
    g = await startGateway({ flags: ['--max-spend', '100/day', '--default-price', '1000000/1000000'] });
    expect(
      (
        await postJson(`${g.gatewayUrl}/v1/chat/completions`, {
          model: 'mystery-model-7b',
          messages: messages(words('b')),
        })
      ).status,
    ).toBe(200);
    // 3 + 4 tokens at 1 USD each.
    expect(spentToday(g)).toBe(7e9);
  });

  it('prices models as providers spell them: any case, a dated snapshot, a fine-tune (from the bundled catalogue)', async () => {
    g = await startGateway({ flags: ['--max-spend', '1/day'] });
    const sdk = new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: 'sk-client-0001', maxRetries: 0 });
    const cost = async (model: string) => {
      const before = spentToday(g!);
      await sdk.chat.completions.create({ model, messages: messages(words('p')) });
      return spentToday(g!) - before;
    };
    // gpt-4o: 2.5 USD per 1M in, 10 out: 3 * 2.5 + 4 * 10 = 47.5 USD per 1M, 47,500 billionths.
    expect(await cost('GPT-4o')).toBe(47_500);
    expect(await cost('gpt-4o-2024-08-06')).toBe(47_500);
    // A gpt-4o-mini fine-tune: 0.3 in, 1.2 out.
    expect(await cost('ft:gpt-4o-mini:org::id')).toBe(5_700);
    expect(await cost('ft:gpt-4o-mini-2024-07-18:my-org:custom:abc123')).toBe(5_700);
    // o1: 15 in, 60 out.
    expect(await cost('o1')).toBe(285_000);
    expect(await cost('claude-3-5-sonnet-20241022')).toBe(3 * 3 * 1_000 + 4 * 15 * 1_000);
  });

  it('100 concurrent requests on a cap worth 4: at most 5 answered, the rest refused before the provider', async () => {
    // 4 output tokens at 1 USD each, input free: every answer costs 4 USD and holds 4 USD (max_tokens: 4) while in flight.
    const prices = pricesFile({ 'priced-model': { input: 0, output: 1_000_000 } });
    g = await startGateway({ flags: ['--prices', prices, '--max-spend', '16/day'], mock: { latencyMs: 300 } });
    const url = `${g.gatewayUrl}/v1/chat/completions`;
    const answers = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        postJson(url, { model: 'priced-model', max_tokens: 4, messages: messages(words(`c${i}-`)) }),
      ),
    );
    const ok = answers.filter((r) => r.status === 200).length;
    expect(ok).toBeGreaterThanOrEqual(1);
    expect(ok).toBeLessThanOrEqual(5);
    for (const refused of answers.filter((r) => r.status !== 200)) {
      expect(refused.status).toBe(429);
      expect(refused.json.error.code).toBe('insufficient_quota');
    }
    expect(g.provider.stats().total).toBe(ok);
    // Spent at most the cap plus one request's cost.
    expect(spentToday(g)).toBeLessThanOrEqual(20e9);
    expect(g.app.get(Budgets).ledger.heldBy('*', { usd: 16, period: 'day' })).toBe(0);
  }, 30_000);

  it('a call the provider fails lets its hold go: it costs nothing and the next request is admitted', async () => {
    const prices = pricesFile({ 'priced-model': { input: 0, output: 1_000_000 } });
    g = await startGateway({ flags: ['--prices', prices, '--max-spend', '4/day', '--retries', '0'] });
    const url = `${g.gatewayUrl}/v1/chat/completions`;
    g.provider.setMode('error503');
    expect((await postJson(url, { model: 'priced-model', max_tokens: 4, messages: messages(words('f')) })).status).toBe(
      503,
    );
    expect(spentToday(g)).toBe(0);
    g.provider.setMode('ok');
    expect((await postJson(url, { model: 'priced-model', max_tokens: 4, messages: messages(words('g')) })).status).toBe(
      200,
    );
    expect(spentToday(g)).toBe(4e9);
    expect((await postJson(url, { model: 'priced-model', max_tokens: 4, messages: messages(words('h')) })).status).toBe(
      429,
    );
  });
});

// Fake keys of each common shape, put together here so that no scanner takes this file for a leak.
const SHAPED_KEYS = [
  ['sk-proj-', 'Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jj1'],
  ['sk-ant-api03-', 'AbCdEf012345GhIjKl678901MnOp'],
  ['gsk_', 'a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0u1V2w3X4y5Z6'],
  ['AIza', 'SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q'],
  ['hf_', 'aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567'],
  ['sk_live_', '51H8abcdefGHIJKLmnopQRSTuvWXyz'],
  ['rk_live_', '51H8zyxwvuTSRQPOnmlkJIHGfedCBA'],
  ['eyJhbGciOiJIUzI1NiJ9.', 'eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U'],
].map(([prefix, rest]) => prefix + rest);
// Keys of no known shape: only the gateway's knowing them can keep them out.
const PROVIDER_KEY = 'plainproviderkey0123456789';
const GATEWAY_KEY = 'plaingatewaykey9876543210';
const VIRTUAL_KEY = 'plainvirtualkey1357924680';

/** A provider that refuses every call with the given status, quoting the key it was sent and every shaped key. */
async function startLeakyProvider(status: number): Promise<{ url: string; close: () => Promise<void> }> {
  const server: Server = createServer((req, res) => {
    let received = '';
    req.on('data', (chunk: Buffer) => (received += chunk.toString()));
    req.on('end', () => {
      const sent = String(req.headers.authorization ?? req.headers['x-api-key'] ?? '').replace(/^Bearer /, '');
      const error = {
        message: `Incorrect API key provided: ${sent}. Other keys seen: ${SHAPED_KEYS.join(', ')}.`,
        type: 'invalid_request_error',
        param: null,
        code: 'invalid_api_key',
      };
      if (received.includes('"stream":true')) {
        // A stream that starts, then fails with an error event quoting the keys.
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(
          `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'hi' } }] })}\n\n`,
        );
        res.end(`data: ${JSON.stringify({ error })}\n\n`);
        return;
      }
      const body = JSON.stringify({ error });
      res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('keys never leave the gateway in what it says', () => {
  let gateway: AppProcess | undefined;
  let leaky: { url: string; close: () => Promise<void> } | undefined;
  beforeAll(() => ensureBuilt(), 180_000);
  afterEach(async () => {
    await gateway?.stop();
    gateway = undefined;
    await leaky?.close();
    leaky = undefined;
  });

  const expectClean = (text: string) => {
    for (const key of [...SHAPED_KEYS, PROVIDER_KEY, GATEWAY_KEY, VIRTUAL_KEY]) expect(text).not.toContain(key);
    // Nor a recognisable piece of one.
    for (const key of SHAPED_KEYS) expect(text).not.toContain(key.slice(-16));
  };

  it('redacts every key shape and every key the gateway knows from relayed error bodies, error messages and the log', async () => {
    leaky = await startLeakyProvider(500);
    const keys = JSON.stringify({ [VIRTUAL_KEY]: { name: 'team' } });
    gateway = await startGatewayProcess(
      [
        '--upstream',
        leaky.url,
        '--gateway-keys',
        GATEWAY_KEY,
        '--retries',
        '0',
        '--log-format',
        'json',
        '--log-prompts',
      ],
      { OPENAI_API_KEY: PROVIDER_KEY, ORCHESTRATOR_KEYS: keys },
    );
    // OpenAI client on an OpenAI provider: the provider's error body is relayed as it came, less the keys.
    const relayed = await postJson(
      `${gateway.url}/v1/chat/completions`,
      { model: 'gpt-4o', messages: messages(`my key is ${VIRTUAL_KEY}`) },
      { authorization: `Bearer ${VIRTUAL_KEY}` },
    );
    expect(relayed.status).toBe(500);
    expect(relayed.json.error.message).toContain('Incorrect API key provided: [redacted]');
    expectClean(relayed.text);
    // Anthropic client in front of it: the message is rewritten in Anthropic's format and logged (a 5xx), less the keys.
    const rewritten = await postJson(
      `${gateway.url}/v1/messages`,
      { model: 'claude-sonnet-4-5', max_tokens: 5, messages: messages(`and ${GATEWAY_KEY}`) },
      { 'x-api-key': GATEWAY_KEY },
    );
    expect(rewritten.status).toBe(500);
    expect(rewritten.json.error.message).toContain('[redacted]');
    expectClean(rewritten.text);
    // A stream the provider started, then failed with an error event quoting the keys.
    const streamed = await postJson(
      `${gateway.url}/v1/chat/completions`,
      { model: 'gpt-4o', stream: true, messages: messages('stream') },
      { authorization: `Bearer ${VIRTUAL_KEY}` },
    );
    expect(streamed.text).toContain('[redacted]');
    expectClean(streamed.text);
    // The log: request lines (with the prompts, as asked) and the failure's warning.
    for (const deadline = Date.now() + 5_000; !gateway.output().includes('failed with 500');) {
      if (Date.now() > deadline) throw new Error(`no failure line:\n${gateway.output()}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(gateway.output()).toContain('[redacted]');
    expectClean(gateway.output());
  }, 60_000);
});
