import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Anthropic from '@anthropic-ai/sdk';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import OpenAI from 'openai';
import { startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';

/**
 * Today's clients, unchanged but for their base URL, against the gateway in
 * front of the simulated provider, for what a tiny real model cannot do: tool
 * calls (the mock calls the first tool offered with arguments made from its
 * schema, and answers `Echo: <result>` once the result comes back), structured
 * output, and the Responses API in OpenAI's own shapes. The same clients run
 * against a real llama-server in test/llama/clients.llama-spec.ts.
 */

const KEY = 'sk-client-sdk';
const WEATHER = {
  type: 'object' as const,
  properties: { city: { type: 'string' } },
  required: ['city'],
  additionalProperties: false,
};

function openai(g: GatewayUnderTest): OpenAI {
  return new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: KEY });
}
function anthropic(g: GatewayUnderTest): Anthropic {
  return new Anthropic({ baseURL: g.gatewayUrl, apiKey: KEY });
}

/** The OpenAI SDK's tool round trip: the model calls the tool, the result goes back, the model answers from it. */
async function openAIToolRoundTrip(
  client: OpenAI,
  stream: boolean,
): Promise<{ call: OpenAI.ChatCompletionMessageToolCall; answer: string | null }> {
  const prompt = uniquePrompt('weather in Paris');
  const tools: OpenAI.ChatCompletionTool[] = [
    { type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: WEATHER } },
  ];
  const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: prompt }];
  const first = stream
    ? await client.chat.completions.stream({ model: 'mock-model', messages, tools }).finalChatCompletion()
    : await client.chat.completions.create({ model: 'mock-model', messages, tools });
  expect(first.choices[0].finish_reason).toBe('tool_calls');
  const call = first.choices[0].message.tool_calls![0];
  messages.push(first.choices[0].message);
  messages.push({ role: 'tool', tool_call_id: call.id, content: 'sunny, 21 C' });
  const second = stream
    ? await client.chat.completions.stream({ model: 'mock-model', messages, tools }).finalChatCompletion()
    : await client.chat.completions.create({ model: 'mock-model', messages, tools });
  expect(second.choices[0].finish_reason).toBe('stop');
  expect(JSON.parse((call as { function: { arguments: string } }).function.arguments)).toEqual({ city: prompt });
  return { call, answer: second.choices[0].message.content };
}

/** The Anthropic SDK's tool round trip. */
async function anthropicToolRoundTrip(client: Anthropic, stream: boolean) {
  const prompt = uniquePrompt('weather in Lyon');
  const tools: Anthropic.Tool[] = [{ name: 'get_weather', description: 'Weather of a city', input_schema: WEATHER }];
  const messages: Anthropic.MessageParam[] = [{ role: 'user', content: prompt }];
  const ask = () =>
    stream
      ? client.messages.stream({ model: 'mock-model', max_tokens: 64, messages, tools }).finalMessage()
      : client.messages.create({ model: 'mock-model', max_tokens: 64, messages, tools });
  const first = await ask();
  expect(first.stop_reason).toBe('tool_use');
  const use = first.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock;
  expect(use).toMatchObject({ type: 'tool_use', name: 'get_weather', input: { city: prompt } });
  messages.push({ role: 'assistant', content: first.content });
  messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'rain, 12 C' }] });
  const second = await ask();
  expect(second.stop_reason).toBe('end_turn');
  expect(second.content[0]).toMatchObject({ type: 'text', text: 'Echo: rain, 12 C' });
}

describe('official SDKs, the Vercel AI SDK and LangChain through the gateway (simulated provider)', () => {
  describe('--provider openai', () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({ flags: ['--provider', 'openai'] });
    });
    afterAll(() => g.close());

    it('openai: chat tools round trip, plain and with the streaming helper', async () => {
      for (const stream of [false, true]) {
        const { answer } = await openAIToolRoundTrip(openai(g), stream);
        expect(answer).toBe('Echo: sunny, 21 C');
      }
    });

    it('openai: structured output with chat.completions.parse', async () => {
      const completion = await openai(g).chat.completions.parse({
        model: 'mock-model',
        messages: [{ role: 'user', content: uniquePrompt('a city') }],
        response_format: { type: 'json_schema', json_schema: { name: 'place', schema: WEATHER, strict: true } },
      });
      expect(completion.choices[0].message.parsed).toEqual({ city: expect.stringContaining('a city') });
    });

    it('openai: responses.create (plain and streamed), the stream helper, and a function tool round trip', async () => {
      const client = openai(g);
      const prompt = uniquePrompt('responses api');
      const plain = await client.responses.create({ model: 'mock-model', input: prompt });
      expect(plain.output_text).toBe(`Echo: ${prompt}`);
      expect(plain.usage?.input_tokens).toBeGreaterThan(0);

      const events: string[] = [];
      let text = '';
      for await (const event of await client.responses.create({
        model: 'mock-model',
        input: `${prompt} streamed`,
        stream: true,
      })) {
        events.push(event.type);
        if (event.type === 'response.output_text.delta') text += event.delta;
      }
      expect(events[0]).toBe('response.created');
      expect(events.at(-1)).toBe('response.completed');
      expect(text).toBe(`Echo: ${prompt} streamed`);

      const helper = await client.responses.stream({ model: 'mock-model', input: `${prompt} helper` }).finalResponse();
      expect(helper.output_text).toBe(`Echo: ${prompt} helper`);

      const tools: OpenAI.Responses.FunctionTool[] = [
        { type: 'function', name: 'get_weather', parameters: WEATHER, strict: true },
      ];
      const asked = await client.responses.create({ model: 'mock-model', input: prompt, tools });
      const call = asked.output.find((o) => o.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall;
      expect(JSON.parse(call.arguments)).toEqual({ city: prompt });
      const answered = await client.responses.create({
        model: 'mock-model',
        tools,
        input: [
          { role: 'user', content: prompt },
          call,
          { type: 'function_call_output', call_id: call.call_id, output: 'snow' },
        ],
      });
      expect(answered.output_text).toBe('Echo: snow');
      expect(g.provider.stats().byRoute['/v1/responses']).toBe(5);
    });

    it('anthropic SDK (translated to chat completions): tools round trip, plain and streamed; countTokens is a 501', async () => {
      await anthropicToolRoundTrip(anthropic(g), false);
      await anthropicToolRoundTrip(anthropic(g), true);
      await expect(
        anthropic(g).messages.countTokens({ model: 'mock-model', messages: [{ role: 'user', content: 'hi' }] }),
      ).rejects.toMatchObject({ status: 501 });
    });

    it('Vercel AI SDK: the default (Responses) model and the .chat model, text, streams and a tool loop', async () => {
      const provider = createOpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: KEY });
      for (const model of [provider('mock-model'), provider.chat('mock-model')]) {
        const prompt = uniquePrompt('vercel');
        const { text } = await generateText({ model, prompt });
        expect(text).toBe(`Echo: ${prompt}`);
        const streamed = streamText({ model, prompt: `${prompt} streamed` });
        let collected = '';
        for await (const delta of streamed.textStream) collected += delta;
        expect(collected).toBe(`Echo: ${prompt} streamed`);

        const looped = await generateText({
          model,
          prompt: `${prompt} tools`,
          tools: {
            get_weather: tool({
              description: 'Weather of a city',
              inputSchema: jsonSchema<{ city: string }>(WEATHER as never),
              execute: async ({ city }) => `cloudy in ${city.length} letters`,
            }),
          },
          stopWhen: stepCountIs(3),
        });
        expect(looped.steps[0].toolCalls[0]).toMatchObject({
          toolName: 'get_weather',
          input: { city: `${prompt} tools` },
        });
        // The tool's result reached the model (the chat model gets it JSON-encoded, the Responses one as text).
        expect(looped.text.replace(/"/g, '')).toBe(`Echo: cloudy in ${`${prompt} tools`.length} letters`);
      }
    });

    it('LangChain ChatOpenAI: invoke, stream and bound tools', async () => {
      const chat = new ChatOpenAI({
        model: 'mock-model',
        apiKey: KEY,
        configuration: { baseURL: `${g.gatewayUrl}/v1` },
      });
      const prompt = uniquePrompt('langchain');
      const answer = await chat.invoke(prompt);
      expect(answer.content).toBe(`Echo: ${prompt}`);
      let streamed = '';
      for await (const chunk of await chat.stream(`${prompt} streamed`)) streamed += String(chunk.content);
      expect(streamed).toBe(`Echo: ${prompt} streamed`);
      const withTools = chat.bindTools([
        { type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: WEATHER } },
      ]);
      const called = await withTools.invoke(`${prompt} tools`);
      expect(called.tool_calls?.[0]).toMatchObject({ name: 'get_weather', args: { city: `${prompt} tools` } });
    });
  });

  describe('--provider anthropic', () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({ flags: ['--provider', 'anthropic'] });
    });
    afterAll(() => g.close());

    it('openai SDK (translated to Messages): chat tools round trip, plain and streamed', async () => {
      for (const stream of [false, true]) {
        const { answer } = await openAIToolRoundTrip(openai(g), stream);
        expect(answer).toBe('Echo: sunny, 21 C');
      }
      expect(g.provider.stats().byRoute['/v1/messages']).toBe(4);
    });

    it('anthropic SDK: tools round trip and countTokens pass through', async () => {
      await anthropicToolRoundTrip(anthropic(g), true);
      const counted = await anthropic(g).messages.countTokens({
        model: 'mock-model',
        messages: [{ role: 'user', content: 'one two three' }],
      });
      expect(counted.input_tokens).toBe(3);
    });

    it('openai: the Responses API (translated through chat completions to Messages): plain, streamed, a function tool round trip', async () => {
      const client = openai(g);
      const before = g.provider.stats().byRoute['/v1/messages'] ?? 0;
      const prompt = uniquePrompt('responses on anthropic');
      const plain = await client.responses.create({ model: 'mock-model', input: prompt, instructions: 'be brief' });
      expect(plain.output_text).toBe(`Echo: ${prompt}`);
      expect(plain.status).toBe('completed');
      expect(plain.usage).toMatchObject({ input_tokens: expect.any(Number), output_tokens: expect.any(Number) });

      const events: string[] = [];
      let text = '';
      for await (const event of await client.responses.create({
        model: 'mock-model',
        input: `${prompt} streamed`,
        stream: true,
      })) {
        events.push(event.type);
        if (event.type === 'response.output_text.delta') text += event.delta;
      }
      expect(text).toBe(`Echo: ${prompt} streamed`);
      expect(events[0]).toBe('response.created');
      expect(events.at(-1)).toBe('response.completed');
      const helper = await client.responses.stream({ model: 'mock-model', input: `${prompt} helper` }).finalResponse();
      expect(helper.output_text).toBe(`Echo: ${prompt} helper`);

      const tools: OpenAI.Responses.FunctionTool[] = [
        { type: 'function', name: 'get_weather', parameters: WEATHER, strict: true },
      ];
      for (const stream of [false, true]) {
        const asked = stream
          ? await client.responses.stream({ model: 'mock-model', input: prompt, tools }).finalResponse()
          : await client.responses.create({ model: 'mock-model', input: prompt, tools });
        const call = asked.output.find((o) => o.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall;
        expect(JSON.parse(call.arguments)).toEqual({ city: prompt });
        const answered = await client.responses.create({
          model: 'mock-model',
          tools,
          input: [
            { role: 'user', content: prompt },
            call,
            { type: 'function_call_output', call_id: call.call_id, output: 'hail' },
          ],
        });
        expect(answered.output_text).toBe('Echo: hail');
      }
      expect(g.provider.stats().byRoute['/v1/messages']).toBe(before + 7);
      expect(g.provider.stats().byRoute['/v1/responses']).toBeUndefined();
    });

    it('Vercel AI SDK: the default (Responses) model works in front of Anthropic, tool loop included', async () => {
      const model = createOpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: KEY })('mock-model');
      const prompt = uniquePrompt('vercel on anthropic');
      expect((await generateText({ model, prompt })).text).toBe(`Echo: ${prompt}`);
      let collected = '';
      for await (const delta of streamText({ model, prompt: `${prompt} streamed` }).textStream) collected += delta;
      expect(collected).toBe(`Echo: ${prompt} streamed`);
      const looped = await generateText({
        model,
        prompt: `${prompt} tools`,
        tools: {
          get_weather: tool({
            description: 'Weather of a city',
            inputSchema: jsonSchema<{ city: string }>(WEATHER as never),
            execute: async () => 'foggy',
          }),
        },
        stopWhen: stepCountIs(3),
      });
      expect(looped.text.replace(/"/g, '')).toBe('Echo: foggy');
    });

    it('what the Responses API asks that chat completions cannot carry is a 400 naming it', async () => {
      await expect(
        openai(g).responses.create({ model: 'mock-model', input: 'hi', tools: [{ type: 'web_search' } as never] }),
      ).rejects.toMatchObject({ status: 400, message: expect.stringContaining('tools[0]') });
      await expect(
        openai(g).responses.create({ model: 'mock-model', input: 'hi', previous_response_id: 'resp_1' }),
      ).rejects.toMatchObject({
        status: 400,
        message: expect.stringContaining('previous_response_id'),
      });
    });
  });
});
