import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import {
  hashCredential,
  startMockProvider,
  type MockCall,
  type MockProvider,
} from '../../apps/mock-provider/src/index.js';
import { startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';
import { ensureBuilt, startGatewayProcess, type GatewayProcess } from '../support/gateway-process.js';

/**
 * `--upstreams-file` through the official openai SDK, against simulated
 * providers that record a hash of every credential they receive: each
 * upstream is sent its own key and no other, the caller stays who its own key
 * says, and requests for a model with a fallback chain are answered by the
 * fallback group (asked for its own model) once the primary cannot answer
 * before the first byte, never after it.
 */

// Keys of no provider's shape, so that only the gateway's own care keeps them out of what it says.
const KEY_A = 'upstreamA0123456789abcdef';
const KEY_B = 'upstreamB0123456789abcdef';
const PROVIDER_KEY = 'providerkey0123456789abcd';
const KEY_F = 'fallbackF0123456789abcdef';
const CLIENT_KEY = 'clientkey0123456789abcdef';

function writeFile(name: string, document: unknown): string {
  const path = join(mkdtempSync(join(tmpdir(), 'npo-upstreams-e2e-')), name);
  writeFileSync(path, JSON.stringify(document));
  return path;
}

const client = (g: GatewayUnderTest, apiKey = CLIENT_KEY) =>
  new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey, maxRetries: 0 });
const ask = (g: GatewayUnderTest, model: string, content: string, apiKey?: string) =>
  client(g, apiKey)
    .chat.completions.create({ model, messages: [{ role: 'user', content }] })
    .withResponse();
/** Every credential an upstream received (hashed by the mock; `none` for a call without one). */
const credentials = (calls: MockCall[]) => new Set(calls.map((c) => c.authHash ?? 'none'));
const chatCalls = (mock: MockProvider) => mock.calls().filter((c) => c.route === '/v1/chat/completions');

async function waitUntil(what: string, done: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

describe('upstreams with keys of their own', () => {
  let a: MockProvider;
  let b: MockProvider;
  let g: GatewayUnderTest;

  beforeAll(async () => {
    [a, b] = await Promise.all([startMockProvider({ latencyMs: 5 }), startMockProvider({ latencyMs: 5 })]);
    const file = writeFile('upstreams.json', {
      upstreams: [
        { name: 'eu', url: a.url, apiKeyEnv: 'KEY_A', concurrency: 3 },
        { name: 'us', url: `${b.url}/v1`, apiKey: KEY_B },
      ],
    });
    g = await startGateway({
      provider: a,
      flags: [
        '--upstreams-file',
        file,
        '--breaker-failures',
        '2',
        '--retries',
        '0',
        '--breaker-open',
        '60',
        '--probe-interval',
        '0.05',
      ],
      env: { KEY_A, OPENAI_API_KEY: PROVIDER_KEY },
    });
  });

  afterAll(async () => {
    await g?.close();
    await Promise.all([a?.close(), b?.close()]);
  });

  it('gives an upstream its own concurrency ceiling, the others --concurrency', async () => {
    const health = (await (await fetch(`${g.gatewayUrl}/health`)).json()) as {
      upstreams: Array<{ name: string; limit: number }>;
    };
    const limits = Object.fromEntries(health.upstreams.map((u) => [u.name, u.limit]));
    // The adaptive limit starts at 32, below the ceiling: eu's ceiling of 3 holds it there.
    expect(limits).toEqual({ eu: 3, us: 32 });
  });

  it("sends each upstream its own key, never the provider key or the client's, health probes included", async () => {
    const first = await ask(g, 'mock-model', uniquePrompt('eu'));
    expect(first.response.headers.get('x-orchestrator-upstream')).toBe('eu');
    a.setMode('error503');
    // Each failure of `eu` fails over to `us`; two of them open eu's breaker, whose probe then asks eu's /v1/models.
    for (let i = 0; i < 3; i++) {
      const { data, response } = await ask(g, 'mock-model', uniquePrompt('us'));
      expect(response.headers.get('x-orchestrator-upstream')).toBe('us');
      expect(data.choices[0].message.content).toMatch(/^Echo: us /);
    }
    await waitUntil("eu's health probe", () => a.calls().some((c) => c.route === '/v1/models'));
    expect(chatCalls(a)).toHaveLength(3);
    expect(chatCalls(b)).toHaveLength(3);
    expect(credentials(a.calls())).toEqual(new Set([hashCredential(KEY_A)]));
    expect(credentials(b.calls())).toEqual(new Set([hashCredential(KEY_B)]));
  });

  it("probes the second upstream's health with its own key too", async () => {
    // eu's breaker is open: `us` serves alone until its failures open its breaker too, and its probe starts.
    b.setMode('error503');
    for (let i = 0; i < 2; i++)
      await expect(ask(g, 'mock-model', uniquePrompt('down'))).rejects.toMatchObject({ status: 503 });
    await waitUntil("us's health probe", () => b.calls().some((c) => c.route === '/v1/models'));
    b.setMode('ok');
    await waitUntil(
      'us back in rotation',
      async () => (await ask(g, 'mock-model', uniquePrompt('back')).catch(() => undefined)) !== undefined,
    );
    expect(credentials(b.calls())).toEqual(new Set([hashCredential(KEY_B)]));
    expect(credentials(a.calls())).toEqual(new Set([hashCredential(KEY_A)]));
  });

  it('keeps callers apart by their own key, though every one of them is sent upstream with the same key', async () => {
    const before = chatCalls(b).length;
    const prompt = uniquePrompt('tenants');
    const [x, y] = await Promise.all([
      ask(g, 'mock-model', prompt, 'tenant-x-key-0123456789'),
      ask(g, 'mock-model', prompt, 'tenant-y-key-0123456789'),
    ]);
    // Two callers, two calls: an answer is never shared across tenants, whatever key went upstream.
    expect(chatCalls(b).length - before).toBe(2);
    expect(x.data.id).not.toBe(y.data.id);
    const again = await ask(g, 'mock-model', prompt, 'tenant-x-key-0123456789');
    expect(again.response.headers.get('x-orchestrator-dedup')).toBe('cached');
    expect(again.data.id).toBe(x.data.id);
    expect(chatCalls(b).length - before).toBe(2);
    expect(credentials(chatCalls(b).slice(before))).toEqual(new Set([hashCredential(KEY_B)]));
  });
});

describe('a fallback chain across upstream groups and models', () => {
  const BIG = 'big-model';
  const SMALL = 'small-model';
  let primary: MockProvider;
  let fallback: MockProvider;
  let keyless: MockProvider;
  let g: GatewayUnderTest;
  let requestLog: string;

  beforeAll(async () => {
    [primary, fallback, keyless] = await Promise.all([
      startMockProvider({ latencyMs: 5 }),
      startMockProvider({ latencyMs: 5 }),
      startMockProvider({ latencyMs: 5 }),
    ]);
    const file = writeFile('upstreams.json', {
      // Without a key of its own the primary is sent OPENAI_API_KEY, as an --upstream is; the groups never are.
      upstreams: [{ name: 'primary', url: primary.url }],
      groups: {
        backup: [{ name: 'backup-1', url: `${fallback.url}/v1`, apiKeyEnv: 'KEY_F' }],
        keyless: [{ name: 'keyless-1', url: keyless.url }],
      },
      fallbacks: { [BIG]: [{ group: 'backup', model: SMALL }], 'other-model': [{ group: 'keyless' }] },
    });
    // The big model costs a thousand times the small one.
    const prices = writeFile('prices.json', { [BIG]: { input: 1000, output: 1000 }, [SMALL]: { input: 1, output: 1 } });
    requestLog = join(mkdtempSync(join(tmpdir(), 'npo-upstreams-log-')), 'requests.jsonl');
    g = await startGateway({
      provider: primary,
      flags: [
        '--upstreams-file',
        file,
        '--breaker-failures',
        '2',
        '--retries',
        '0',
        '--breaker-open',
        '60',
        '--probe-interval',
        '0.05',
        '--prices',
        prices,
        '--request-log',
        requestLog,
      ],
      env: { KEY_F, OPENAI_API_KEY: PROVIDER_KEY },
    });
  });

  afterAll(async () => {
    await g?.close();
    await Promise.all([primary?.close(), fallback?.close(), keyless?.close()]);
  });

  it('the primary answers while it can; the fallback is not asked', async () => {
    const { data, response } = await ask(g, BIG, uniquePrompt('primary'));
    expect(data.model).toBe(BIG);
    expect(response.headers.get('x-orchestrator-upstream')).toBe('primary');
    expect(fallback.stats().total).toBe(0);
  });

  it('a stream that breaks after its first byte is not sent to the fallback: the client gets the error', async () => {
    primary.setMode('cutStream', { cutAfterChunks: 2 });
    const stream = await client(g)
      .chat.completions.create({ model: BIG, messages: [{ role: 'user', content: uniquePrompt('cut') }], stream: true })
      .withResponse();
    expect(stream.response.headers.get('x-orchestrator-upstream')).toBe('primary');
    const models: string[] = [];
    await expect(
      (async () => {
        for await (const chunk of stream.data) models.push(chunk.model);
      })(),
    ).rejects.toThrow(/interrupted/);
    expect(models.length).toBeGreaterThan(0);
    expect(new Set(models)).toEqual(new Set([BIG]));
    expect(fallback.stats().total).toBe(0);
  });

  it("once the primary's breaker is open, the fallback group answers with its own model, and the primary is not called", async () => {
    primary.setMode('error503');
    // Before the breaker opens, each 503 fails over; after, the primary refuses in a millisecond and the chain goes on.
    for (let i = 0; i < 3; i++) {
      const { data, response } = await ask(g, BIG, uniquePrompt('outage'));
      expect(response.status).toBe(200);
      expect(data.model).toBe(SMALL);
      expect(response.headers.get('x-orchestrator-upstream')).toBe('backup-1');
    }
    const health = (await (await fetch(`${g.gatewayUrl}/health`)).json()) as { upstream: { breaker: string } };
    expect(health.upstream.breaker).toBe('open');
    const primaryCalls = chatCalls(primary).length;
    for (let i = 0; i < 3; i++) expect((await ask(g, BIG, uniquePrompt('open'))).data.model).toBe(SMALL);
    expect(chatCalls(primary)).toHaveLength(primaryCalls);
    // The fallback was asked for its model, in the client's bytes otherwise.
    const asked = chatCalls(fallback);
    expect(asked).toHaveLength(6);
    expect(new Set(asked.map((c) => c.model))).toEqual(new Set([SMALL]));
  });

  it('a herd of identical requests during the fallback still makes one call', async () => {
    fallback.configure({ latencyMs: 300 });
    const before = chatCalls(fallback).length;
    const prompt = uniquePrompt('herd');
    const results = await Promise.all(Array.from({ length: 50 }, () => ask(g, BIG, prompt)));
    fallback.configure({ latencyMs: 5 });
    expect(chatCalls(fallback).length - before).toBe(1);
    expect(new Set(results.map((r) => JSON.stringify(r.data))).size).toBe(1);
    expect(results[0].data.model).toBe(SMALL);
    const outcomes = results.map((r) => r.response.headers.get('x-orchestrator-dedup'));
    expect(outcomes.filter((o) => o === 'miss')).toHaveLength(1);
    // Joined and replayed copies say which upstream served them too.
    expect(new Set(results.map((r) => r.response.headers.get('x-orchestrator-upstream')))).toEqual(
      new Set(['backup-1']),
    );
  });

  it('streams are served by the fallback too, with its model in every chunk', async () => {
    const stream = await client(g)
      .chat.completions.create({
        model: BIG,
        messages: [{ role: 'user', content: uniquePrompt('stream') }],
        stream: true,
      })
      .withResponse();
    expect(stream.response.headers.get('x-orchestrator-upstream')).toBe('backup-1');
    const models = new Set<string>();
    for await (const chunk of stream.data) models.add(chunk.model);
    expect(models).toEqual(new Set([SMALL]));
  });

  it("a model without a chain gets the primary's refusal, and no fallback is asked", async () => {
    const before = fallback.stats().total + keyless.stats().total;
    const error = await ask(g, 'mock-model', uniquePrompt('no chain')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
    expect((error as InstanceType<typeof OpenAI.APIError>).code).toBe('circuit_open');
    expect(fallback.stats().total + keyless.stats().total).toBe(before);
  });

  it('a group without a key of its own is sent no key at all', async () => {
    const { data, response } = await ask(g, 'other-model', uniquePrompt('keyless'));
    expect(data.model).toBe('other-model');
    expect(response.headers.get('x-orchestrator-upstream')).toBe('keyless-1');
    expect(chatCalls(keyless)).toHaveLength(1);
    expect(credentials(keyless.calls())).toEqual(new Set(['none']));
  });

  it("never sends one upstream's key to another, nor the client's to any", () => {
    // The primary's chat calls and its breaker's probes (GET /v1/models) alike.
    expect(primary.calls().some((c) => c.route === '/v1/models')).toBe(true);
    expect(credentials(primary.calls())).toEqual(new Set([hashCredential(PROVIDER_KEY)]));
    expect(credentials(fallback.calls())).toEqual(new Set([hashCredential(KEY_F)]));
    expect(credentials(keyless.calls())).toEqual(new Set(['none']));
  });

  it('prices what the fallback used as the model that served it', async () => {
    const { data } = await ask(g, BIG, uniquePrompt('priced'));
    const usage = data.usage!;
    type Line = {
      model: string;
      servedModel?: string;
      cost: number;
      tokensIn: number;
      tokensOut: number;
      status: number;
    };
    let line: Line | undefined;
    await waitUntil('the request log line', () => {
      const lines = readFileSync(requestLog, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Line);
      line = lines.find(
        (l) => l.tokensIn === usage.prompt_tokens && l.servedModel === SMALL && l.status === 200 && l.cost > 0,
      );
      return line !== undefined;
    });
    expect(line!.model).toBe(BIG);
    // USD 1 per 1M tokens each way for the small model (the big one would cost 1000 times as much).
    expect(line!.cost).toBeCloseTo((usage.prompt_tokens + usage.completion_tokens) / 1e6, 12);
  });

  it('/health lists the fallback upstreams in their groups, and the chains', async () => {
    const health = (await (await fetch(`${g.gatewayUrl}/health`)).json()) as {
      upstreams: Array<{ name: string; pool: string; breaker: string }>;
      fallbacks: Record<string, unknown>;
    };
    expect(health.upstreams.map(({ name, pool, breaker }) => ({ name, pool, breaker }))).toEqual([
      { name: 'primary', pool: 'upstream', breaker: 'open' },
      { name: 'backup-1', pool: 'backup', breaker: 'closed' },
      { name: 'keyless-1', pool: 'keyless', breaker: 'closed' },
    ]);
    expect(health.fallbacks).toEqual({
      [BIG]: [{ group: 'backup', model: SMALL }],
      'other-model': [{ group: 'keyless' }],
    });
  });
});

describe('llama.cpp servers with keys of their own', () => {
  const KEY_L1 = 'llamaOne0123456789abcdef';
  const KEY_L2 = 'llamaTwo0123456789abcdef';
  let servers: MockProvider[];
  let g: GatewayUnderTest;

  beforeAll(async () => {
    servers = await Promise.all([startMockProvider({ latencyMs: 5 }), startMockProvider({ latencyMs: 5 })]);
    const file = writeFile('upstreams.json', {
      upstreams: [
        { name: 'gpu-1', url: servers[0].url, apiKeyEnv: 'KEY_L1' },
        { name: 'gpu-2', url: servers[1].url, apiKey: KEY_L2 },
      ],
    });
    g = await startGateway({
      provider: servers[0],
      flags: ['--provider', 'llama', '--upstreams-file', file, '--health-interval', '0.1'],
      env: { KEY_L1, LLAMA_API_KEY: PROVIDER_KEY },
    });
  });

  afterAll(async () => {
    await g?.close();
    await Promise.all((servers ?? []).map((s) => s.close()));
  });

  it("reads each server's slots (and the first one's identity) with that server's own key", async () => {
    const props = (s: MockProvider) => s.calls().filter((c) => c.route === '/props');
    await waitUntil('both servers asked for their props', () => servers.every((s) => props(s).length > 0));
    // A request checks the identity of the server its dedup key names (the first one's /props) before its call.
    const answer = await fetch(`${g.gatewayUrl}/completion`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}` },
      body: JSON.stringify({ prompt: uniquePrompt('llama'), n_predict: 4 }),
    });
    expect(answer.status).toBe(200);
    expect(answer.headers.get('x-orchestrator-upstream')).toBe('gpu-1');
    expect(credentials(props(servers[0]))).toEqual(new Set([hashCredential(KEY_L1)]));
    expect(credentials(props(servers[1]))).toEqual(new Set([hashCredential(KEY_L2)]));
    expect(credentials(servers[0].calls().filter((c) => c.route === '/completion'))).toEqual(
      new Set([hashCredential(KEY_L1)]),
    );
  });
});

describe('what the gateway says of an upstream and its key: answers, request lines, start-up', () => {
  const KEY_Q = 'quotedkey0123456789abcdef';
  let primary: MockProvider;
  let quoting: Server;
  let gateway: GatewayProcess;

  beforeAll(async () => {
    await ensureBuilt();
    primary = await startMockProvider({ latencyMs: 5, mode: 'error503' });
    // A provider that quotes the key it was sent in its error, as OpenAI's 401 does ("Incorrect API key provided: ...").
    quoting = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => (body += chunk.toString()));
      request.on('end', () => {
        const sent = (request.headers.authorization ?? '').replace(/^Bearer /, '');
        const { model, messages } = JSON.parse(body) as { model: string; messages: Array<{ content: string }> };
        if (messages[0].content.includes('leak')) {
          response.writeHead(401, { 'content-type': 'application/json' });
          response.end(
            JSON.stringify({
              error: {
                message: `Incorrect API key provided: ${sent}.`,
                type: 'invalid_request_error',
                param: null,
                code: 'invalid_api_key',
              },
            }),
          );
          return;
        }
        response.writeHead(200, { 'content-type': 'application/json' });
        const usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };
        response.end(
          JSON.stringify({
            id: 'chatcmpl-q',
            object: 'chat.completion',
            created: 1,
            model,
            choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
            usage,
          }),
        );
      });
    });
    await new Promise<void>((resolve) => quoting.listen(0, '127.0.0.1', resolve));
    const file = writeFile('upstreams.json', {
      upstreams: [{ name: 'primary', url: primary.url, apiKeyEnv: 'KEY_A' }],
      groups: {
        quoting: [
          {
            name: 'quoting-1',
            url: `http://127.0.0.1:${(quoting.address() as AddressInfo).port}/v1`,
            apiKeyEnv: 'KEY_Q',
          },
        ],
      },
      fallbacks: { 'big-model': [{ group: 'quoting', model: 'small-model' }] },
    });
    gateway = await startGatewayProcess(
      [
        '--upstreams-file',
        file,
        '--breaker-failures',
        '1',
        '--retries',
        '0',
        '--breaker-open',
        '60',
        '--log-level',
        'debug',
      ],
      { KEY_A, KEY_Q },
    );
  }, 180_000);

  afterAll(async () => {
    gateway?.kill();
    await gateway?.exited;
    await primary?.close();
    await new Promise((resolve) => quoting?.close(resolve));
  });

  const post = (content: string) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}` },
      body: JSON.stringify({ model: 'big-model', messages: [{ role: 'user', content }] }),
    });

  it("relays an upstream's error without the key it quotes, and never logs a key", async () => {
    const served = await post(uniquePrompt('served'));
    expect(served.status).toBe(200);
    expect(served.headers.get('x-orchestrator-upstream')).toBe('quoting-1');
    const leaked = await post(uniquePrompt('leak'));
    expect(leaked.status).toBe(401);
    const text = await leaked.text();
    expect(text).toContain('Incorrect API key provided: [redacted].');
    expect(text).not.toContain(KEY_Q);
    await waitUntil(
      'the request lines',
      () =>
        gateway
          .output()
          .split('\n')
          .filter((l) => l.includes('"msg":"request"')).length >= 2,
    );
    const output = gateway.output();
    for (const key of [KEY_A, KEY_Q, CLIENT_KEY]) expect(output).not.toContain(key);
  });

  it('names, in each request line, the upstream that answered and the model it was asked for', () => {
    const lines = gateway
      .output()
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map(
        (line) =>
          JSON.parse(line) as {
            msg?: string;
            status?: number;
            model?: string;
            servedModel?: string;
            upstream?: string;
          },
      );
    const requests = lines.filter((l) => l.msg === 'request');
    expect(
      requests.map(({ status, model, servedModel, upstream }) => ({ status, model, servedModel, upstream })),
    ).toEqual([
      { status: 200, model: 'big-model', servedModel: 'small-model', upstream: 'quoting-1' },
      { status: 401, model: 'big-model', servedModel: 'small-model', upstream: 'quoting-1' },
    ]);
  });
});

describe('an Anthropic upstream with a key of its own', () => {
  const KEY_ANT = 'anthropicOwn0123456789abc';
  let server: MockProvider;
  let g: GatewayUnderTest;

  beforeAll(async () => {
    server = await startMockProvider({ latencyMs: 5 });
    const file = writeFile('upstreams.json', { upstreams: [{ name: 'claude', url: server.url, apiKey: KEY_ANT }] });
    g = await startGateway({
      provider: server,
      flags: ['--provider', 'anthropic', '--upstreams-file', file],
      env: { ANTHROPIC_API_KEY: PROVIDER_KEY },
    });
  });

  afterAll(async () => {
    await g?.close();
    await server?.close();
  });

  it("is sent it as x-api-key, instead of ANTHROPIC_API_KEY or the client's own", async () => {
    const answer = await fetch(`${g.gatewayUrl}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': CLIENT_KEY, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({
        model: 'claude-x',
        max_tokens: 8,
        messages: [{ role: 'user', content: uniquePrompt('claude') }],
      }),
    });
    expect(answer.status).toBe(200);
    expect(answer.headers.get('x-orchestrator-upstream')).toBe('claude');
    expect(credentials(server.calls())).toEqual(new Set([hashCredential(KEY_ANT)]));
  });
});
