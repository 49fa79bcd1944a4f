import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Anthropic from '@anthropic-ai/sdk';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { generateText, streamText } from 'ai';
import OpenAI from 'openai';
import { startLlamaServer, type LlamaServer } from '../support/llama-server.js';
import { gatewayInFront, type GatewayInFront } from './support.js';

/**
 * Today's clients against a real llama-server, directly and through the
 * gateway, changing nothing but the base URL: the official openai SDK (chat,
 * streaming helpers, the Responses API), @anthropic-ai/sdk (messages, stream,
 * countTokens), the Vercel AI SDK (its default Responses model and .chat) and
 * LangChain. Sampling is deterministic (temperature 0), so each client must
 * get the same text both ways. What the test model cannot do (tool calls,
 * structured output) is covered against the simulated provider in
 * test/gateway/sdk-clients.e2e-spec.ts.
 */

const KEY = 'sk-unused';
const MESSAGES = [{ role: 'user' as const, content: 'Hi' }];

describe('clients against llama-server, direct and through the gateway', () => {
  let server: LlamaServer;
  let gateway: GatewayInFront;
  // Each client is built twice: [direct, through the gateway].
  let bases: string[];

  beforeAll(async () => {
    server = await startLlamaServer({ ctx: 512 });
    gateway = await gatewayInFront(server.url, ['--no-dedup']);
    bases = [server.url, gateway.url];
  }, 60_000);
  afterAll(async () => {
    await gateway?.close();
    await server?.close();
  });

  /** Runs `use` against both, returning [direct, gateway]. */
  function both<T>(use: (base: string) => Promise<T>): Promise<T[]> {
    return Promise.all(bases.map((base) => use(base)));
  }

  it('openai: chat, plain and with the streaming helper', async () => {
    const plain = await both(async (base) => {
      const answer = await new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY }).chat.completions.create({
        model: 'any',
        messages: MESSAGES,
        max_tokens: 4,
        temperature: 0,
      });
      return {
        text: answer.choices[0].message.content,
        finish: answer.choices[0].finish_reason,
        usage: answer.usage?.completion_tokens,
      };
    });
    expect(plain[1]).toEqual(plain[0]);
    expect(plain[1]).toMatchObject({ text: expect.any(String), finish: 'length', usage: 4 });

    const streamed = await both(async (base) => {
      const stream = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY }).chat.completions.stream({
        model: 'any',
        messages: MESSAGES,
        max_tokens: 4,
        temperature: 0,
        stream_options: { include_usage: true },
      });
      let deltas = '';
      stream.on('content', (delta) => (deltas += delta));
      const final = await stream.finalChatCompletion();
      return { deltas, text: final.choices[0].message.content, usage: final.usage?.total_tokens };
    });
    expect(streamed[1]).toEqual(streamed[0]);
    expect(streamed[1].deltas).toBe(plain[0].text);
  });

  it('openai: legacy completions, plain and streamed', async () => {
    const result = await both(async (base) => {
      const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY });
      const plain = await client.completions.create({ model: 'any', prompt: 'Hello', max_tokens: 3, temperature: 0 });
      let streamed = '';
      for await (const chunk of await client.completions.create({
        model: 'any',
        prompt: 'Hello',
        max_tokens: 3,
        temperature: 0,
        stream: true,
      })) {
        streamed += chunk.choices[0]?.text ?? '';
      }
      return { plain: plain.choices[0].text, streamed };
    });
    expect(result[1]).toEqual(result[0]);
    expect(result[1].streamed).toBe(result[1].plain);
  });

  it('openai: responses.create, plain and streamed', async () => {
    const result = await both(async (base) => {
      const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY });
      const plain = await client.responses.create({ model: 'any', input: 'Hi', max_output_tokens: 3, temperature: 0 });
      const types: string[] = [];
      let streamed = '';
      for await (const event of await client.responses.create({
        model: 'any',
        input: 'Hi',
        max_output_tokens: 3,
        temperature: 0,
        stream: true,
      })) {
        types.push(event.type);
        if (event.type === 'response.output_text.delta') streamed += event.delta;
      }
      return { text: plain.output_text, status: plain.status, streamed, types };
    });
    expect(result[1]).toEqual(result[0]);
    expect(result[1].streamed).toBe(result[1].text);
    expect(result[1].types.at(-1)).toBe('response.completed');
  });

  it("openai: the responses.stream() helper fails the same way both ways (this llama-server's events lack output_index)", async () => {
    const outcomes = await both((base) =>
      new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY }).responses
        .stream({ model: 'any', input: 'Hi', max_output_tokens: 3, temperature: 0 })
        .finalResponse()
        .then(
          (r) => `ok: ${r.output_text}`,
          (error: Error) => `failed: ${error.message}`,
        ),
    );
    expect(outcomes[1]).toBe(outcomes[0]);
  });

  it('anthropic: messages, stream and countTokens', async () => {
    const result = await both(async (base) => {
      const client = new Anthropic({ baseURL: base, apiKey: KEY });
      // temperature is not in this SDK's request types any more; the server still reads it.
      const params = {
        model: 'any',
        max_tokens: 3,
        temperature: 0,
        messages: MESSAGES,
      } as Anthropic.MessageCreateParamsNonStreaming;
      const message = await client.messages.create(params);
      const final = await client.messages.stream(params).finalMessage();
      const counted = await client.messages.countTokens({ model: 'any', messages: MESSAGES });
      return {
        text: message.content[0].type === 'text' ? message.content[0].text : null,
        stop: message.stop_reason,
        streamedText: final.content[0].type === 'text' ? final.content[0].text : null,
        streamedStop: final.stop_reason,
        counted: counted.input_tokens,
      };
    });
    expect(result[1]).toEqual(result[0]);
    expect(result[1]).toMatchObject({ stop: 'max_tokens', streamedStop: 'max_tokens', counted: expect.any(Number) });
    expect(result[1].streamedText).toBe(result[1].text);
  });

  it('Vercel AI SDK: the default (Responses) model and the .chat model, generateText and streamText', async () => {
    for (const pick of ['responses', 'chat'] as const) {
      const result = await both(async (base) => {
        const provider = createOpenAI({ baseURL: `${base}/v1`, apiKey: KEY });
        const model = pick === 'responses' ? provider('any') : provider.chat('any');
        const { text } = await generateText({ model, prompt: 'Hi', maxOutputTokens: 3, temperature: 0 });
        const streamed = streamText({ model, prompt: 'Hi', maxOutputTokens: 3, temperature: 0 });
        let collected = '';
        for await (const delta of streamed.textStream) collected += delta;
        return { text, collected };
      });
      expect({ pick, ...result[1] }).toEqual({ pick, ...result[0] });
      expect(result[1].collected).toBe(result[1].text);
      expect(result[1].text.length).toBeGreaterThan(0);
    }
  });

  it('LangChain ChatOpenAI: invoke and stream', async () => {
    const result = await both(async (base) => {
      const chat = new ChatOpenAI({
        model: 'any',
        apiKey: KEY,
        temperature: 0,
        maxTokens: 3,
        configuration: { baseURL: `${base}/v1` },
      });
      const answer = await chat.invoke('Hi');
      let streamed = '';
      for await (const chunk of await chat.stream('Hi')) streamed += String(chunk.content);
      return { text: answer.content, streamed };
    });
    expect(result[1]).toEqual(result[0]);
    expect(result[1].streamed).toBe(result[1].text);
  });

  it('an error reaches the SDK the same way: context overflow is a 400 with the server message', async () => {
    const errors = await both(async (base) =>
      new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY, maxRetries: 0 }).chat.completions
        .create({ model: 'any', messages: [{ role: 'user', content: 'ab '.repeat(400) }] })
        .then(
          () => undefined,
          (error: InstanceType<typeof OpenAI.APIError>) => ({
            status: error.status,
            message: error.message,
            type: error.type,
          }),
        ),
    );
    expect(errors[1]).toEqual(errors[0]);
    expect(errors[1]).toMatchObject({ status: 400, type: 'exceed_context_size_error' });
  });
});
