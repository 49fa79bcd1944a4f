import type { EventSourceMessage } from 'eventsource-parser';
import { API_FORMATS } from '../apis/formats.js';
import {
  anthropicUsage,
  isObject,
  openAIUsage,
  toAnthropicStop,
  toOpenAIStop,
  type Json,
} from './anthropic-openai-common.js';
import { sseEvent, type SseTranslator } from './sse.js';

/** OpenAI's end marker, as its API's table says it. */
const OPENAI_END = API_FORMATS.openai.endData!;

type OpenBlock = { index: number; kind: 'text' | 'thinking' | 'tool'; tool?: number };

/**
 * OpenAI chat chunks in, Anthropic stream events out: text, reasoning and each
 * tool call become content blocks in the order they arrive; a tool call's
 * argument fragments become `input_json_delta` events.
 */
export function openAIStreamToAnthropic(): SseTranslator {
  let started = false;
  let finished = false;
  let stopReason: string | null = null;
  let usage: Json | undefined;
  let nextIndex = 0;
  let open: OpenBlock | undefined;
  const toolBlocks = new Map<number, number>();

  const close = () => {
    if (!open) return '';
    const event = sseEvent({ type: 'content_block_stop', index: open.index }, 'content_block_stop');
    open = undefined;
    return event;
  };
  const begin = (kind: OpenBlock['kind'], block: Json, tool?: number) => {
    const out = close();
    open = { index: nextIndex++, kind, tool };
    if (tool !== undefined) toolBlocks.set(tool, open.index);
    return (
      out + sseEvent({ type: 'content_block_start', index: open.index, content_block: block }, 'content_block_start')
    );
  };
  const delta = (index: number, d: Json) =>
    sseEvent({ type: 'content_block_delta', index, delta: d }, 'content_block_delta');
  const start = (chunk: Json) => {
    started = true;
    return sseEvent(
      {
        type: 'message_start',
        message: {
          id: `msg_${String(chunk.id ?? '')}`,
          type: 'message',
          role: 'assistant',
          model: chunk.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 0, output_tokens: 0 },
        },
      },
      'message_start',
    );
  };
  const finish = () =>
    close() +
    sseEvent(
      {
        type: 'message_delta',
        delta: { stop_reason: stopReason ?? 'end_turn', stop_sequence: null },
        usage: anthropicUsage(usage),
      },
      'message_delta',
    ) +
    sseEvent({ type: 'message_stop' }, 'message_stop');

  return {
    onEvent(message: EventSourceMessage) {
      if (message.data === OPENAI_END) {
        if (finished || !started) return '';
        finished = true;
        return finish();
      }
      const chunk = JSON.parse(message.data) as Json;
      if (chunk.error) {
        const error = isObject(chunk.error) ? chunk.error : { message: String(chunk.error) };
        return API_FORMATS.anthropic.streamError(
          String(error.message ?? 'upstream error'),
          false,
          'stream_interrupted',
        );
      }
      let out = started ? '' : start(chunk);
      if (isObject(chunk.usage)) usage = chunk.usage;
      for (const choice of (chunk.choices as Json[] | undefined) ?? []) {
        const d = (choice.delta as Json | undefined) ?? {};
        if (typeof d.reasoning_content === 'string' && d.reasoning_content !== '') {
          if (open?.kind !== 'thinking') out += begin('thinking', { type: 'thinking', thinking: '', signature: '' });
          out += delta(open!.index, { type: 'thinking_delta', thinking: d.reasoning_content });
        }
        if (typeof d.content === 'string' && d.content !== '') {
          if (open?.kind !== 'text') out += begin('text', { type: 'text', text: '' });
          out += delta(open!.index, { type: 'text_delta', text: d.content });
        }
        for (const call of (d.tool_calls as Json[] | undefined) ?? []) {
          const tool = Number(call.index ?? 0);
          const fn = (call.function as Json | undefined) ?? {};
          if (!toolBlocks.has(tool)) {
            out += begin(
              'tool',
              { type: 'tool_use', id: call.id ?? `toolu_${tool}`, name: fn.name ?? '', input: {} },
              tool,
            );
          }
          if (typeof fn.arguments === 'string' && fn.arguments !== '') {
            out += delta(toolBlocks.get(tool)!, { type: 'input_json_delta', partial_json: fn.arguments });
          }
        }
        if (choice.finish_reason) stopReason = toAnthropicStop(choice.finish_reason);
      }
      return out;
    },
    onEnd() {
      return finished ? '' : new Error('The provider ended the stream before its end marker.');
    },
  };
}

/** Anthropic stream events in, OpenAI chat chunks out (tool calls as indexed deltas, a usage chunk when asked, then [DONE]). */
export function anthropicStreamToOpenAI(includeUsage: boolean): SseTranslator {
  let id = '';
  let model: unknown;
  const created = Math.floor(Date.now() / 1000);
  let usage: Json = {};
  let done = false;
  let tools = 0;
  const toolOfBlock = new Map<number, number>();
  const chunk = (choices: Json[], chunkUsage: Json | null = null) =>
    sseEvent({
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      choices,
      ...(includeUsage ? { usage: chunkUsage } : {}),
    });
  const deltaChunk = (delta: Json) => chunk([{ index: 0, delta, finish_reason: null }]);
  return {
    onEvent(message: EventSourceMessage) {
      const event = JSON.parse(message.data) as Json;
      switch (event.type) {
        case 'message_start': {
          const m = event.message as Json;
          id = `chatcmpl-${String(m.id ?? '')}`;
          model = m.model;
          usage = { ...((m.usage as Json | undefined) ?? {}) };
          return deltaChunk({ role: 'assistant', content: '' });
        }
        case 'content_block_start': {
          const block = (event.content_block as Json | undefined) ?? {};
          if (block.type !== 'tool_use') return '';
          const tool = tools++;
          toolOfBlock.set(Number(event.index), tool);
          return deltaChunk({
            tool_calls: [
              { index: tool, id: block.id, type: 'function', function: { name: block.name, arguments: '' } },
            ],
          });
        }
        case 'content_block_delta': {
          const delta = event.delta as Json;
          if (delta.type === 'text_delta') return deltaChunk({ content: delta.text });
          if (delta.type === 'thinking_delta') return deltaChunk({ reasoning_content: delta.thinking });
          if (delta.type === 'input_json_delta') {
            const tool = toolOfBlock.get(Number(event.index)) ?? 0;
            return deltaChunk({ tool_calls: [{ index: tool, function: { arguments: delta.partial_json } }] });
          }
          return ''; // signatures and citations have no chat-completions counterpart
        }
        case 'message_delta': {
          Object.assign(usage, (event.usage as Json | undefined) ?? {});
          const reason = toOpenAIStop((event.delta as Json | undefined)?.stop_reason);
          return reason ? chunk([{ index: 0, delta: {}, finish_reason: reason }]) : '';
        }
        case 'message_stop': {
          done = true;
          return (includeUsage ? chunk([], openAIUsage(usage)) : '') + sseEvent(OPENAI_END);
        }
        case 'error': {
          const error = (event.error as Json | undefined) ?? {};
          return sseEvent({
            error: {
              message: String(error.message ?? 'upstream error'),
              type: String(error.type ?? 'api_error'),
              param: null,
              code: null,
            },
          });
        }
        default:
          return ''; // ping, content_block_stop and event types added later
      }
    },
    onEnd() {
      return done ? '' : new Error('The provider ended the stream before message_stop.');
    },
  };
}
