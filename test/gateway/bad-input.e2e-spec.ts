import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI, { APIError } from 'openai';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hashCredential } from '../../apps/mock-provider/src/index.js';
import { PLATFORMS } from '../support/platforms.js';
import {
  postJson,
  send,
  startGateway,
  uniquePrompt,
  type GatewayUnderTest,
  type RawResponse,
} from '../support/gateway-harness.js';

/**
 * Whatever a client sends, the gateway answers with a 4xx that names the
 * problem, in the client's API shape, with `x-should-retry: false`, without a
 * stack trace or a credential, and goes on serving everyone else.
 */

const CHAT = '/v1/chat/completions';
// Stack frames ("    at fn (/path/file.js:1:2)"), file paths with line numbers, dependency paths.
const STACK_TRACE = /\bat \S+ \(|\bat \/|node_modules|\.[cm]?[jt]s:\d+|Error: .*\n\s+at /;

const validChat = (label = 'valid') => ({
  model: 'mock-model',
  messages: [{ role: 'user', content: uniquePrompt(label) }],
});

/** The OpenAI error shape, x-should-retry: false, nothing internal leaked. */
function expectOpenAIError(r: RawResponse, status: number, param?: string | null): void {
  expect({ status: r.status, body: r.text.slice(0, 300) }).toEqual({ status, body: expect.any(String) });
  expect(r.headers.get('content-type')).toContain('application/json');
  expect(Object.keys(r.json ?? {})).toEqual(['error']);
  expect(Object.keys(r.json.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(typeof r.json.error.message).toBe('string');
  expect(typeof r.json.error.type).toBe('string');
  expect(r.json.error.code === null || typeof r.json.error.code === 'string').toBe(true);
  if (param === undefined) expect(r.json.error.param === null || typeof r.json.error.param === 'string').toBe(true);
  else expect(r.json.error.param).toBe(param);
  expect(r.json.error.message.length).toBeGreaterThan(5);
  expect(r.headers.get('x-should-retry')).toBe('false');
  expect(r.text).not.toMatch(STACK_TRACE);
}

/** The Anthropic error shape, x-should-retry: false, nothing internal leaked. */
function expectAnthropicError(r: RawResponse, status: number, type: string): void {
  expect(r.status).toBe(status);
  expect(r.json).toMatchObject({ type: 'error', error: { type, message: expect.any(String) } });
  expect(r.json.error.param).toBeUndefined();
  expect(r.headers.get('x-should-retry')).toBe('false');
  expect(r.text).not.toMatch(STACK_TRACE);
}

/** A raw request with a given body text and content type. */
function rawPost(url: string, body: string, contentType = 'application/json'): Promise<RawResponse> {
  return send(url, { method: 'POST', headers: { 'content-type': contentType }, body });
}

describe.each(PLATFORMS)('bad input on %s', (platform) => {
  let g: GatewayUnderTest;
  beforeAll(async () => {
    g = await startGateway({ flags: ['--platform', platform, '--max-body', '2048'] });
  });
  afterAll(() => g.close());

  /** The gateway still answers a valid request (and the provider saw only valid ones). */
  async function expectStillServing(): Promise<void> {
    const r = await postJson(`${g.gatewayUrl}${CHAT}`, validChat('still serving'));
    expect(r.status).toBe(200);
    expect(r.json.choices[0].message.content).toContain('still serving');
  }

  const cases: Array<{
    name: string;
    send: (url: string) => Promise<RawResponse>;
    status: number;
    param?: string | null;
    mentions?: RegExp;
  }> = [
    {
      name: 'malformed JSON',
      send: (u) => rawPost(u, '{"model": "m", "messages": [}'),
      status: 400,
      param: null,
      mentions: /JSON/,
    },
    { name: 'truncated JSON', send: (u) => rawPost(u, '{"model": "m"'), status: 400, param: null, mentions: /JSON/ },
    { name: 'an empty body', send: (u) => rawPost(u, ''), status: 400, mentions: /JSON/ },
    {
      name: 'a JSON array body',
      send: (u) => rawPost(u, JSON.stringify([validChat()])),
      status: 400,
      param: null,
      mentions: /JSON object, got an array/,
    },
    // Express's strict JSON parser refuses a top-level null as invalid JSON; Fastify parses it and the check names it.
    {
      name: 'a JSON null body',
      send: (u) => rawPost(u, 'null'),
      status: 400,
      param: null,
      mentions: /got null|not valid JSON/,
    },
    {
      name: 'a JSON string body',
      send: (u) => rawPost(u, '"hello"'),
      status: 400,
      param: null,
      mentions: /got string|not valid JSON/,
    },
    {
      name: 'Content-Type text/plain',
      send: (u) => rawPost(u, JSON.stringify(validChat()), 'text/plain'),
      status: 415,
      mentions: /Content-Type/i,
    },
    {
      name: 'Content-Type application/x-www-form-urlencoded',
      send: (u) => rawPost(u, 'model=m&messages=x', 'application/x-www-form-urlencoded'),
      status: 415,
      mentions: /Content-Type/i,
    },
    {
      name: 'stream: "yes"',
      send: (u) => postJson(u, { ...validChat(), stream: 'yes' }),
      status: 400,
      param: 'stream',
      mentions: /stream/,
    },
  ];

  for (const c of cases) {
    it(`answers ${c.name} with ${c.status}${c.param ? ` naming ${c.param}` : ''}, and keeps serving`, async () => {
      const before = g.provider.stats().total;
      const r = await c.send(`${g.gatewayUrl}${CHAT}`);
      expectOpenAIError(r, c.status, c.param);
      if (c.mentions) expect(r.json.error.message).toMatch(c.mentions);
      expect(g.provider.stats().total).toBe(before); // never reached the provider
      await expectStillServing();
    });
  }

  // The gateway is no stricter than the provider it fronts: what only the provider can judge (is `model` required,
  // which roles exist, is a value in range) goes to it, and its status and error body reach the client unchanged.
  const providerJudged: Array<{ name: string; body: unknown }> = [
    { name: 'a missing model', body: { messages: [{ role: 'user', content: 'hi' }] } },
    { name: 'a numeric model', body: { model: 42, messages: [{ role: 'user', content: 'hi' }] } },
    { name: 'missing messages', body: { model: 'm' } },
    { name: 'empty messages', body: { model: 'm', messages: [] } },
    { name: 'messages: "x"', body: { model: 'm', messages: 'x' } },
    { name: 'a message without a role', body: { model: 'm', messages: [{ content: 'hi' }] } },
    { name: 'an unknown role', body: { model: 'm', messages: [{ role: 'wizard', content: 'hi' }] } },
    { name: 'temperature: "hot"', body: { ...validChat(), temperature: 'hot' } },
    { name: 'max_tokens: -3', body: { ...validChat(), max_tokens: -3 } },
  ];
  for (const c of providerJudged) {
    it(`passes ${c.name} to the provider, whose answer reaches the client unchanged`, async () => {
      const direct = await postJson(`${g.provider.url}${CHAT}`, c.body);
      const before = g.provider.stats().total;
      const r = await postJson(`${g.gatewayUrl}${CHAT}`, c.body);
      expect(g.provider.stats().total).toBe(before + 1);
      expect(r.status).toBe(direct.status);
      if (direct.status >= 400) expect(r.text).toBe(direct.text);
      else expect({ ...r.json, id: 'x' }).toEqual({ ...direct.json, id: 'x', created: r.json.created });
      expect(r.headers.get('x-should-retry')).toBe(direct.status >= 400 ? 'false' : null);
      expect(r.text).not.toMatch(STACK_TRACE);
      await expectStillServing();
    });
  }

  it('translates an Anthropic request without max_tokens for an OpenAI-compatible provider (it needs none); malformed JSON is a 400 in the Anthropic shape', async () => {
    const r = await postJson(`${g.gatewayUrl}/v1/messages`, {
      model: 'mock-model',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ type: 'message', content: [{ type: 'text', text: 'Echo: hi' }] });
    const malformed = await rawPost(`${g.gatewayUrl}/v1/messages`, '{"model":');
    expectAnthropicError(malformed, 400, 'invalid_request_error');
    const notAnObject = await postJson(`${g.gatewayUrl}/v1/messages`, [1, 2]);
    expectAnthropicError(notAnObject, 400, 'invalid_request_error');
    // What has no counterpart in chat completions is refused by name, never dropped (and never reaches the provider).
    const before = g.provider.stats().total;
    for (const [field, extra] of [
      ['top_k', { top_k: 5 }],
      ['thinking', { thinking: { type: 'enabled', budget_tokens: 1024 } }],
      ['tools[0]', { tools: [{ type: 'web_search_20250305', name: 'web_search' }] }],
    ] as const) {
      const refused = await postJson(`${g.gatewayUrl}/v1/messages`, {
        model: 'mock-model',
        max_tokens: 5,
        messages: [{ role: 'user', content: 'hi' }],
        ...extra,
      });
      expectAnthropicError(refused, 400, 'invalid_request_error');
      expect(refused.json.error.message).toContain(field);
    }
    expect(g.provider.stats().total).toBe(before);
    await expectStillServing();
  });

  it('answers a body over --max-body 2048 with 413', async () => {
    const big = { ...validChat(), messages: [{ role: 'user', content: 'x'.repeat(4096) }] };
    const r = await postJson(`${g.gatewayUrl}${CHAT}`, big);
    expectOpenAIError(r, 413, null);
    expect(r.json.error.message).toMatch(/larger|too large/i);
    const anthropic = await postJson(`${g.gatewayUrl}/v1/messages`, { ...big, max_tokens: 5 });
    expectAnthropicError(anthropic, 413, 'request_too_large');
    // Just under the limit is fine.
    const fits = await postJson(`${g.gatewayUrl}${CHAT}`, {
      ...validChat(),
      messages: [{ role: 'user', content: 'y'.repeat(1500) }],
    });
    expect(fits.status).toBe(200);
    await expectStillServing();
  });

  it('answers unknown routes with 404', async () => {
    for (const [method, path] of [
      ['POST', '/v1/chat/completion'],
      ['GET', '/v1/nope'],
      ['DELETE', '/v1/models'],
      ['GET', '/v1/chat/completions'],
    ]) {
      const r = await send(`${g.gatewayUrl}${path}`, {
        method,
        headers: method === 'POST' ? { 'content-type': 'application/json' } : {},
        body: method === 'POST' ? '{}' : undefined,
      });
      expectOpenAIError(r, 404, null);
    }
    await expectStillServing();
  });

  describe('hostile bodies', () => {
    let roomy: GatewayUnderTest;
    beforeAll(async () => {
      roomy = await startGateway({ flags: ['--platform', platform] });
    });
    afterAll(() => roomy.close());

    /** 4xx in the OpenAI shape, or a normal answer; never a 5xx, a crash or a leak. */
    async function expectHandled(r: RawResponse): Promise<void> {
      if (r.status === 200) {
        expect(r.json.object).toBe('chat.completion');
      } else {
        expect(r.status).toBeGreaterThanOrEqual(400);
        expect(r.status).toBeLessThan(500);
        expectOpenAIError(r, r.status);
      }
      expect(r.text).not.toMatch(STACK_TRACE);
      const next = await postJson(`${roomy.gatewayUrl}${CHAT}`, validChat('after hostile'));
      expect(next.status).toBe(200);
    }

    it('a 10,000-level nested JSON value', async () => {
      const depth = 10_000;
      const nestedArray = '['.repeat(depth) + ']'.repeat(depth);
      const nestedObject = '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
      const chat = JSON.stringify(validChat('nested'));
      for (const body of [
        nestedArray,
        nestedObject,
        chat.slice(0, -1) + `,"metadata":${nestedObject}}`,
        chat.slice(0, -1) + `,"tools":${nestedArray}}`,
        JSON.stringify({ model: 'mock-model', messages: [{ role: 'user', content: 'PLACEHOLDER' }] }).replace(
          '"PLACEHOLDER"',
          nestedArray,
        ),
      ]) {
        await expectHandled(await rawPost(`${roomy.gatewayUrl}${CHAT}`, body));
      }
      const messages = JSON.stringify({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
      const anthropic = await rawPost(
        `${roomy.gatewayUrl}/v1/messages`,
        messages.slice(0, -1) + `,"system":${nestedArray}}`,
      );
      expectAnthropicError(anthropic, 400, 'invalid_request_error');
      // None of it counted against the provider: the breaker is still closed.
      expect((await send(`${roomy.gatewayUrl}/health`)).json.upstream.breaker).toBe('closed');
    });

    it('__proto__ and constructor keys', async () => {
      const bodies = [
        '{"model":"mock-model","messages":[{"role":"user","content":"proto 1"}],"__proto__":{"polluted":true}}',
        '{"__proto__":{"model":"mock-model","messages":[{"role":"user","content":"proto 2"}]}}',
        '{"model":"mock-model","messages":[{"role":"user","content":"proto 3","__proto__":{"role":"system"}}],"constructor":{"prototype":{"polluted":true}}}',
      ];
      for (const body of bodies) await expectHandled(await rawPost(`${roomy.gatewayUrl}${CHAT}`, body));
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      expect((Object.prototype as Record<string, unknown>).polluted).toBeUndefined();
    });

    it('a huge string in an allowed field, under the body limit', async () => {
      const huge = 'word '.repeat(400_000); // 2 MB
      const r = await postJson(`${roomy.gatewayUrl}${CHAT}`, {
        model: 'mock-model',
        messages: [{ role: 'user', content: huge }],
      });
      await expectHandled(r);
      const model = await postJson(`${roomy.gatewayUrl}${CHAT}`, { ...validChat(), model: 'm'.repeat(1_000_000) });
      await expectHandled(model);
    });

    it('a client that disconnects mid-stream: the gateway keeps serving (others, and that same answer later)', async () => {
      roomy.provider.configure({ streamChunkDelayMs: 30 });
      try {
        const body = {
          model: 'mock-model',
          stream: true,
          messages: [{ role: 'user', content: uniquePrompt('many words '.repeat(20)) }],
        };
        const leaver = new AbortController();
        const response = await fetch(`${roomy.gatewayUrl}${CHAT}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
          signal: leaver.signal,
        });
        expect(response.status).toBe(200);
        const reader = response.body!.getReader();
        const first = await reader.read();
        expect(first.done).toBe(false);
        leaver.abort();
        await reader.read().catch(() => undefined);

        const others = await Promise.all(
          [1, 2, 3].map(() => postJson(`${roomy.gatewayUrl}${CHAT}`, validChat('while one left'))),
        );
        expect(others.map((o) => o.status)).toEqual([200, 200, 200]);
        // The abandoned stream still completes upstream and is there for a retry.
        await roomy.provider.waitFor((s) => s.inFlight === 0, 5000);
        const retry = await postJson(`${roomy.gatewayUrl}${CHAT}`, body);
        expect(retry.status).toBe(200);
        expect(retry.text).toContain('[DONE]');
      } finally {
        roomy.provider.configure({ streamChunkDelayMs: 5 });
      }
    });
  });

  describe('credentials', () => {
    let keyed: GatewayUnderTest | undefined;
    afterEach(async () => {
      await keyed?.close();
      keyed = undefined;
    });

    it('with --gateway-keys, a client without a key gets 401, and k1 gets through with the provider key upstream', async () => {
      keyed = await startGateway({
        flags: ['--platform', platform, '--gateway-keys', 'k1,k2'],
        env: { OPENAI_API_KEY: 'sk-provider-key-from-env' },
      });
      const url = `${keyed.gatewayUrl}${CHAT}`;
      const none = await postJson(url, validChat('no key'));
      expectOpenAIError(none, 401, null);
      const wrong = await postJson(url, validChat('wrong key'), { authorization: 'Bearer k3' });
      expectOpenAIError(wrong, 401, null);
      expect(wrong.text).not.toContain('k3');
      const anthropicNone = await postJson(`${keyed.gatewayUrl}/v1/messages`, {
        ...validChat('no key'),
        max_tokens: 5,
      });
      expectAnthropicError(anthropicNone, 401, 'authentication_error');
      expect(keyed.provider.stats().total).toBe(0);

      // The official SDK with a wrong key: AuthenticationError, no retry.
      await expect(
        new OpenAI({ baseURL: `${keyed.gatewayUrl}/v1`, apiKey: 'not-a-gateway-key' }).chat.completions.create(
          validChat('sdk wrong') as never,
        ),
      ).rejects.toMatchObject({ status: 401 });

      const answer = await new OpenAI({ baseURL: `${keyed.gatewayUrl}/v1`, apiKey: 'k1' }).chat.completions.create(
        validChat('with k1') as never,
      );
      expect(answer.choices[0].message.content).toContain('with k1');
      const viaHeader = await postJson(url, validChat('k2 as x-api-key'), { 'x-api-key': 'k2' });
      expect(viaHeader.status).toBe(200);

      const calls = keyed.provider.calls();
      expect(calls).toHaveLength(2);
      for (const call of calls) {
        expect(call.authHash).toBe(hashCredential('sk-provider-key-from-env'));
        expect(call.authHash).not.toBe(hashCredential('k1'));
      }
      expect(keyed.provider.stats().total).toBe(2);
    });

    it("without gateway keys, the client's own key is passed through", async () => {
      keyed = await startGateway({ flags: ['--platform', platform] });
      await new OpenAI({ baseURL: `${keyed.gatewayUrl}/v1`, apiKey: 'sk-client-own-key' }).chat.completions.create(
        validChat('own key') as never,
      );
      await postJson(
        `${keyed.gatewayUrl}/v1/messages`,
        { ...validChat('own key anthropic'), max_tokens: 5 },
        { 'x-api-key': 'sk-other-client' },
      );
      expect(keyed.provider.calls().map((c) => c.authHash)).toEqual([
        hashCredential('sk-client-own-key'),
        hashCredential('sk-other-client'),
      ]);
    });

    it('a provider 401 quoting a key reaches the client with the key redacted', async () => {
      const leaky = await startLeakyProvider();
      try {
        const config = ['--platform', platform, '--upstream', leaky.url];
        keyed = await startGateway({ flags: config });
        const r = await postJson(`${keyed.gatewayUrl}${CHAT}`, validChat('leak'), {
          authorization: 'Bearer sk-abc123456',
        });
        expectOpenAIError(r, 401);
        expect(r.json.error.message).toMatch(/Incorrect API key provided/);
        expect(r.text).not.toContain('sk-abc123456');
        expect(r.text).not.toContain('abc123456');
        expect(r.text).not.toContain('sk-proj-zyx987654321');

        const error = await new OpenAI({ baseURL: `${keyed.gatewayUrl}/v1`, apiKey: 'sk-abc123456' }).chat.completions
          .create(validChat('leak sdk') as never)
          .catch((e: unknown) => e as APIError);
        expect(error).toBeInstanceOf(APIError);
        expect((error as APIError).status).toBe(401);
        expect((error as APIError).message).not.toContain('abc123456');
        expect(leaky.calls()).toBe(2); // a 401 is relayed once, not retried by gateway or SDK

        const anthropic = await postJson(
          `${keyed.gatewayUrl}/v1/messages`,
          { ...validChat('leak anthropic'), max_tokens: 5 },
          { 'x-api-key': 'sk-abc123456' },
        );
        expectAnthropicError(anthropic, 401, 'authentication_error');
        expect(anthropic.text).not.toContain('abc123456');
      } finally {
        await keyed?.close();
        keyed = undefined;
        await leaky.close();
      }
    });
  });
});

/** A provider that rejects every key, quoting it back (as OpenAI does, partly masked). */
async function startLeakyProvider(): Promise<{ url: string; calls: () => number; close: () => Promise<void> }> {
  let calls = 0;
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      calls++;
      const key = String(req.headers.authorization ?? req.headers['x-api-key'] ?? '').replace(/^Bearer /, '');
      const body = JSON.stringify({
        error: {
          message: `Incorrect API key provided: ${key}. Your project key is sk-proj-zyx987654321. You can find your API key at https://platform.openai.com/account/api-keys.`,
          type: 'invalid_request_error',
          param: null,
          code: 'invalid_api_key',
        },
      });
      res.writeHead(401, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    calls: () => calls,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
