import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { embeddingFor } from '../../apps/mock-provider/src/index.js';
import { PLATFORMS } from '../support/platforms.js';
import {
  postJson,
  send,
  sseData,
  startGateway,
  uniquePrompt,
  type GatewayUnderTest,
} from '../support/gateway-harness.js';

/**
 * Every route the gateway serves, against every provider kind, through the
 * official SDKs (defaults untouched but baseURL and apiKey) on both platforms.
 * The mock answers `Echo: <last user message>`, one word per stream chunk;
 * its token counts are whitespace-separated words.
 */

const CLIENT_KEY = 'sk-client-round-trip';

/** Words of `Echo: <prompt>`: the mock's completion token count for an uncapped answer. */
const echoWords = (prompt: string) => `Echo: ${prompt}`.split(/\s+/).filter(Boolean).length;
const words = (text: string) => text.split(/\s+/).filter(Boolean).length;

function openaiClient(g: GatewayUnderTest): OpenAI {
  return new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: CLIENT_KEY });
}
function anthropicClient(g: GatewayUnderTest): Anthropic {
  return new Anthropic({ baseURL: g.gatewayUrl, apiKey: CLIENT_KEY });
}

/** Non-stream and stream chat via the openai SDK; `what` names the provider for messages. */
function openAIChatTests(get: () => GatewayUnderTest, provider: string) {
  it(`chat (non-stream): text, finish_reason stop/length and usage, via --provider ${provider}`, async () => {
    const client = openaiClient(get());
    const prompt = uniquePrompt('chat plain one two');
    const answer = await client.chat.completions.create({
      model: 'mock-model',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: prompt },
      ],
    });
    expect(answer.object).toBe('chat.completion');
    expect(answer.choices[0].message.role).toBe('assistant');
    expect(answer.choices[0].message.content).toBe(`Echo: ${prompt}`);
    expect(answer.choices[0].finish_reason).toBe('stop');
    expect(answer.usage).toMatchObject({
      prompt_tokens: words(`be brief ${prompt}`),
      completion_tokens: echoWords(prompt),
      total_tokens: words(`be brief ${prompt}`) + echoWords(prompt),
    });

    const capped = await client.chat.completions.create({
      model: 'mock-model',
      max_tokens: 2,
      messages: [{ role: 'user', content: uniquePrompt('capped answer words') }],
    });
    expect(capped.choices[0].finish_reason).toBe('length');
    expect(capped.choices[0].message.content?.split(/\s+/).filter(Boolean)).toHaveLength(2);
    expect(capped.usage?.completion_tokens).toBe(2);
  });

  it(`chat (stream, include_usage): every delta, mapped finish_reason, then the usage chunk, via --provider ${provider}`, async () => {
    const client = openaiClient(get());
    const prompt = uniquePrompt('chat stream alpha beta');
    const stream = await client.chat.completions.create({
      model: 'mock-model',
      messages: [{ role: 'user', content: prompt }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    const finishReasons: string[] = [];
    const usages: OpenAI.CompletionUsage[] = [];
    let chunksAfterUsage = 0;
    for await (const chunk of stream) {
      expect(chunk.object).toBe('chat.completion.chunk');
      if (usages.length > 0) chunksAfterUsage++;
      for (const choice of chunk.choices) {
        text += choice.delta.content ?? '';
        if (choice.finish_reason) finishReasons.push(choice.finish_reason);
      }
      if (chunk.usage) {
        expect(chunk.choices).toEqual([]);
        usages.push(chunk.usage);
      }
    }
    expect(text).toBe(`Echo: ${prompt}`);
    expect(finishReasons).toEqual(['stop']);
    expect(usages).toHaveLength(1);
    expect(chunksAfterUsage).toBe(0);
    expect(usages[0]).toMatchObject({ prompt_tokens: words(prompt), completion_tokens: echoWords(prompt) });

    const capped = await client.chat.completions.create({
      model: 'mock-model',
      max_tokens: 3,
      messages: [{ role: 'user', content: uniquePrompt('capped stream words here') }],
      stream: true,
    });
    const reasons: string[] = [];
    for await (const chunk of capped) for (const c of chunk.choices) if (c.finish_reason) reasons.push(c.finish_reason);
    expect(reasons).toEqual(['length']);
  });
}

function anthropicMessagesTests(get: () => GatewayUnderTest, provider: string) {
  it(`messages (non-stream): text, stop_reason end_turn/max_tokens and usage, via --provider ${provider}`, async () => {
    const client = anthropicClient(get());
    const prompt = uniquePrompt('messages plain gamma');
    const message = await client.messages.create({
      model: 'mock-model',
      max_tokens: 256,
      system: 'be brief',
      messages: [{ role: 'user', content: prompt }],
    });
    expect(message.type).toBe('message');
    expect(message.role).toBe('assistant');
    expect(message.content).toHaveLength(1);
    expect(message.content[0]).toMatchObject({ type: 'text', text: `Echo: ${prompt}` });
    expect(message.stop_reason).toBe('end_turn');
    expect(message.usage.input_tokens).toBe(words(`be brief ${prompt}`));
    expect(message.usage.output_tokens).toBe(echoWords(prompt));

    const capped = await client.messages.create({
      model: 'mock-model',
      max_tokens: 2,
      messages: [{ role: 'user', content: uniquePrompt('capped message words') }],
    });
    expect(capped.stop_reason).toBe('max_tokens');
    expect(capped.usage.output_tokens).toBe(2);
    expect(capped.content[0].type === 'text' && capped.content[0].text.split(/\s+/).filter(Boolean)).toHaveLength(2);
  });

  it(`messages (stream): events in order, text, stop_reason and usage, via --provider ${provider}`, async () => {
    const client = anthropicClient(get());
    const prompt = uniquePrompt('messages stream delta');
    const stream = await client.messages.create({
      model: 'mock-model',
      max_tokens: 256,
      messages: [{ role: 'user', content: prompt }],
      stream: true,
    });
    const types: string[] = [];
    let text = '';
    let stopReason: string | null | undefined;
    let outputTokens: number | undefined;
    let inputTokens: number | null | undefined;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'message_start') inputTokens = event.message.usage.input_tokens;
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
      if (event.type === 'message_delta') {
        stopReason = event.delta.stop_reason;
        outputTokens = event.usage.output_tokens;
        // Usage in message_delta is cumulative; a translated stream learns the prompt's size only at the end.
        inputTokens = event.usage.input_tokens ?? inputTokens;
      }
    }
    expect(types[0]).toBe('message_start');
    expect(types[1]).toBe('content_block_start');
    expect(types.at(-1)).toBe('message_stop');
    expect(types.at(-2)).toBe('message_delta');
    expect(text).toBe(`Echo: ${prompt}`);
    expect(stopReason).toBe('end_turn');
    expect(outputTokens).toBe(echoWords(prompt));
    expect(inputTokens).toBe(words(prompt));

    // The SDK's own accumulator agrees (and sees max_tokens when the answer is capped).
    const capped = await client.messages
      .stream({
        model: 'mock-model',
        max_tokens: 2,
        messages: [{ role: 'user', content: uniquePrompt('capped streamed words') }],
      })
      .finalMessage();
    expect(capped.stop_reason).toBe('max_tokens');
    expect(capped.usage.output_tokens).toBe(2);
  });
}

/** Completions, embeddings and models through the openai SDK (OpenAI-compatible and llama providers). */
function openAIOtherRouteTests(get: () => GatewayUnderTest, provider: string) {
  it(`completions (non-stream and stream) via --provider ${provider}`, async () => {
    const client = openaiClient(get());
    const prompt = uniquePrompt('complete this');
    const plain = await client.completions.create({ model: 'mock-model', prompt });
    expect(plain.object).toBe('text_completion');
    expect(plain.choices[0].text).toBe(`Echo: ${prompt}`);
    expect(plain.choices[0].finish_reason).toBe('stop');
    expect(plain.usage).toMatchObject({ prompt_tokens: words(prompt), completion_tokens: echoWords(prompt) });

    const streamed = await client.completions.create({
      model: 'mock-model',
      prompt: `${prompt} again`,
      stream: true,
      max_tokens: 3,
    });
    let text = '';
    const reasons: string[] = [];
    for await (const chunk of streamed) {
      for (const choice of chunk.choices) {
        text += choice.text;
        if (choice.finish_reason) reasons.push(choice.finish_reason);
      }
    }
    expect(text).toBe(
      `Echo: ${prompt}`
        .split(/(?<=\s)/)
        .slice(0, 3)
        .join(''),
    );
    expect(reasons).toEqual(['length']);
  });

  it(`embeddings (the SDK's default base64 encoding) via --provider ${provider}`, async () => {
    const client = openaiClient(get());
    const inputs = [uniquePrompt('embed a'), uniquePrompt('embed b')];
    const result = await client.embeddings.create({ model: 'mock-embed', input: inputs });
    expect(result.object).toBe('list');
    expect(result.data).toHaveLength(2);
    result.data.forEach((item, i) => {
      expect(item.index).toBe(i);
      const expected = embeddingFor(inputs[i]);
      expect(item.embedding).toHaveLength(expected.length);
      item.embedding.forEach((v, j) => expect(v).toBeCloseTo(expected[j], 5));
    });
  });

  it(`models via --provider ${provider}`, async () => {
    const client = openaiClient(get());
    const ids: string[] = [];
    for await (const model of client.models.list()) ids.push(model.id);
    expect(ids).toEqual(['mock-model']);
  });
}

describe.each(PLATFORMS)('round trips on %s', (platform) => {
  describe('--provider openai', () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({ flags: ['--platform', platform, '--provider', 'openai'] });
    });
    afterAll(() => g.close());
    const get = () => g;

    openAIChatTests(get, 'openai');
    openAIOtherRouteTests(get, 'openai');
    anthropicMessagesTests(get, 'openai (translated from OpenAI chat)');

    it('translated Anthropic requests reach the provider as OpenAI chat', async () => {
      const before = g.provider.stats().byRoute['/v1/chat/completions'] ?? 0;
      await anthropicClient(g).messages.create({
        model: 'mock-model',
        max_tokens: 16,
        messages: [{ role: 'user', content: uniquePrompt('route check') }],
      });
      const stats = g.provider.stats();
      expect(stats.byRoute['/v1/chat/completions']).toBe(before + 1);
      expect(stats.byRoute['/v1/messages']).toBeUndefined();
    });

    it('answers the llama.cpp native routes with 501 and a message naming --provider llama', async () => {
      const before = g.provider.stats().total;
      const requests: Array<[string, string, unknown]> = [
        ['POST', '/completion', { prompt: 'hi' }],
        ['POST', '/tokenize', { content: 'hi' }],
        ['POST', '/detokenize', { tokens: [104, 105] }],
        ['POST', '/apply-template', { messages: [{ role: 'user', content: 'hi' }] }],
        ['GET', '/props', undefined],
      ];
      // Twice each: ten refusals in a row, more than the breaker's threshold of 5.
      for (const [method, path, body] of [...requests, ...requests]) {
        const r =
          method === 'GET' ? await send(`${g.gatewayUrl}${path}`) : await postJson(`${g.gatewayUrl}${path}`, body);
        expect({ path, status: r.status }).toEqual({ path, status: 501 });
        expect(r.json.error.message).toContain(path);
        expect(r.json.error.message).toContain('--provider llama');
        // llama.cpp's own error shape on its routes, as its server sends for a disabled endpoint.
        expect(r.json).toEqual({ error: { code: 501, message: expect.any(String), type: 'not_supported_error' } });
        expect(r.headers.get('x-should-retry')).toBe('false');
      }
      expect(g.provider.stats().total).toBe(before);
      // The gateway's own refusals say nothing about the provider: the breaker stays closed.
      const health = await send(`${g.gatewayUrl}/health`);
      expect(health.json.upstream.breaker).toBe('closed');
      const chat = await postJson(`${g.gatewayUrl}/v1/chat/completions`, {
        model: 'mock-model',
        messages: [{ role: 'user', content: uniquePrompt('after 501s') }],
      });
      expect(chat.status).toBe(200);
    });

    it('sends x-request-id (propagating a valid one, replacing an invalid one) and server-timing', async () => {
      const body = { model: 'mock-model', messages: [{ role: 'user', content: uniquePrompt('headers') }] };
      const fresh = await postJson(`${g.gatewayUrl}/v1/chat/completions`, body);
      expect(fresh.status).toBe(200);
      expect(fresh.headers.get('x-request-id')).toMatch(/^[\w.:-]{8,}$/);
      expect(fresh.headers.get('server-timing')).toMatch(/total;dur=\d+(\.\d+)?/);
      expect(fresh.headers.get('server-timing')).toMatch(/upstream;dur=\d+(\.\d+)?/);

      const propagated = await postJson(`${g.gatewayUrl}/v1/chat/completions`, body, {
        'x-request-id': 'client-trace-42.a:b',
      });
      expect(propagated.headers.get('x-request-id')).toBe('client-trace-42.a:b');
      expect(propagated.headers.get('server-timing')).toMatch(/total;dur=/);

      const hostile = await postJson(`${g.gatewayUrl}/v1/chat/completions`, body, {
        'x-request-id': 'bad id with spaces',
      });
      expect(hostile.headers.get('x-request-id')).not.toBe('bad id with spaces');
      expect(hostile.headers.get('x-request-id')).toMatch(/^[\w.:-]{8,}$/);

      // Errors and the SDK see them too.
      const error = await postJson(
        `${g.gatewayUrl}/v1/chat/completions`,
        { model: 'm' },
        { 'x-request-id': 'err-trace-1' },
      );
      expect(error.status).toBe(400);
      expect(error.headers.get('x-request-id')).toBe('err-trace-1');
      expect(error.headers.get('server-timing')).toMatch(/total;dur=/);
      const { response } = await openaiClient(g)
        .chat.completions.create({
          model: 'mock-model',
          messages: [{ role: 'user', content: uniquePrompt('sdk headers') }],
        })
        .withResponse();
      expect(response.headers.get('x-request-id')).toBeTruthy();
      expect(response.headers.get('server-timing')).toMatch(/total;dur=/);

      const streamed = await postJson(
        `${g.gatewayUrl}/v1/chat/completions`,
        { ...body, stream: true },
        { 'x-request-id': 'stream-trace-7' },
      );
      expect(streamed.headers.get('x-request-id')).toBe('stream-trace-7');
      expect(streamed.headers.get('server-timing')).toMatch(/total;dur=/);
      expect(streamed.headers.get('content-type')).toContain('text/event-stream');
    });
  });

  describe('--provider llama', () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({ flags: ['--platform', platform, '--provider', 'llama'] });
    });
    afterAll(() => g.close());
    const get = () => g;

    openAIChatTests(get, 'llama');
    openAIOtherRouteTests(get, 'llama');
    anthropicMessagesTests(get, 'llama (its own Anthropic-compatible route)');

    it('sends chat to llama-server’s own chat route (its template, not a made-up one) and messages to its /v1/messages', async () => {
      const before = g.provider.stats().byRoute;
      await openaiClient(g).chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: uniquePrompt('route') }],
      });
      await anthropicClient(g).messages.create({
        model: 'm',
        max_tokens: 8,
        messages: [{ role: 'user', content: uniquePrompt('route') }],
      });
      const after = g.provider.stats().byRoute;
      expect(after['/v1/chat/completions']).toBe((before['/v1/chat/completions'] ?? 0) + 1);
      expect(after['/v1/messages']).toBe((before['/v1/messages'] ?? 0) + 1);
      expect(after['/completion']).toBe(before['/completion']);
    });

    it('/completion (non-stream): the native answer as it is', async () => {
      const prompt = uniquePrompt('native plain');
      const r = await postJson(`${g.gatewayUrl}/completion`, { prompt, n_predict: 2 });
      expect(r.status).toBe(200);
      expect(r.json).toMatchObject({
        stop: true,
        stop_type: 'limit',
        tokens_predicted: 2,
        tokens_evaluated: words(prompt),
      });
      expect(r.json.content).toBe('Echo: ' + prompt.split(' ')[0] + ' ');
      const uncapped = await postJson(`${g.gatewayUrl}/completion`, { prompt: `${prompt} x` });
      expect(uncapped.json).toMatchObject({ content: `Echo: ${prompt} x`, stop: true, stop_type: 'eos' });
    });

    it('/completion (stream): native SSE with no [DONE], ending with the stop:true chunk', async () => {
      const prompt = uniquePrompt('native stream');
      const r = await postJson(`${g.gatewayUrl}/completion`, { prompt, stream: true });
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toContain('text/event-stream');
      expect(r.text).not.toContain('[DONE]');
      expect(r.text).not.toMatch(/^event:/m);
      const chunks = sseData(r.text).map((d) => JSON.parse(d));
      expect(chunks.length).toBeGreaterThan(2);
      const last = chunks.at(-1);
      expect(last).toMatchObject({ stop: true, content: '', stop_type: 'eos' });
      expect(chunks.slice(0, -1).every((c) => c.stop === false)).toBe(true);
      expect(chunks.map((c) => c.content).join('')).toBe(`Echo: ${prompt}`);
    });

    it('/tokenize and /detokenize round-trip', async () => {
      const content = 'héllo ✓';
      const tokens = await postJson(`${g.gatewayUrl}/tokenize`, { content });
      expect(tokens.status).toBe(200);
      expect(tokens.json.tokens).toEqual([...content].map((c) => c.codePointAt(0)));
      const pieces = await postJson(`${g.gatewayUrl}/tokenize`, { content: 'ab', with_pieces: true });
      expect(pieces.json.tokens).toEqual([
        { id: 97, piece: 'a' },
        { id: 98, piece: 'b' },
      ]);
      const text = await postJson(`${g.gatewayUrl}/detokenize`, { tokens: tokens.json.tokens });
      expect(text.status).toBe(200);
      expect(text.json).toEqual({ content });
    });

    it("/apply-template renders the prompt with the provider's own template", async () => {
      const r = await postJson(`${g.gatewayUrl}/apply-template`, {
        messages: [
          { role: 'system', content: 'sys' },
          { role: 'user', content: 'hi there' },
        ],
      });
      expect(r.status).toBe(200);
      expect(r.json.prompt).toContain('<|im_start|>');
      expect(r.json.prompt).toBe(
        '<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n',
      );
      expect(g.provider.stats().byRoute['/apply-template']).toBeGreaterThanOrEqual(1);
    });

    it('/props', async () => {
      const r = await send(`${g.gatewayUrl}/props`);
      expect(r.status).toBe(200);
      expect(r.json).toMatchObject({ total_slots: 4, build_info: 'mock', model_path: 'mock-model.gguf' });
      expect(r.json.chat_template).toContain('<|im_start|>');
      expect(r.headers.get('x-request-id')).toBeTruthy();
      expect(r.headers.get('server-timing')).toMatch(/total;dur=/);
    });
  });

  describe('--provider anthropic', () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({ flags: ['--platform', platform, '--provider', 'anthropic'] });
    });
    afterAll(() => g.close());
    const get = () => g;

    anthropicMessagesTests(get, 'anthropic (pass-through)');
    openAIChatTests(get, 'anthropic (translated to Anthropic messages)');

    it('passes Anthropic messages through, with x-api-key and anthropic-version upstream', async () => {
      const since = g.provider.calls().at(-1)?.seq ?? 0;
      const message = await anthropicClient(g).messages.create({
        model: 'claude-mock',
        max_tokens: 32,
        messages: [{ role: 'user', content: uniquePrompt('pass through') }],
      });
      expect(message.id).toMatch(/^msg_mock_\d+$/);
      expect(message.model).toBe('claude-mock');
      const calls = g.provider.calls(since);
      expect(calls).toHaveLength(1);
      expect(calls[0]).toMatchObject({ route: '/v1/messages', model: 'claude-mock' });
    });

    it('lists the models in the OpenAI shape', async () => {
      const models: OpenAI.Model[] = [];
      for await (const model of openaiClient(g).models.list()) models.push(model);
      expect(models).toEqual([
        { id: 'mock-model', object: 'model', created: expect.any(Number), owned_by: 'anthropic' },
      ]);
    });

    it('answers routes Anthropic has no equivalent for with 501, which the SDK does not retry', async () => {
      let attempts = 0;
      const openai = new OpenAI({
        baseURL: `${g.gatewayUrl}/v1`,
        apiKey: CLIENT_KEY,
        fetch: (input, init) => {
          attempts++;
          return globalThis.fetch(input, init);
        },
      });
      const before = g.provider.stats().total;
      for (const call of [
        () => openai.completions.create({ model: 'm', prompt: 'hi' }),
        () => openai.embeddings.create({ model: 'm', input: 'hi' }),
      ]) {
        await expect(call()).rejects.toMatchObject({ status: 501, code: 'not_supported' });
      }
      expect(attempts).toBe(2);
      const native = await postJson(`${g.gatewayUrl}/completion`, { prompt: 'hi' });
      expect(native.status).toBe(501);
      expect(native.json.error.message).toContain('--provider llama');
      expect(g.provider.stats().total).toBe(before);
    });

    it('translates OpenAI chat for the Anthropic provider (request goes to /v1/messages)', async () => {
      const since = g.provider.calls().at(-1)?.seq ?? 0;
      const answer = await openaiClient(g).chat.completions.create({
        model: 'claude-mock',
        messages: [{ role: 'user', content: uniquePrompt('translate me') }],
      });
      expect(answer.id).toMatch(/^chatcmpl-msg_mock_\d+$/);
      const calls = g.provider.calls(since);
      expect(calls.map((c) => c.route)).toEqual(['/v1/messages']);
    });
  });
});
