import { describe, expect, it } from '@jest/globals';
import { ApiError } from '../common/api-error.js';
import { chatResponseToResponses, chatStreamToResponses, responsesRequestToChat } from './responses-chat.js';

function param(fn: () => unknown): string | null {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ApiError);
    return (error as ApiError).param;
  }
  throw new Error('expected a 400');
}

describe('Responses API -> chat completions', () => {
  it('maps input items, instructions, function tools, tool choice and the output limit', () => {
    expect(
      responsesRequestToChat({
        model: 'm',
        instructions: 'be brief',
        max_output_tokens: 20,
        store: true,
        tools: [{ type: 'function', name: 'f', parameters: { type: 'object' }, strict: true }],
        tool_choice: { type: 'function', name: 'f' },
        input: [
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'look ' },
              { type: 'input_image', image_url: 'https://x/y.png' },
            ],
          },
          { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{"a":1}' },
          { type: 'function_call', call_id: 'c2', name: 'f', arguments: '{"a":2}' },
          { type: 'function_call_output', call_id: 'c1', output: 'one' },
          { type: 'function_call_output', call_id: 'c2', output: 'two' },
          { type: 'reasoning', summary: [] },
          { role: 'developer', content: 'dev' },
        ],
        stream: true,
      }),
    ).toEqual({
      model: 'm',
      max_tokens: 20,
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' }, strict: true } }],
      tool_choice: { type: 'function', function: { name: 'f' } },
      stream: true,
      stream_options: { include_usage: true },
      messages: [
        { role: 'system', content: 'be brief' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look ' },
            { type: 'image_url', image_url: { url: 'https://x/y.png' } },
          ],
        },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } },
            { id: 'c2', type: 'function', function: { name: 'f', arguments: '{"a":2}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'c1', content: 'one' },
        { role: 'tool', tool_call_id: 'c2', content: 'two' },
        { role: 'system', content: 'dev' },
      ],
    });
  });

  it('refuses by name what chat completions cannot carry', () => {
    expect(param(() => responsesRequestToChat({ input: 'hi', previous_response_id: 'r' }))).toBe(
      'previous_response_id',
    );
    expect(param(() => responsesRequestToChat({ input: 'hi', reasoning: { effort: 'high' } }))).toBe('reasoning');
    expect(param(() => responsesRequestToChat({ input: 'hi', tools: [{ type: 'web_search' }] }))).toBe('tools[0]');
    expect(param(() => responsesRequestToChat({ input: [{ type: 'item_reference', id: 'x' }] }))).toBe('input[0]');
    expect(
      param(() =>
        responsesRequestToChat({ input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'f' }] }] }),
      ),
    ).toBe('input[0].content[0]');
    expect(param(() => responsesRequestToChat({}))).toBe('input');
  });

  it('answers with message and function_call items, usage, and incomplete when capped', () => {
    const response = chatResponseToResponses({
      id: 'x1',
      model: 'm',
      created: 5,
      choices: [
        {
          finish_reason: 'tool_calls',
          message: { content: null, tool_calls: [{ id: 'c1', function: { name: 'f', arguments: '{}' } }] },
        },
      ],
      usage: { prompt_tokens: 3, completion_tokens: 2 },
    });
    expect(response).toMatchObject({
      id: 'resp_x1',
      object: 'response',
      status: 'completed',
      output: [{ type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' }],
      usage: { input_tokens: 3, output_tokens: 2, total_tokens: 5 },
    });
    const capped = chatResponseToResponses({
      id: 'x2',
      choices: [{ finish_reason: 'length', message: { content: 'ab' } }],
    });
    expect(capped).toMatchObject({
      status: 'incomplete',
      output: [{ type: 'message', content: [{ type: 'output_text', text: 'ab' }] }],
    });
  });

  it('streams the Responses events in order, with sequence numbers', () => {
    const translator = chatStreamToResponses();
    const chunk = (delta: object, finish: string | null = null) => ({
      data: JSON.stringify({ id: 'x', model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] }),
    });
    let text = '';
    for (const event of [
      chunk({ role: 'assistant', content: '' }),
      chunk({ content: 'He' }),
      chunk({ content: 'llo' }),
      chunk({}, 'stop'),
      { data: JSON.stringify({ id: 'x', choices: [], usage: { prompt_tokens: 1, completion_tokens: 2 } }) },
      { data: '[DONE]' },
    ]) {
      text += translator.onEvent(event);
    }
    expect(translator.onEnd()).toBe('');
    const events = text
      .split('\n\n')
      .filter(Boolean)
      .map((block) => JSON.parse(/^data: (.*)$/m.exec(block)![1]));
    expect(events.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.at(-1).response).toMatchObject({
      status: 'completed',
      usage: { input_tokens: 1, output_tokens: 2 },
      output: [{ content: [{ text: 'Hello' }] }],
    });
  });
});
