import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { hashCredential } from './content.js';
import { startMockProvider } from './mock-provider.js';
import type { MockProvider } from './mock-provider.types.js';

interface StreamRead {
  text: string;
  error: unknown;
}

/** Reads a body to its end, or to the point where the connection broke. */
async function readAll(response: Response): Promise<StreamRead> {
  const body = response.body;
  if (body === null) return { text: '', error: undefined };
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { text: text + decoder.decode(), error: undefined };
      text += decoder.decode(value, { stream: true });
    }
  } catch (error) {
    return { text, error };
  }
}

type Settled = { answered: true; status: number } | { answered: false; error: unknown };

/** fetch errors come from another realm under jest, so `toBeInstanceOf(Error)` cannot be used on them. */
function settle(response: Promise<Response>): Promise<Settled> {
  return response.then(
    (r) => ({ answered: true, status: r.status }),
    (error: unknown) => ({ answered: false, error }),
  );
}

function dataPayloads(text: string): string[] {
  return text
    .split('\n\n')
    .filter((block) => block.trim() !== '')
    .map((block) => {
      const line = block.split('\n').find((l) => l.startsWith('data: '));
      return line === undefined ? '' : line.slice('data: '.length);
    });
}

type Json = Record<string, unknown> & { [key: string]: unknown };

function parse(payload: string): Json {
  return JSON.parse(payload) as Json;
}

const CHAT_BODY = { model: 'gpt-test', messages: [{ role: 'user', content: 'hello brave new world' }] };
const ANTHROPIC_BODY = {
  model: 'claude-test',
  max_tokens: 64,
  messages: [{ role: 'user', content: [{ type: 'text', text: 'hi there' }] }],
};

describe('mock provider', () => {
  let mock: MockProvider;

  const post = (path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> =>
    fetch(`${mock.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });

  beforeAll(async () => {
    mock = await startMockProvider({ port: 0, streamChunkDelayMs: 1 });
  });

  afterAll(async () => {
    await mock.close();
  });

  beforeEach(() => {
    mock.setMode('ok');
    mock.configure({ latencyMs: 0, latencyJitterMs: 0, streamChunkDelayMs: 1 });
    mock.reset();
  });

  describe('counting', () => {
    it('counts model calls by route and mode, health checks apart, control and unknown routes not at all', async () => {
      await (await post('/v1/chat/completions', CHAT_BODY)).json();
      await (await post('/chat/completions', CHAT_BODY)).json();
      await (await post('/v1/messages', ANTHROPIC_BODY)).json();
      await (await fetch(`${mock.url}/health`)).json();
      await (await fetch(`${mock.url}/__mock/stats`)).json();
      await (await fetch(`${mock.url}/no/such/route`)).json();
      mock.setMode('error503');
      await (await post('/completion', { prompt: 'x' })).json();

      const stats = mock.stats();
      expect(stats.total).toBe(4);
      expect(stats.byRoute).toEqual({
        '/v1/chat/completions': 1,
        '/chat/completions': 1,
        '/v1/messages': 1,
        '/completion': 1,
      });
      expect(stats.byMode).toEqual({ ok: 3, error503: 1 });
      expect(stats.healthChecks).toBe(1);
      expect(stats.notFound).toBe(1);
      expect(stats.inFlight).toBe(0);

      const calls = mock.calls();
      expect(calls.map((c) => c.route)).toEqual([
        '/v1/chat/completions',
        '/chat/completions',
        '/v1/messages',
        '/health',
        '/completion',
      ]);
      expect(calls.map((c) => c.seq)).toEqual([1, 2, 3, 4, 5]);
      expect(calls[4]).toMatchObject({ mode: 'error503', outcome: 'error503', status: 503 });
      for (const call of calls) expect(call.finishedAt).toBeGreaterThanOrEqual(call.receivedAt);
    });

    it('records a hash of the credential, never the credential itself', async () => {
      await (await post('/v1/chat/completions', CHAT_BODY, { authorization: 'Bearer sk-secret-1' })).json();
      await (await post('/v1/messages', ANTHROPIC_BODY, { 'x-api-key': 'sk-secret-1' })).json();
      await (await post('/v1/messages', ANTHROPIC_BODY)).json();
      const calls = mock.calls();
      expect(calls[0]?.authHash).toBe(hashCredential('sk-secret-1'));
      expect(calls[1]?.authHash).toBe(hashCredential('sk-secret-1'));
      expect(calls[2]?.authHash).toBeUndefined();
      expect(JSON.stringify(calls)).not.toContain('sk-secret-1');
      expect(calls[0]).toMatchObject({ model: 'gpt-test', stream: false, method: 'POST' });
    });

    it('keeps only the newest entries of the call log', async () => {
      const small = await startMockProvider({ callLogLimit: 5 });
      try {
        for (let i = 0; i < 12; i++) await (await fetch(`${small.url}/v1/models`)).json();
        const calls = small.calls();
        expect(calls.map((c) => c.seq)).toEqual([8, 9, 10, 11, 12]);
        expect(small.stats().total).toBe(12);
        expect(small.calls(10).map((c) => c.seq)).toEqual([11, 12]);
      } finally {
        await small.close();
      }
    });
  });

  describe('OpenAI routes', () => {
    it('answers a chat completion that echoes the last user message and carries the call seq', async () => {
      const first = await post('/v1/chat/completions', {
        messages: [
          { role: 'system', content: 'be brief' },
          { role: 'user', content: 'first question' },
          { role: 'assistant', content: 'an answer' },
          { role: 'user', content: [{ type: 'text', text: 'second question' }] },
        ],
      });
      expect(first.status).toBe(200);
      expect(first.headers.get('x-request-id')).toBe('req_mock_1');
      const body = (await first.json()) as Json;
      expect(body).toMatchObject({
        id: 'chatcmpl-mock-1',
        object: 'chat.completion',
        model: 'mock-model',
        choices: [
          { index: 0, message: { role: 'assistant', content: 'Echo: second question' }, finish_reason: 'stop' },
        ],
        usage: { prompt_tokens: 8, completion_tokens: 3, total_tokens: 11 },
      });
      const second = (await (await post('/v1/chat/completions', CHAT_BODY)).json()) as Json;
      expect(second.id).toBe('chatcmpl-mock-2');
      expect(second.model).toBe('gpt-test');
    });

    it('streams chat chunks with role first, one word per chunk, a usage chunk and [DONE]', async () => {
      const response = await post('/v1/chat/completions', {
        ...CHAT_BODY,
        stream: true,
        stream_options: { include_usage: true },
      });
      expect(response.headers.get('content-type')).toContain('text/event-stream');
      const { text, error } = await readAll(response);
      expect(error).toBeUndefined();
      const payloads = dataPayloads(text);
      expect(payloads[payloads.length - 1]).toBe('[DONE]');
      const chunks = payloads.slice(0, -1).map(parse);
      const choice = (chunk: Json): Json => (chunk.choices as Json[])[0];

      expect(choice(chunks[0]).delta).toEqual({ role: 'assistant', content: '' });
      const contentChunks = chunks.slice(1, -2);
      expect(contentChunks).toHaveLength(5);
      expect(contentChunks.map((c) => (choice(c).delta as Json).content).join('')).toBe('Echo: hello brave new world');
      expect(choice(chunks[chunks.length - 2])).toMatchObject({ delta: {}, finish_reason: 'stop' });
      const usageChunk = chunks[chunks.length - 1];
      expect(usageChunk.choices).toEqual([]);
      expect(usageChunk.usage).toEqual({ prompt_tokens: 4, completion_tokens: 5, total_tokens: 9 });
      for (const chunk of chunks)
        expect(chunk).toMatchObject({ id: 'chatcmpl-mock-1', object: 'chat.completion.chunk' });
      expect(mock.calls()[0]).toMatchObject({ stream: true, outcome: 'ok', status: 200 });
    });

    it('leaves the usage chunk out unless asked for', async () => {
      const { text } = await readAll(await post('/v1/chat/completions', { ...CHAT_BODY, stream: true }));
      const payloads = dataPayloads(text);
      expect(payloads[payloads.length - 1]).toBe('[DONE]');
      const chunks = payloads.slice(0, -1).map(parse);
      expect(chunks.every((c) => (c.choices as unknown[]).length === 1 && !('usage' in c))).toBe(true);
    });

    it('answers mock:long-K with about K KiB, one numbered piece of 512 bytes per event', async () => {
      const body = { model: 'gpt-test', stream: true, messages: [{ role: 'user', content: 'a long one mock:long-8' }] };
      const { text } = await readAll(await post('/v1/chat/completions', body));
      const payloads = dataPayloads(text);
      expect(payloads[payloads.length - 1]).toBe('[DONE]');
      const pieces = payloads
        .slice(0, -1)
        .map((p) => (parse(p).choices as Array<{ delta: { content?: string } }>)[0]?.delta.content ?? '');
      const content = pieces.filter((piece) => piece !== '');
      expect(content).toHaveLength(16);
      expect(content.every((piece, i) => piece.length === 512 && piece.startsWith(String(i).padStart(6, '0')))).toBe(
        true,
      );
    });

    it('cuts the answer at max_tokens words with finish_reason length', async () => {
      const body = (await (await post('/v1/chat/completions', { ...CHAT_BODY, max_tokens: 2 })).json()) as Json;
      expect(body.choices).toMatchObject([{ message: { content: 'Echo: hello ' }, finish_reason: 'length' }]);
    });

    it('answers legacy completions, streamed and not', async () => {
      const plain = (await (await post('/v1/completions', { prompt: 'say this' })).json()) as Json;
      expect(plain).toMatchObject({
        id: 'cmpl-mock-1',
        object: 'text_completion',
        choices: [{ text: 'Echo: say this' }],
      });
      const { text } = await readAll(await post('/v1/completions', { prompt: 'say this', stream: true }));
      const payloads = dataPayloads(text);
      expect(payloads[payloads.length - 1]).toBe('[DONE]');
      const pieces = payloads.slice(0, -1).map((p) => (parse(p).choices as Json[])[0].text);
      expect(pieces.join('')).toBe('Echo: say this');
    });

    it('returns deterministic 8-dim embeddings, as floats or base64', async () => {
      const floats = (await (await post('/v1/embeddings', { input: ['alpha', 'beta', 'alpha'] })).json()) as Json;
      const data = floats.data as Array<{ index: number; embedding: number[] }>;
      expect(data.map((d) => d.index)).toEqual([0, 1, 2]);
      expect(data[0]?.embedding).toHaveLength(8);
      expect(data[0]?.embedding).toEqual(data[2]?.embedding);
      expect(data[0]?.embedding).not.toEqual(data[1]?.embedding);

      const single = (await (
        await post('/v1/embeddings', { input: 'alpha', encoding_format: 'base64' })
      ).json()) as Json;
      const encoded = (single.data as Array<{ embedding: string }>)[0]?.embedding ?? '';
      const bytes = Buffer.from(encoded, 'base64');
      const decoded = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4));
      decoded.forEach((value, i) => expect(value).toBeCloseTo(data[0]?.embedding[i] ?? NaN, 5));

      expect((await post('/v1/embeddings', { input: [] })).status).toBe(400);
    });

    it('lists one model', async () => {
      for (const path of ['/v1/models', '/models']) {
        const body = (await (await fetch(`${mock.url}${path}`)).json()) as Json;
        expect(body).toMatchObject({ object: 'list', data: [{ id: 'mock-model', object: 'model' }] });
      }
    });
  });

  describe('Anthropic route', () => {
    it('answers a message with request-id header', async () => {
      const response = await post('/v1/messages', ANTHROPIC_BODY);
      expect(response.headers.get('request-id')).toBe('req_mock_1');
      expect(await response.json()).toMatchObject({
        id: 'msg_mock_1',
        type: 'message',
        role: 'assistant',
        model: 'claude-test',
        content: [{ type: 'text', text: 'Echo: hi there' }],
        stop_reason: 'end_turn',
        usage: { input_tokens: 2, output_tokens: 3 },
      });
    });

    it('streams the documented event sequence', async () => {
      const { text, error } = await readAll(await post('/v1/messages', { ...ANTHROPIC_BODY, stream: true }));
      expect(error).toBeUndefined();
      expect(text).not.toContain('[DONE]');
      const events = text
        .split('\n\n')
        .filter((b) => b.trim() !== '')
        .map((block) => {
          const [eventLine, dataLine] = block.split('\n');
          const payload = parse((dataLine ?? '').slice('data: '.length));
          expect(eventLine).toBe(`event: ${String(payload.type)}`);
          return payload;
        });
      expect(events.map((e) => e.type)).toEqual([
        'message_start',
        'content_block_start',
        'content_block_delta',
        'content_block_delta',
        'content_block_delta',
        'content_block_stop',
        'message_delta',
        'message_stop',
      ]);
      const deltas = events.filter((e) => e.type === 'content_block_delta').map((e) => (e.delta as Json).text);
      expect(deltas.join('')).toBe('Echo: hi there');
      expect(events[0]).toMatchObject({ message: { id: 'msg_mock_1', content: [] } });
      expect(events[6]).toMatchObject({ delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 3 } });
    });

    it('rejects a request without max_tokens in the Anthropic error shape', async () => {
      const response = await post('/v1/messages', { model: 'm', messages: [{ role: 'user', content: 'x' }] });
      expect(response.status).toBe(400);
      expect(await response.json()).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
      expect(mock.calls()[0]?.outcome).toBe('bad_request');
    });
  });

  describe('llama.cpp routes', () => {
    it('answers /completion natively', async () => {
      const body = (await (await post('/completion', { prompt: 'tell me', n_predict: 32 })).json()) as Json;
      expect(body).toMatchObject({
        index: 0,
        content: 'Echo: tell me',
        stop: true,
        model: 'mock-model',
        tokens_predicted: 3,
        tokens_evaluated: 2,
        tokens_cached: 0,
        stop_type: 'eos',
        stopping_word: '',
        truncated: false,
        generation_settings: { n_ctx: 4096, model: 'mock-model' },
      });
      expect(body.timings).toEqual(expect.objectContaining({ prompt_n: 2, predicted_n: 3 }));
    });

    it('streams without [DONE] or event lines and ends with a stop:true chunk', async () => {
      const { text, error } = await readAll(await post('/completions', { prompt: 'tell me', stream: true }));
      expect(error).toBeUndefined();
      expect(text).not.toContain('[DONE]');
      expect(text).not.toContain('event:');
      const chunks = dataPayloads(text).map(parse);
      const last = chunks[chunks.length - 1];
      expect(last).toMatchObject({ stop: true, content: '', stop_type: 'eos', tokens_predicted: 3 });
      const partials = chunks.slice(0, -1);
      expect(partials.every((c) => c.stop === false)).toBe(true);
      expect(partials.map((c) => c.content).join('')).toBe('Echo: tell me');
    });

    it('renders the ChatML template', async () => {
      const body = (await (
        await post('/apply-template', {
          messages: [
            { role: 'system', content: 'You are terse.' },
            { role: 'user', content: 'Hi' },
          ],
        })
      ).json()) as Json;
      expect(body.prompt).toBe(
        '<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
      );
    });

    it('round-trips tokenize and detokenize', async () => {
      const content = 'Grüße, world 😀!';
      const { tokens } = (await (await post('/tokenize', { content })).json()) as { tokens: number[] };
      expect(tokens.every((t) => Number.isInteger(t))).toBe(true);
      const back = (await (await post('/detokenize', { tokens })).json()) as Json;
      expect(back.content).toBe(content);
      const withPieces = (await (await post('/tokenize', { content: 'ab', with_pieces: true })).json()) as Json;
      expect(withPieces.tokens).toEqual([
        { id: 97, piece: 'a' },
        { id: 98, piece: 'b' },
      ]);
      expect((await post('/detokenize', { tokens: [-1] })).status).toBe(400);
    });

    it('describes itself on /props', async () => {
      const body = (await (await fetch(`${mock.url}/props`)).json()) as Json;
      expect(body).toMatchObject({
        default_generation_settings: { n_ctx: 4096 },
        total_slots: 4,
        model_path: 'mock-model.gguf',
        build_info: 'mock',
      });
      expect(String(body.chat_template)).toContain('<|im_start|>');
    });
  });

  describe('requireKey, as the real APIs', () => {
    it('a keyless model list or model call is a 401 in its API shape; a bad key is quoted back; an outage still answers 503 first', async () => {
      const keyed = await startMockProvider({ requireKey: true });
      try {
        const models = await fetch(`${keyed.url}/v1/models`);
        expect(models.status).toBe(401);
        expect(await models.json()).toMatchObject({
          error: { type: 'invalid_request_error', code: 'invalid_api_key' },
        });
        const anthropic = await fetch(`${keyed.url}/v1/messages`, {
          method: 'POST',
          body: JSON.stringify(ANTHROPIC_BODY),
        });
        expect(await anthropic.json()).toMatchObject({ type: 'error', error: { type: 'authentication_error' } });
        const bad = await fetch(`${keyed.url}/v1/models`, { headers: { authorization: 'Bearer wrong-123' } });
        expect(((await bad.json()) as { error: { message: string } }).error.message).toContain('wrong-123');
        expect((await fetch(`${keyed.url}/v1/models`, { headers: { authorization: 'Bearer sk-good' } })).status).toBe(
          200,
        );
        expect((await fetch(`${keyed.url}/v1/models`, { headers: { 'x-api-key': 'sk-good' } })).status).toBe(200);
        keyed.setMode('error503');
        expect((await fetch(`${keyed.url}/v1/models`)).status).toBe(503);
      } finally {
        await keyed.close();
      }
    });
  });

  describe('failure modes', () => {
    it('error503 answers 503 in each family shape, health included', async () => {
      mock.setMode('error503', { retryAfterSeconds: 1 });
      const chat = await post('/v1/chat/completions', CHAT_BODY);
      expect(chat.status).toBe(503);
      expect(chat.headers.get('retry-after')).toBe('1');
      expect(await chat.json()).toEqual({
        error: {
          message: expect.any(String),
          type: 'server_error',
          param: null,
          code: 'service_unavailable',
        },
      });
      const messages = await post('/v1/messages', ANTHROPIC_BODY);
      expect(messages.status).toBe(503);
      expect(await messages.json()).toMatchObject({ type: 'error', error: { type: 'api_error' } });
      const health = await fetch(`${mock.url}/health`);
      expect(health.status).toBe(503);
      expect(await health.json()).toEqual({
        error: { code: 503, message: 'Service unavailable', type: 'unavailable_error' },
      });
      expect(mock.stats()).toMatchObject({ total: 2, healthChecks: 1, byMode: { error503: 2 } });
    });

    it('hang never answers; leaving hang drops the stuck connections and counts them', async () => {
      mock.setMode('hang');
      const chat = settle(post('/v1/chat/completions', CHAT_BODY));
      const health = settle(fetch(`${mock.url}/health`));
      await mock.waitFor((s) => s.inFlight === 2);
      expect(mock.stats()).toMatchObject({ total: 1, healthChecks: 1, droppedHungConnections: 0 });

      expect(mock.setMode('ok')).toBe(2);
      expect(await chat).toMatchObject({ answered: false });
      expect(await health).toMatchObject({ answered: false });
      expect(mock.stats()).toMatchObject({ droppedHungConnections: 2, inFlight: 0 });
      const calls = mock.calls();
      expect(calls.map((c) => c.outcome)).toEqual(['hang', 'hang']);
      expect(calls[0]?.status).toBeUndefined();
      expect(calls[0]?.finishedAt).toBeDefined();

      // The mode switch is immediate for new requests.
      expect((await post('/v1/chat/completions', CHAT_BODY)).status).toBe(200);
    });

    it('close() destroys hung connections too', async () => {
      const local = await startMockProvider({ mode: 'hang' });
      const pending = settle(fetch(`${local.url}/v1/models`));
      await local.waitFor((s) => s.inFlight === 1);
      await local.close();
      expect(await pending).toMatchObject({ answered: false });
    });

    it('reset destroys the connection without an answer', async () => {
      mock.setMode('reset');
      await expect(post('/v1/chat/completions', CHAT_BODY)).rejects.toThrow();
      await expect(fetch(`${mock.url}/health`)).rejects.toThrow();
      expect(mock.calls().map((c) => c.outcome)).toEqual(['reset', 'reset']);
      expect(mock.stats().inFlight).toBe(0);
    });

    it('cutStream sends two chunks then breaks the stream; plain requests still answer', async () => {
      mock.setMode('cutStream');
      const response = await post('/v1/chat/completions', { ...CHAT_BODY, stream: true });
      expect(response.status).toBe(200);
      const { text, error } = await readAll(response);
      expect(error).toBeDefined();
      const payloads = dataPayloads(text);
      expect(payloads).toHaveLength(2);
      expect((parse(payloads[0] ?? '').choices as Json[])[0].delta).toMatchObject({ role: 'assistant' });
      expect(text).not.toContain('[DONE]');
      expect(mock.calls()[0]).toMatchObject({ outcome: 'cut', stream: true, status: 200 });

      expect((await post('/v1/chat/completions', CHAT_BODY)).status).toBe(200);

      mock.setMode('cutStream', { cutAfterChunks: 1 });
      const llama = await readAll(await post('/completion', { prompt: 'a b c', stream: true }));
      expect(llama.error).toBeDefined();
      expect(dataPayloads(llama.text)).toHaveLength(1);
    });

    it('slowStream still delivers the whole stream, and plain requests normally', async () => {
      mock.setMode('slowStream', { slowChunkDelayMs: 10 });
      const { text, error } = await readAll(await post('/v1/messages', { ...ANTHROPIC_BODY, stream: true }));
      expect(error).toBeUndefined();
      expect(text).toContain('event: message_stop');
      expect((await post('/v1/messages', ANTHROPIC_BODY)).status).toBe(200);
      expect((await fetch(`${mock.url}/health`)).status).toBe(200);
    });

    it('a client leaving during the latency is recorded and leaves nothing in flight', async () => {
      mock.configure({ latencyMs: 60_000 });
      const controller = new AbortController();
      const aborted = settle(fetch(`${mock.url}/v1/models`, { signal: controller.signal }));
      await mock.waitFor((s) => s.inFlight === 1);
      controller.abort();
      expect(await aborted).toMatchObject({ answered: false });
      await mock.waitFor((s) => s.inFlight === 0);
      expect(mock.calls()[0]).toMatchObject({ route: '/v1/models', outcome: 'client_closed' });
      expect(mock.calls()[0]?.status).toBeUndefined();
    });
  });

  describe('control API', () => {
    it('switches mode, tunes, reports and resets over HTTP', async () => {
      const modeResponse = await post('/__mock/mode', { mode: 'cutStream', cutAfterChunks: 3 });
      expect(modeResponse.status).toBe(200);
      expect(await modeResponse.json()).toMatchObject({ mode: 'cutStream', modeOptions: { cutAfterChunks: 3 } });
      expect(mock.config().mode).toBe('cutStream');

      const configResponse = await post('/__mock/config', { latencyMs: 5, streamChunkDelayMs: 2 });
      expect(await configResponse.json()).toMatchObject({ latencyMs: 5, streamChunkDelayMs: 2, mode: 'cutStream' });
      expect((await (await fetch(`${mock.url}/__mock/config`)).json()) as Json).toMatchObject({ latencyMs: 5 });

      await (await post('/v1/chat/completions', CHAT_BODY)).json();
      const stats = (await (await fetch(`${mock.url}/__mock/stats`)).json()) as Json;
      expect(stats).toMatchObject({ total: 1, byMode: { cutStream: 1 } });
      const calls = (await (await fetch(`${mock.url}/__mock/calls`)).json()) as Json[];
      expect(calls).toHaveLength(1);
      expect(calls[0]).toMatchObject({ seq: 1, route: '/v1/chat/completions', outcome: 'ok' });
      expect((await (await fetch(`${mock.url}/__mock/calls?since=1`)).json()) as unknown[]).toEqual([]);

      const reset = await fetch(`${mock.url}/__mock/reset`, { method: 'POST' });
      expect(reset.status).toBe(200);
      expect(mock.stats().total).toBe(0);
    });

    it('drops hung connections when the mode is switched over HTTP', async () => {
      await post('/__mock/mode', { mode: 'hang' });
      const pending = settle(post('/v1/messages', ANTHROPIC_BODY));
      await mock.waitFor((s) => s.inFlight === 1);
      const response = (await (await post('/__mock/mode', { mode: 'ok' })).json()) as Json;
      expect(response.droppedHungConnections).toBe(1);
      expect(await pending).toMatchObject({ answered: false });
    });

    it('rejects bad control input', async () => {
      expect((await post('/__mock/mode', { mode: 'sideways' })).status).toBe(400);
      expect((await post('/__mock/mode', { mode: 'ok', cutAfterChunks: -1 })).status).toBe(400);
      expect((await post('/__mock/config', { latency: 5 })).status).toBe(400);
      expect((await post('/__mock/config', '{nope')).status).toBe(400);
      expect((await fetch(`${mock.url}/__mock/mode`)).status).toBe(405);
      expect((await fetch(`${mock.url}/__mock/nothing`)).status).toBe(404);
      expect(mock.config().mode).toBe('ok');
      expect(mock.stats().total).toBe(0);
    });

    it('validates settings given in code', async () => {
      expect(() => mock.configure({ latencyMs: -5 })).toThrow(RangeError);
      expect(() => mock.setMode('nope' as never)).toThrow(RangeError);
      await expect(mock.waitFor(() => false, 20)).rejects.toThrow(/not met/);
    });
  });

  describe('bad input', () => {
    it('answers malformed JSON with 400 in the route family shape', async () => {
      const openai = await post('/v1/chat/completions', '{"messages": [');
      expect(openai.status).toBe(400);
      expect(await openai.json()).toMatchObject({ error: { type: 'invalid_request_error', param: null } });
      const llama = await post('/completion', 'not json');
      expect(llama.status).toBe(400);
      expect(await llama.json()).toMatchObject({ error: { code: 400, type: 'invalid_request_error' } });
      expect((await post('/v1/chat/completions', '[1,2]')).status).toBe(400);
      expect((await post('/v1/chat/completions', { messages: [] })).status).toBe(400);
      expect(mock.calls().every((c) => c.outcome === 'bad_request')).toBe(true);
    });

    it('answers an oversized body with 413', async () => {
      const small = await startMockProvider({ maxBodyBytes: 1024 });
      try {
        const response = await fetch(`${small.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(64 * 1024) }] }),
        });
        expect(response.status).toBe(413);
        expect(await response.json()).toMatchObject({ error: { code: 'request_too_large' } });
        // The connection stays usable after the oversized upload.
        expect((await fetch(`${small.url}/v1/models`)).status).toBe(200);
      } finally {
        await small.close();
      }
    });

    it('answers unknown routes and wrong methods with the llama.cpp 404', async () => {
      for (const response of [await fetch(`${mock.url}/v2/whatever`), await fetch(`${mock.url}/v1/chat/completions`)]) {
        expect(response.status).toBe(404);
        expect(await response.json()).toEqual({
          error: { code: 404, message: 'File Not Found', type: 'not_found_error' },
        });
      }
      expect(mock.stats()).toMatchObject({ total: 0, notFound: 2 });
    });
  });
});

describe('mock provider lifecycle', () => {
  let mock: MockProvider | undefined;

  afterEach(async () => {
    await mock?.close();
    mock = undefined;
  });

  it('streams in order under latency and jitter', async () => {
    mock = await startMockProvider({ latencyMs: 20, latencyJitterMs: 10, streamChunkDelayMs: 2 });
    const response = await fetch(`${mock.url}/completion`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'one two three four', stream: true }),
    });
    const { text } = await readAll(response);
    const chunks = dataPayloads(text).map(parse);
    expect(chunks.map((c) => c.tokens_predicted)).toEqual([1, 2, 3, 4, 5, 5]);
  });

  it('binds an ephemeral port on 127.0.0.1 and closes idempotently', async () => {
    mock = await startMockProvider();
    expect(mock.url).toBe(`http://127.0.0.1:${mock.port}`);
    expect(mock.port).toBeGreaterThan(0);
    await Promise.all([mock.close(), mock.close()]);
    await expect(fetch(`${mock.url}/health`)).rejects.toThrow();
  });
});
