import { describe, expect, it } from '@jest/globals';
import { ApiError } from '../common/api-error.js';
import {
  anthropicRequestToOpenAI,
  anthropicResponseToOpenAI,
  anthropicStreamToOpenAI,
  openAIRequestToAnthropic,
  openAIResponseToAnthropic,
  openAIStreamToAnthropic,
} from './anthropic-openai.js';
import type { SseTranslator } from './sse.js';

type Json = Record<string, unknown>;

/** The 400 a translation throws, as `{ param, message }`. */
function refusal(fn: () => unknown): { param: string | null; message: string } {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).status).toBe(400);
    return { param: (error as ApiError).param, message: (error as ApiError).message };
  }
  throw new Error('expected a 400');
}

/** Feeds SSE `data` payloads (and optional event names) through a translator; returns the parsed output events. */
function run(
  translator: SseTranslator,
  events: Array<[string | undefined, unknown]>,
): Array<{ event?: string; data: unknown }> {
  let text = '';
  for (const [event, data] of events) {
    text += translator.onEvent({ event, data: typeof data === 'string' ? data : JSON.stringify(data) });
  }
  const end = translator.onEnd();
  if (end instanceof Error) throw end;
  text += end;
  return text
    .split('\n\n')
    .filter(Boolean)
    .map((block) => {
      const event = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)![1];
      return { event, data: data === '[DONE]' ? data : JSON.parse(data) };
    });
}

const WEATHER = { type: 'object', properties: { city: { type: 'string' } } };

describe('Anthropic request -> OpenAI chat', () => {
  it('maps tools, tool_choice, tool_use and tool_result blocks, images, metadata.user_id and stop sequences', () => {
    const request = anthropicRequestToOpenAI({
      model: 'm',
      max_tokens: 50,
      system: [{ type: 'text', text: 'be brief', cache_control: { type: 'ephemeral' } }],
      stop_sequences: ['END'],
      tools: [{ name: 'get_weather', description: 'Weather', input_schema: WEATHER }],
      tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
      metadata: { user_id: 'u-1' },
      thinking: { type: 'disabled' },
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is this? ' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBOR' } },
          ],
        },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'hmm', signature: 's' },
            { type: 'text', text: 'Let me check.' },
            { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'sunny' }] },
            { type: 'text', text: 'Thanks' },
          ],
        },
      ],
    });
    expect(request).toEqual({
      model: 'm',
      max_tokens: 50,
      stop: ['END'],
      user: 'u-1',
      tools: [{ type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: WEATHER } }],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      parallel_tool_calls: false,
      messages: [
        { role: 'system', content: 'be brief' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is this? ' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBOR' } },
          ],
        },
        {
          role: 'assistant',
          content: 'Let me check.',
          tool_calls: [
            { id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'toolu_1', content: 'sunny' },
        { role: 'user', content: 'Thanks' },
      ],
    });
  });

  it('maps tool_choice any/auto/none', () => {
    const base = { messages: [{ role: 'user', content: 'hi' }] };
    expect(anthropicRequestToOpenAI({ ...base, tool_choice: { type: 'any' } }).tool_choice).toBe('required');
    expect(anthropicRequestToOpenAI({ ...base, tool_choice: { type: 'auto' } }).tool_choice).toBe('auto');
    expect(anthropicRequestToOpenAI({ ...base, tool_choice: { type: 'none' } }).tool_choice).toBe('none');
  });

  it('refuses with a 400 naming the field whatever has no counterpart, instead of dropping it', () => {
    const base = { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] };
    expect(refusal(() => anthropicRequestToOpenAI({ ...base, top_k: 5 })).param).toBe('top_k');
    expect(
      refusal(() => anthropicRequestToOpenAI({ ...base, thinking: { type: 'enabled', budget_tokens: 1024 } })).param,
    ).toBe('thinking');
    expect(refusal(() => anthropicRequestToOpenAI({ ...base, metadata: { user_id: 'u', tier: 'x' } })).param).toBe(
      'metadata.tier',
    );
    expect(refusal(() => anthropicRequestToOpenAI({ ...base, service_tier: 'auto' })).param).toBe('service_tier');
    expect(
      refusal(() => anthropicRequestToOpenAI({ ...base, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }))
        .param,
    ).toBe('tools[0]');
    const document = { role: 'user', content: [{ type: 'document', source: { type: 'text', data: 'x' } }] };
    expect(refusal(() => anthropicRequestToOpenAI({ ...base, messages: [document] })).param).toBe(
      'messages[0].content[0]',
    );
    expect(refusal(() => anthropicRequestToOpenAI({ model: 'm' })).param).toBe('messages');
    const toolImage = {
      role: 'user',
      content: [
        {
          type: 'tool_result',
          tool_use_id: 't',
          content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'x' } }],
        },
      ],
    };
    expect(refusal(() => anthropicRequestToOpenAI({ ...base, messages: [toolImage] })).param).toBe(
      'messages[0].content[0].content[0]',
    );
  });
});

describe('OpenAI answer -> Anthropic', () => {
  it('maps tool calls, reasoning, stop reasons and usage (cached tokens apart)', () => {
    const message = openAIResponseToAnthropic({
      id: 'chatcmpl-1',
      model: 'm',
      choices: [
        {
          finish_reason: 'tool_calls',
          message: {
            role: 'assistant',
            content: null,
            reasoning_content: 'thinking',
            tool_calls: [
              { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
            ],
          },
        },
      ],
      usage: { prompt_tokens: 30, completion_tokens: 7, prompt_tokens_details: { cached_tokens: 20 } },
    });
    expect(message).toMatchObject({
      id: 'msg_chatcmpl-1',
      stop_reason: 'tool_use',
      content: [
        { type: 'thinking', thinking: 'thinking' },
        { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } },
      ],
      usage: { input_tokens: 10, cache_read_input_tokens: 20, output_tokens: 7 },
    });
  });

  it('streams text, then each tool call as a tool_use block with input_json_delta fragments', () => {
    const chunk = (delta: Json, finish: string | null = null, usage?: Json) => [
      undefined,
      {
        id: 'c1',
        model: 'm',
        choices: usage ? [] : [{ index: 0, delta, finish_reason: finish }],
        ...(usage ? { usage } : {}),
      },
    ];
    const events = run(openAIStreamToAnthropic(), [
      chunk({ role: 'assistant', content: '' }),
      chunk({ content: 'Checking' }),
      chunk({
        tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '' } }],
      }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
      chunk({}, 'tool_calls'),
      chunk({}, null, { prompt_tokens: 9, completion_tokens: 4 }),
      [undefined, '[DONE]'],
    ] as Array<[string | undefined, unknown]>);
    expect(events.map((e) => e.event)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    expect(events[4].data).toMatchObject({
      index: 1,
      content_block: { type: 'tool_use', id: 'call_1', name: 'get_weather', input: {} },
    });
    expect(events[5].data).toMatchObject({ index: 1, delta: { type: 'input_json_delta', partial_json: '{"city":' } });
    expect(events[8].data).toMatchObject({
      delta: { stop_reason: 'tool_use' },
      usage: { input_tokens: 9, output_tokens: 4 },
    });
  });
});

describe('OpenAI request -> Anthropic, and back', () => {
  it('maps tools, tool calls, tool results (merged into one user message) and images', () => {
    const request = openAIRequestToAnthropic({
      model: 'claude',
      messages: [
        { role: 'system', content: 'sys' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look' },
            { type: 'image_url', image_url: { url: 'https://x/y.png' } },
          ],
        },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
        },
        { role: 'tool', tool_call_id: 'c1', content: 'r1' },
        { role: 'user', content: 'and?' },
      ],
      tools: [{ type: 'function', function: { name: 'f', parameters: WEATHER } }],
      tool_choice: 'required',
      parallel_tool_calls: false,
      user: 'u',
    });
    expect(request).toEqual({
      model: 'claude',
      max_tokens: 4096,
      system: 'sys',
      metadata: { user_id: 'u' },
      tools: [{ name: 'f', input_schema: WEATHER }],
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look' },
            { type: 'image', source: { type: 'url', url: 'https://x/y.png' } },
          ],
        },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'c1', name: 'f', input: { a: 1 } }] },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'c1', content: 'r1' },
            { type: 'text', text: 'and?' },
          ],
        },
      ],
    });
    expect(refusal(() => openAIRequestToAnthropic({ messages: [], seed: 3 })).param).toBe('seed');
    expect(
      refusal(() => openAIRequestToAnthropic({ messages: [], response_format: { type: 'json_object' } })).param,
    ).toBe('response_format');
    expect(refusal(() => openAIRequestToAnthropic({ messages: [], n: 2 })).param).toBe('n');
  });

  it('maps tool_use answers and streamed tool_use blocks to tool calls', () => {
    const answer = anthropicResponseToOpenAI({
      id: 'msg_1',
      model: 'claude',
      stop_reason: 'tool_use',
      content: [{ type: 'tool_use', id: 'toolu_1', name: 'f', input: { a: 1 } }],
      usage: { input_tokens: 3, cache_read_input_tokens: 4, output_tokens: 2 },
    });
    expect(answer).toMatchObject({
      choices: [
        {
          finish_reason: 'tool_calls',
          message: { content: null, tool_calls: [{ id: 'toolu_1', function: { name: 'f', arguments: '{"a":1}' } }] },
        },
      ],
      usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9, prompt_tokens_details: { cached_tokens: 4 } },
    });

    const events = run(anthropicStreamToOpenAI(false), [
      [
        'message_start',
        { type: 'message_start', message: { id: 'msg_1', model: 'claude', usage: { input_tokens: 3 } } },
      ],
      [
        'content_block_start',
        {
          type: 'content_block_start',
          index: 0,
          content_block: { type: 'tool_use', id: 'toolu_1', name: 'f', input: {} },
        },
      ],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{"a":' } },
      ],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '1}' } },
      ],
      ['content_block_stop', { type: 'content_block_stop', index: 0 }],
      ['message_delta', { type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 2 } }],
      ['message_stop', { type: 'message_stop' }],
    ]);
    const deltas = events.filter((e) => e.data !== '[DONE]').map((e) => ((e.data as Json).choices as Json[])[0]);
    expect(deltas[1]).toMatchObject({
      delta: { tool_calls: [{ index: 0, id: 'toolu_1', function: { name: 'f', arguments: '' } }] },
    });
    expect(deltas[2]).toMatchObject({ delta: { tool_calls: [{ index: 0, function: { arguments: '{"a":' } }] } });
    expect(deltas.at(-1)).toMatchObject({ finish_reason: 'tool_calls' });
    expect(events.at(-1)!.data).toBe('[DONE]');
  });
});
