import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startLlamaServer, type LlamaServer } from '../support/llama-server.js';
import {
  comparable,
  featureServer,
  gatewayInFront,
  mask,
  observe,
  rawComparable,
  sseEvents,
  type Exchange,
  type GatewayInFront,
} from './support.js';

/**
 * The differential suite: every llama-server route, stream and non-stream,
 * sent to the server directly and through the gateway (`--provider llama`).
 * Both must give the same status, the same Content-Type and the same body
 * (parsed; ids, clocks, timings and prompt-cache counts aside), the same
 * stream events in the same order with the same end, and the same error
 * bodies. Where the gateway answers differently on purpose, `KNOWN
 * DIFFERENCES` below says so and checks exactly that difference.
 *
 * Run with `npm run test:llama` (against ../shared/tools/llama-server, or a
 * server of your own with LLAMA_SERVER_URL).
 */

const CHAT = [{ role: 'user', content: 'Hi' }];
// 801 tokens with the test model's byte-level vocabulary: more than -c 512 holds.
const OVERFLOW = 'ab '.repeat(400);
// Sampling is made deterministic (llama-server's /v1/messages ignores `seed`, so temperature 0 everywhere).
const SAMPLING = { seed: 1, temperature: 0 };

interface Case extends Exchange {
  name: string;
  /** Keys masked on top of the usual ones (e.g. Anthropic input_tokens depend on the prompt cache). */
  mask?: string[];
}

const GENERATION: Case[] = [
  { name: 'native completion', path: '/completion', body: { prompt: 'Hello', n_predict: 4, ...SAMPLING } },
  {
    name: 'native completion (alias /completions)',
    path: '/completions',
    body: { prompt: 'Hello there', n_predict: 3, ...SAMPLING },
  },
  {
    name: 'native completion, token prompt',
    path: '/completion',
    body: { prompt: [72, 105], n_predict: 3, ...SAMPLING },
  },
  {
    name: 'native completion, multi-prompt',
    path: '/completion',
    body: { prompt: ['Hi', 'Yo'], n_predict: 2, ...SAMPLING },
  },
  {
    name: 'native completion with a stop word',
    path: '/completion',
    body: { prompt: 'Hello', n_predict: 8, stop: ['i'], ...SAMPLING },
  },
  { name: 'OpenAI completions', path: '/v1/completions', body: { prompt: 'Hello', max_tokens: 3, ...SAMPLING } },
  { name: 'chat', path: '/v1/chat/completions', body: { messages: CHAT, max_tokens: 4, ...SAMPLING } },
  {
    name: 'chat (alias /chat/completions)',
    path: '/chat/completions',
    body: { messages: CHAT, max_tokens: 3, ...SAMPLING },
  },
  {
    name: 'chat without a model',
    path: '/v1/chat/completions',
    body: { messages: [{ role: 'user', content: 'no model' }], max_tokens: 2, ...SAMPLING },
  },
  {
    name: 'chat with any model name',
    path: '/v1/chat/completions',
    body: { model: 'gpt-4o', messages: CHAT, max_tokens: 2, ...SAMPLING },
  },
  {
    name: 'chat with an unknown role',
    path: '/v1/chat/completions',
    body: { messages: [{ role: 'wizard', content: 'Hi' }], max_tokens: 2, ...SAMPLING },
  },
  { name: 'chat with no messages', path: '/v1/chat/completions', body: { messages: [], max_tokens: 2, ...SAMPLING } },
  {
    name: 'chat with max_tokens 0 (one token)',
    path: '/v1/chat/completions',
    body: { messages: CHAT, max_tokens: 0, ...SAMPLING },
  },
  {
    name: 'chat with logprobs',
    path: '/v1/chat/completions',
    body: { messages: CHAT, max_tokens: 2, logprobs: true, top_logprobs: 2, ...SAMPLING },
  },
  {
    name: 'chat with tools (the template ignores them)',
    path: '/v1/chat/completions',
    body: {
      messages: CHAT,
      max_tokens: 2,
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
      ...SAMPLING,
    },
  },
  { name: 'Responses API', path: '/v1/responses', body: { input: 'Hi', max_output_tokens: 3, ...SAMPLING } },
  {
    name: 'Responses API (alias /responses), input items',
    path: '/responses',
    body: { input: [{ role: 'user', content: 'Hey' }], max_output_tokens: 2, ...SAMPLING },
  },
  {
    name: 'Anthropic messages',
    path: '/v1/messages',
    body: { model: 'x', max_tokens: 3, messages: CHAT, ...SAMPLING },
    mask: ['input_tokens'],
  },
  {
    name: 'Anthropic messages without max_tokens, with a stop sequence',
    path: '/v1/messages',
    body: { messages: CHAT, stop_sequences: ['t'], ...SAMPLING },
    mask: ['input_tokens'],
  },
  {
    name: 'Anthropic messages with a system prompt and an unknown role',
    path: '/v1/messages',
    body: { system: 'S', max_tokens: 2, messages: [{ role: 'wizard', content: 'Hi' }], ...SAMPLING },
    mask: ['input_tokens'],
  },
];

const STREAMS: Case[] = [
  ...GENERATION.filter((c) => !c.name.includes('multi-prompt')).map((c) => ({
    ...c,
    name: `${c.name}, streamed`,
    body: { ...(c.body as object), stream: true },
  })),
  {
    name: 'chat streamed with include_usage',
    path: '/v1/chat/completions',
    body: { messages: CHAT, max_tokens: 3, stream: true, stream_options: { include_usage: true }, ...SAMPLING },
  },
  {
    name: 'native streamed with progress',
    path: '/completion',
    body: { prompt: 'Hello', n_predict: 2, stream: true, return_progress: true, ...SAMPLING },
  },
];

const UTILITY: Case[] = [
  { name: 'tokenize', path: '/tokenize', body: { content: 'Hi <|im_end|>' } },
  { name: 'tokenize with pieces (a byte piece)', path: '/tokenize', body: { content: 'Hé', with_pieces: true } },
  { name: 'tokenize {}', path: '/tokenize', body: {} },
  { name: 'detokenize', path: '/detokenize', body: { tokens: [72, 105] } },
  { name: 'detokenize {}', path: '/detokenize', body: {} },
  { name: 'apply-template', path: '/apply-template', body: { messages: [{ role: 'system', content: 'S' }, ...CHAT] } },
  {
    name: 'apply-template, prefill',
    path: '/apply-template',
    body: { messages: [...CHAT, { role: 'assistant', content: 'Par' }] },
  },
  { name: 'chat input_tokens', path: '/v1/chat/completions/input_tokens', body: { messages: CHAT } },
  { name: 'chat input_tokens (alias)', path: '/chat/completions/input_tokens', body: { messages: CHAT } },
  { name: 'responses input_tokens', path: '/v1/responses/input_tokens', body: { input: 'Hi' } },
  { name: 'Anthropic count_tokens', path: '/v1/messages/count_tokens', body: { model: 'x', messages: CHAT } },
];

const METADATA: Case[] = [
  { name: 'props', path: '/props' },
  { name: 'models', path: '/v1/models' },
  { name: 'models (alias)', path: '/models' },
  { name: 'slots with an idle slot', path: '/slots?fail_on_no_slot=1' },
  { name: 'lora-adapters', path: '/lora-adapters' },
  { name: 'lora-adapters, set none', path: '/lora-adapters', body: [] },
  { name: 'lora-adapters, not an array', path: '/lora-adapters', body: { id: 0 } },
  { name: 'metrics without --metrics', path: '/metrics' },
  { name: 'POST props without --props', path: '/props', body: { n_ctx: 99 } },
  { name: 'infill on a model without FIM tokens', path: '/infill', body: { input_prefix: 'a', input_suffix: 'b' } },
  { name: 'embeddings without --embeddings', path: '/v1/embeddings', body: { input: 'Hi' } },
  { name: 'native embedding without --embeddings', path: '/embedding', body: { content: 'Hi' } },
  { name: 'rerank without --reranking', path: '/rerank', body: { query: 'a', documents: ['b'] } },
  { name: 'slot action without --slot-save-path', method: 'POST', path: '/slots/0?action=erase' },
  { name: 'stream lookup', path: '/v1/streams/lookup', body: { conversation_ids: ['nope'] } },
  { name: 'stream replay without an id', path: '/v1/stream' },
  { name: 'stream replay of an unknown id', path: '/v1/stream?conv_id=nope' },
  { name: 'stream cancel', method: 'DELETE', path: '/v1/stream?conv_id=nope' },
  { name: 'chat control without an id', path: '/v1/chat/completions/control', body: {} },
  {
    name: 'audio transcription (an upload) on a model without audio',
    path: '/v1/audio/transcriptions',
    body: '--b0\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper\r\n--b0\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\nRIFF\r\n--b0--\r\n',
    headers: { 'content-type': 'multipart/form-data; boundary=b0' },
  },
  { name: 'tools (disabled)', path: '/tools' },
  { name: 'tools call (disabled)', path: '/tools', body: { tool: 'x' } },
];

const ERRORS: Case[] = [
  { name: 'context overflow, native', path: '/completion', body: { prompt: OVERFLOW, n_predict: 1 } },
  {
    name: 'context overflow, native streamed',
    path: '/completion',
    body: { prompt: OVERFLOW, n_predict: 1, stream: true },
  },
  {
    name: 'context overflow, chat',
    path: '/v1/chat/completions',
    body: { messages: [{ role: 'user', content: OVERFLOW }], max_tokens: 1 },
  },
  {
    name: 'context overflow, chat streamed',
    path: '/v1/chat/completions',
    body: { messages: [{ role: 'user', content: OVERFLOW }], max_tokens: 1, stream: true },
  },
  {
    name: 'context overflow, Anthropic',
    path: '/v1/messages',
    body: { max_tokens: 1, messages: [{ role: 'user', content: OVERFLOW }] },
  },
  { name: 'context overflow, Responses', path: '/v1/responses', body: { input: OVERFLOW, max_output_tokens: 1 } },
  { name: 'prompt with an unknown token id', path: '/completion', body: { prompt: [99999] } },
  { name: 'detokenize an unknown token id (a 500)', path: '/detokenize', body: { tokens: [99999] } },
  { name: 'detokenize a negative id (a 500)', path: '/detokenize', body: { tokens: [-1] } },
  { name: 'empty prompt array', path: '/completion', body: { prompt: [] } },
  { name: 'missing prompt', path: '/completion', body: {} },
  { name: 'n_predict -2', path: '/completion', body: { prompt: 'Hi', n_predict: -2 } },
  { name: 'n_predict as a string', path: '/completion', body: { prompt: 'Hi', n_predict: '3' } },
  { name: 'bad grammar', path: '/completion', body: { prompt: 'Hi', grammar: 'root ::= (' } },
  { name: 'chat without messages', path: '/v1/chat/completions', body: { model: 'x' } },
  { name: 'chat with messages not an array', path: '/v1/chat/completions', body: { messages: { role: 'user' } } },
  {
    name: 'chat message without a role (a 500)',
    path: '/v1/chat/completions',
    body: { messages: [{ content: 'Hi' }] },
  },
  { name: 'chat message without content', path: '/v1/chat/completions', body: { messages: [{ role: 'user' }] } },
  {
    name: 'chat with an unknown content part',
    path: '/v1/chat/completions',
    body: { messages: [{ role: 'user', content: [{ type: 'bogus', text: 'x' }] }] },
  },
  {
    name: 'chat with an image and no projector (a 500)',
    path: '/v1/chat/completions',
    body: {
      messages: [
        { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } }] },
      ],
    },
  },
  { name: 'Anthropic without messages (a 500)', path: '/v1/messages', body: {} },
  { name: 'Anthropic max_tokens -5', path: '/v1/messages', body: { max_tokens: -5, messages: CHAT } },
  { name: 'Anthropic count_tokens without messages (a 500)', path: '/v1/messages/count_tokens', body: {} },
  { name: 'Responses without input', path: '/v1/responses', body: {} },
  { name: 'Responses with a numeric input', path: '/v1/responses', body: { input: 5 } },
  { name: 'tokenize content of the wrong type (a 500)', path: '/tokenize', body: { content: 5 } },
  { name: 'slot action with a bad id', method: 'POST', path: '/slots/abc?action=erase' },
];

describe('llama-server, direct and through the gateway', () => {
  let server: LlamaServer;
  let gateway: GatewayInFront;

  beforeAll(async () => {
    server = await startLlamaServer({ ctx: 512 });
    gateway = await gatewayInFront(server.url, ['--cors', '*']);
  }, 60_000);
  afterAll(async () => {
    await gateway?.close();
    await server?.close();
  });

  /** Sends the case directly, then through the gateway, and compares. */
  async function same(c: Case): Promise<void> {
    const direct = await observe(server.url, c);
    const proxied = await observe(gateway.url, c);
    expect({ case: c.name, ...comparable(proxied, c.mask) }).toEqual({ case: c.name, ...comparable(direct, c.mask) });
    // Pass-through keeps the provider's bytes: the gateway adds headers, never changes the body (ids and clocks aside).
    expect(rawComparable(proxied.text)).toBe(rawComparable(direct.text));
    expect(proxied.headers.get('x-request-id')).toBeTruthy();
  }

  describe('generation routes', () => {
    for (const c of GENERATION) it(c.name, () => same(c));
  });

  describe('streams: the same events, in the same order, with the same end', () => {
    for (const c of STREAMS) {
      it(c.name, async () => {
        await same(c);
        const direct = await observe(server.url, {
          ...c,
          body: { ...(c.body as object), n_predict: 1, max_tokens: 1, max_output_tokens: 1 },
        });
        const proxied = await observe(gateway.url, {
          ...c,
          body: { ...(c.body as object), n_predict: 1, max_tokens: 1, max_output_tokens: 1 },
        });
        // The last bytes (the end marker, or the end of the stop:true chunk) are the server's.
        expect(proxied.text.slice(-20).replace(/[A-Za-z0-9]{32}/g, '')).toBe(
          direct.text.slice(-20).replace(/[A-Za-z0-9]{32}/g, ''),
        );
        expect(proxied.contentType).toBe('text/event-stream');
      });
    }
  });

  describe('utility routes', () => {
    for (const c of UTILITY) it(c.name, () => same(c));
  });

  describe('metadata, actions and disabled features', () => {
    for (const c of METADATA) it(c.name, () => same(c));

    it('HEAD /props: the same status and headers, no body', async () => {
      const direct = await observe(server.url, { method: 'HEAD', path: '/props' });
      const proxied = await observe(gateway.url, { method: 'HEAD', path: '/props' });
      expect([proxied.status, proxied.text]).toEqual([direct.status, direct.text]);
      expect(proxied.contentType).toBe(direct.contentType);
    });

    it('/props passes the bytes through: 0.0 stays 0.0, float32 echoes keep their digits', async () => {
      const proxied = await observe(gateway.url, { path: '/props' });
      expect(proxied.text).toContain('"dynatemp_range":0.0');
      expect(proxied.text).toContain('"top_n_sigma":-1.0');
      expect(proxied.text).toContain('"temperature":0.800000011920929');
      const echoed = await observe(gateway.url, {
        path: '/completion',
        body: { prompt: 'Hi', n_predict: 1, temperature: 0.00001, top_p: 1e-7 },
      });
      expect(echoed.text).toContain('"temperature":9.999999747378752e-06');
      expect(echoed.text).toContain('"top_p":1.0000000116860974e-07');
    });
  });

  describe('errors: the same status and the same body', () => {
    for (const c of ERRORS) it(c.name, () => same(c));

    it('context overflow keeps code 400, n_prompt_tokens and n_ctx', async () => {
      const r = await observe(gateway.url, {
        path: '/v1/chat/completions',
        body: { messages: [{ role: 'user', content: OVERFLOW }] },
      });
      expect(r.status).toBe(400);
      expect(JSON.parse(r.text)).toEqual({
        error: {
          code: 400,
          message: expect.stringContaining('exceeds the available context size'),
          type: 'exceed_context_size_error',
          n_prompt_tokens: expect.any(Number),
          n_ctx: 512,
        },
      });
      expect(r.headers.get('x-should-retry')).toBe('false');
    });

    it("the server's 500s about one request neither open the breaker nor get retried", async () => {
      for (let i = 0; i < 8; i++) {
        const r = await observe(gateway.url, { path: '/detokenize', body: { tokens: [99999 + i] } });
        expect(r.status).toBe(500);
      }
      const health = await observe(gateway.url, { path: '/health' });
      expect(JSON.parse(health.text).upstream.breaker).toBe('closed');
    });
  });

  describe('CORS (the gateway with --cors *, the server with its default)', () => {
    it('both echo the Origin on answers, errors and streams', async () => {
      for (const c of [GENERATION[6], ERRORS[0], STREAMS[0], { name: 'unknown', path: '/nope' }]) {
        const headers = { origin: 'http://page.example' };
        const direct = await observe(server.url, { ...c, headers });
        const proxied = await observe(gateway.url, { ...c, headers });
        expect(proxied.headers.get('access-control-allow-origin')).toBe('http://page.example');
        expect(direct.headers.get('access-control-allow-origin')).toBe('http://page.example');
      }
    });

    it('both answer a preflight on any path without a key', async () => {
      const headers = {
        origin: 'http://page.example',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'content-type',
      };
      for (const path of ['/v1/chat/completions', '/nope']) {
        const direct = await observe(server.url, { method: 'OPTIONS', path, headers });
        const proxied = await observe(gateway.url, { method: 'OPTIONS', path, headers });
        expect(direct.status).toBe(200);
        expect(proxied.status).toBe(204); // KNOWN DIFFERENCE: 204 No Content, the usual preflight answer
        expect(proxied.headers.get('access-control-allow-origin')).toBe(
          direct.headers.get('access-control-allow-origin'),
        );
        expect(proxied.headers.get('access-control-allow-methods')).toContain('POST');
      }
    });
  });

  describe('KNOWN DIFFERENCES (on purpose; each is documented in docs/gateway.md)', () => {
    it('invalid JSON: the server answers 500 (its parser threw); the gateway refuses it itself with a 400 in the same shape', async () => {
      const c = { path: '/completion', body: '{"prompt":' };
      const direct = await observe(server.url, c);
      const proxied = await observe(gateway.url, c);
      expect(direct.status).toBe(500);
      expect(JSON.parse(direct.text).error).toMatchObject({
        code: 500,
        type: 'server_error',
        message: expect.stringContaining('parse_error'),
      });
      expect(proxied.status).toBe(400);
      expect(JSON.parse(proxied.text)).toEqual({
        error: { code: 400, message: expect.stringMatching(/not valid JSON/), type: 'invalid_request_error' },
      });
    });

    it('a JSON body sent as text/plain: the server reads it; the gateway answers 415 (a page may send text/plain to any origin without a preflight)', async () => {
      const c = { path: '/tokenize', body: '{"content":"Hi"}', headers: { 'content-type': 'text/plain' } };
      expect((await observe(server.url, c)).status).toBe(200);
      expect((await observe(gateway.url, c)).status).toBe(415);
    });

    it('an unknown path or a wrong method: both 404 not_found_error; the gateway names the path', async () => {
      for (const c of [{ path: '/nope' }, { path: '/completion' }, { method: 'PUT', path: '/completion', body: {} }]) {
        const direct = await observe(server.url, c);
        const proxied = await observe(gateway.url, c);
        expect([direct.status, proxied.status]).toEqual([404, 404]);
        expect(JSON.parse(direct.text)).toEqual({
          error: { message: 'File Not Found', type: 'not_found_error', code: 404 },
        });
        expect(JSON.parse(proxied.text)).toEqual({
          error: { code: 404, message: expect.stringContaining('Invalid URL'), type: 'not_found_error' },
        });
      }
    });

    it('a body that is not a JSON object: both 400; the gateway says what it got instead (it reads only objects)', async () => {
      const c = { path: '/v1/chat/completions', body: '[1,2]' };
      const direct = await observe(server.url, c);
      const proxied = await observe(gateway.url, c);
      expect([direct.status, proxied.status]).toEqual([400, 400]);
      expect(JSON.parse(direct.text).error.message).toBe("'messages' is required");
      expect(JSON.parse(proxied.text).error).toMatchObject({
        type: 'invalid_request_error',
        message: expect.stringContaining('got an array'),
      });
    });

    it('GET /health is the gateway\'s own (status "ok" plus the upstream as its breaker sees it)', async () => {
      const direct = JSON.parse((await observe(server.url, { path: '/health' })).text);
      const proxied = JSON.parse((await observe(gateway.url, { path: '/health' })).text);
      expect(direct).toEqual({ status: 'ok' });
      expect(proxied).toMatchObject({ status: 'ok', upstream: { provider: 'llama', breaker: 'closed' } });
    });
  });
});

describe('llama-server with optional features, direct and through the gateway', () => {
  async function pair(options: Parameters<typeof featureServer>[0]) {
    const server = await featureServer({ ctx: 512, ...options });
    const gateway = await gatewayInFront(server.url);
    return { server, gateway, close: async () => (await gateway.close(), await server.close()) };
  }

  async function compare(base: { server: LlamaServer; gateway: GatewayInFront }, c: Case) {
    const direct = await observe(base.server.url, c);
    const proxied = await observe(base.gateway.url, c);
    expect({ case: c.name, ...comparable(proxied, c.mask) }).toEqual({ case: c.name, ...comparable(direct, c.mask) });
    return { direct, proxied };
  }

  it('--embeddings: native and OpenAI embeddings, -0.0 and exponents kept byte for byte', async () => {
    const p = await pair({ embeddings: true });
    try {
      for (const c of [
        { name: 'embedding', path: '/embedding', body: { content: 'Hi' } },
        { name: 'embeddings (alias)', path: '/embeddings', body: { input: ['Hi', 'Yo'] } },
        { name: 'v1 embeddings', path: '/v1/embeddings', body: { input: 'Hi', model: 'x' } },
        {
          name: 'v1 embeddings base64',
          path: '/v1/embeddings',
          body: { input: ['Hi', 'Yo'], encoding_format: 'base64' },
        },
        { name: 'v1 embeddings without input', path: '/v1/embeddings', body: {} },
        { name: 'v1 embeddings empty input', path: '/v1/embeddings', body: { input: '' } },
        { name: 'raw vectors', path: '/embedding', body: { content: 'Hi', embd_normalize: -1 } },
      ]) {
        const { direct, proxied } = await compare(p, c);
        if (direct.status === 200) expect(proxied.text).toBe(direct.text);
      }
    } finally {
      await p.close();
    }
  }, 60_000);

  it('--reranking: rerank under each of its paths', async () => {
    const p = await pair({ args: ['--reranking'] });
    try {
      for (const path of ['/rerank', '/reranking', '/v1/rerank', '/v1/reranking']) {
        await compare(p, { name: path, path, body: { query: 'a', documents: ['b', 'cc'], top_n: 1 } });
      }
      await compare(p, { name: 'no query', path: '/v1/reranking', body: { documents: ['b'] } });
      await compare(p, { name: 'no documents', path: '/rerank', body: { query: 'a' } });
      // Rank pooling on a model without a rank head gives noise (0.0 and -0.0 in varying places): the shape is compared.
      await compare(p, {
        name: 'embeddings with rank pooling',
        path: '/v1/embeddings',
        body: { input: 'Hi' },
        mask: ['embedding'],
      });
    } finally {
      await p.close();
    }
  }, 60_000);

  it('--metrics --props --slot-save-path: metrics (the same series), POST /props, slot save/restore/erase', async () => {
    const { mkdtempSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    // eslint-disable-next-line @typescript-eslint/unbound-method -- a plain function of node:path
    const { join } = await import('node:path');
    const dir = mkdtempSync(join(tmpdir(), 'slots-'));
    const p = await pair({ metrics: true, args: ['--props', '--slot-save-path', dir, '-np', '1'] });
    try {
      await observe(p.server.url, { path: '/completion', body: { prompt: 'Hello', n_predict: 2, ...SAMPLING } });
      const direct = await observe(p.server.url, { path: '/metrics' });
      const proxied = await observe(p.gateway.url, { path: '/metrics' });
      expect(proxied.status).toBe(direct.status);
      if (!p.server.external) expect(proxied.status).toBe(200);
      expect(proxied.contentType).toBe(direct.contentType);
      const series = (text: string) => text.split('\n').filter((l) => l.startsWith('# TYPE'));
      expect(series(proxied.text)).toEqual(series(direct.text));

      await compare(p, { name: 'POST props', path: '/props', body: { n_ctx: 512 } });
      await compare(p, {
        name: 'slot save',
        method: 'POST',
        path: '/slots/0?action=save',
        body: { filename: 's0.bin' },
      });
      await compare(p, {
        name: 'slot restore',
        method: 'POST',
        path: '/slots/0?action=restore',
        body: { filename: 's0.bin' },
      });
      // Erasing changes the slot: each side erases what a restore just put back.
      for (const base of [p.server.url, p.gateway.url]) {
        await observe(base, { method: 'POST', path: '/slots/0?action=restore', body: { filename: 's0.bin' } });
      }
      await observe(p.server.url, { method: 'POST', path: '/slots/0?action=restore', body: { filename: 's0.bin' } });
      const erasedDirect = await observe(p.server.url, { method: 'POST', path: '/slots/0?action=erase' });
      await observe(p.server.url, { method: 'POST', path: '/slots/0?action=restore', body: { filename: 's0.bin' } });
      const erasedProxied = await observe(p.gateway.url, { method: 'POST', path: '/slots/0?action=erase' });
      expect(comparable(erasedProxied)).toEqual(comparable(erasedDirect));
      if (!p.server.external) expect(JSON.parse(erasedProxied.text).n_erased).toBeGreaterThan(0);
      await compare(p, {
        name: 'slot save without a filename (a 500)',
        method: 'POST',
        path: '/slots/0?action=save',
        body: {},
      });
      await compare(p, {
        name: 'slot save outside the directory',
        method: 'POST',
        path: '/slots/0?action=save',
        body: { filename: '../x.bin' },
      });
      await compare(p, { name: 'slot: unknown action', method: 'POST', path: '/slots/0?action=nope' });
      await compare(p, {
        name: 'slot: an id that needs escaping',
        method: 'POST',
        path: '/slots/a%2Fb%20c?action=erase',
      });
      const slots = async (base: string) =>
        (JSON.parse((await observe(base, { path: '/slots' })).text) as Array<{ id: number; n_ctx: number }>).map(
          ({ id, n_ctx }) => ({ id, n_ctx }),
        );
      expect(await slots(p.gateway.url)).toEqual(await slots(p.server.url));
    } finally {
      await p.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('--api-key: keys are judged by the server, exactly as they are sent', async () => {
    const p = await pair({ apiKey: 'k1' });
    try {
      const chat = { path: '/v1/chat/completions', body: { messages: CHAT, max_tokens: 1, ...SAMPLING } };
      for (const [name, headers] of [
        ['Bearer', { authorization: 'Bearer k1' }],
        ['no scheme', { authorization: 'k1' }],
        ['lower-case bearer', { authorization: 'bearer k1' }],
        ['wrong key', { authorization: 'Bearer nope' }],
        ['X-Api-Key', { 'x-api-key': 'k1' }],
        ['wrong Authorization beside a right X-Api-Key', { authorization: 'Bearer nope', 'x-api-key': 'k1' }],
        ['none', {}],
      ] as Array<[string, Record<string, string>]>) {
        await compare(p, { name: `chat, ${name}`, ...chat, headers });
        await compare(p, { name: `models, ${name}`, path: '/v1/models', headers });
      }
    } finally {
      await p.close();
    }
  }, 60_000);

  it('resumable streams: X-Conversation-Id reaches the server, and the replay routes answer the same', async () => {
    const p = await pair({});
    try {
      const body = { prompt: 'Hello', n_predict: 3, stream: true, ...SAMPLING };
      const started = await observe(p.gateway.url, {
        path: '/completion',
        body,
        headers: { 'x-conversation-id': 'conv-gw' },
      });
      expect(started.status).toBe(200);
      // The server marks the buffered stream done just after its last bytes: wait for that before comparing.
      for (let i = 0; i < 50; i++) {
        const seen = await observe(p.server.url, {
          path: '/v1/streams/lookup',
          body: { conversation_ids: ['conv-gw'] },
        });
        if (JSON.parse(seen.text)[0]?.is_done === true) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const lookup = await compare(p, {
        name: 'lookup',
        path: '/v1/streams/lookup',
        body: { conversation_ids: ['conv-gw'] },
      });
      expect(JSON.parse(lookup.proxied.text)).toEqual([
        expect.objectContaining({ conversation_id: 'conv-gw', is_done: true }),
      ]);
      const replayed = await compare(p, { name: 'replay', path: '/v1/stream?conv_id=conv-gw' });
      expect(sseEvents(replayed.proxied.text).map((e) => mask(e.data))).toEqual(
        sseEvents(started.text).map((e) => mask(e.data)),
      );
      await compare(p, { name: 'replay from an offset', path: '/v1/stream?conv_id=conv-gw&from=10' });
      await compare(p, { name: 'bad offset', path: '/v1/stream?conv_id=conv-gw&from=x' });
    } finally {
      await p.close();
    }
  }, 60_000);
});
