import {
  anthropicUsage,
  argumentsOf,
  openAIUsage,
  toAnthropicStop,
  toOpenAIStop,
  type Json,
} from './anthropic-openai-common.js';

export function openAIResponseToAnthropic(response: Json): Json {
  const choice = ((response.choices as Json[] | undefined) ?? [])[0] ?? {};
  const message = (choice.message as Json | undefined) ?? {};
  const content: Json[] = [];
  if (typeof message.reasoning_content === 'string' && message.reasoning_content !== '') {
    content.push({ type: 'thinking', thinking: message.reasoning_content, signature: '' });
  }
  const toolCalls = (message.tool_calls as Json[] | undefined) ?? [];
  const text = typeof message.content === 'string' ? message.content : '';
  if (text !== '' || toolCalls.length === 0) content.push({ type: 'text', text });
  for (const call of toolCalls) {
    const fn = (call.function as Json | undefined) ?? {};
    content.push({ type: 'tool_use', id: call.id, name: fn.name, input: argumentsOf(fn.arguments) });
  }
  return {
    id: `msg_${String(response.id ?? '')}`,
    type: 'message',
    role: 'assistant',
    model: response.model,
    content,
    stop_reason: toAnthropicStop(choice.finish_reason) ?? 'end_turn',
    stop_sequence: null,
    usage: anthropicUsage(response.usage as Json | undefined),
  };
}

export function anthropicResponseToOpenAI(response: Json): Json {
  const blocks = (response.content as Json[] | undefined) ?? [];
  const text = blocks
    .filter((b) => b.type === 'text')
    .map((b) => String(b.text ?? ''))
    .join('');
  const thinking = blocks
    .filter((b) => b.type === 'thinking')
    .map((b) => String(b.thinking ?? ''))
    .join('');
  const toolCalls = blocks
    .filter((b) => b.type === 'tool_use')
    .map((b) => ({ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) } }));
  const message: Json = {
    role: 'assistant',
    content: toolCalls.length > 0 && text === '' ? null : text,
    refusal: null,
  };
  if (thinking) message.reasoning_content = thinking;
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  return {
    id: `chatcmpl-${String(response.id ?? '')}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: response.model,
    choices: [{ index: 0, message, finish_reason: toOpenAIStop(response.stop_reason) ?? 'stop', logprobs: null }],
    usage: openAIUsage(response.usage as Json | undefined),
  };
}
