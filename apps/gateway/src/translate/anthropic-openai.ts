import { invalidRequest } from '../http/api-error.js';
import type { EventSourceMessage } from 'eventsource-parser';
import { sseEvent, type SseTranslator } from './sse.js';

/**
 * Translation between the Anthropic Messages API and OpenAI chat completions,
 * for text and streaming: an Anthropic client in front of an OpenAI-compatible
 * provider, and an OpenAI client in front of Anthropic. Token counts and stop
 * reasons are mapped, not dropped.
 */

type Json = Record<string, unknown>;

const OPENAI_TO_ANTHROPIC_STOP: Record<string, string> = {
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
  function_call: 'tool_use',
  content_filter: 'refusal',
};
const ANTHROPIC_TO_OPENAI_STOP: Record<string, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  tool_use: 'tool_calls',
  refusal: 'content_filter',
  pause_turn: 'stop',
  model_context_window_exceeded: 'length',
};

export function toAnthropicStop(reason: unknown): string | null {
  return typeof reason === 'string' ? (OPENAI_TO_ANTHROPIC_STOP[reason] ?? 'end_turn') : null;
}

export function toOpenAIStop(reason: unknown): string | null {
  return typeof reason === 'string' ? (ANTHROPIC_TO_OPENAI_STOP[reason] ?? 'stop') : null;
}

/** The text of a string or of an array of content parts; other part types cannot be translated. */
function textOf(content: unknown, where: string): string {
  if (typeof content === 'string') return content;
  if (content === null || content === undefined) return '';
  if (!Array.isArray(content)) throw invalidRequest(where, `${where} must be a string or an array of content blocks`);
  return content
    .map((part: Json, i) => {
      if (part?.type === 'text' && typeof part.text === 'string') return part.text;
      throw invalidRequest(`${where}[${i}]`, `${where}[${i}] of type "${String(part?.type)}" cannot be translated for this provider; only text is`);
    })
    .join('');
}

// ---- Anthropic client -> OpenAI-compatible provider ----

export function anthropicRequestToOpenAI(body: Json): Json {
  const messages: Json[] = [];
  if (body.system !== undefined) messages.push({ role: 'system', content: textOf(body.system, 'system') });
  (body.messages as Json[]).forEach((m, i) => messages.push({ role: m.role, content: textOf(m.content, `messages[${i}].content`) }));
  const request: Json = { model: body.model, messages, max_tokens: body.max_tokens };
  if (body.temperature !== undefined) request.temperature = body.temperature;
  if (body.top_p !== undefined) request.top_p = body.top_p;
  if (body.stop_sequences !== undefined) request.stop = body.stop_sequences;
  if (body.stream === true) {
    request.stream = true;
    request.stream_options = { include_usage: true };
  }
  return request;
}

export function openAIResponseToAnthropic(response: Json): Json {
  const choice = ((response.choices as Json[] | undefined) ?? [])[0] ?? {};
  const message = (choice.message as Json | undefined) ?? {};
  const usage = (response.usage as Json | undefined) ?? {};
  const details = usage.prompt_tokens_details as Json | undefined;
  return {
    id: `msg_${String(response.id ?? '')}`,
    type: 'message',
    role: 'assistant',
    model: response.model,
    content: [{ type: 'text', text: typeof message.content === 'string' ? message.content : '' }],
    stop_reason: toAnthropicStop(choice.finish_reason) ?? 'end_turn',
    stop_sequence: null,
    usage: {
      input_tokens: usage.prompt_tokens ?? 0,
      output_tokens: usage.completion_tokens ?? 0,
      cache_read_input_tokens: details?.cached_tokens ?? 0,
      cache_creation_input_tokens: 0,
    },
  };
}

/** OpenAI chat chunks in, Anthropic stream events out. */
export function openAIStreamToAnthropic(): SseTranslator {
  let started = false;
  let stopReason: string | null = null;
  let inputTokens = 0;
  let outputTokens = 0;
  const start = (chunk: Json) => {
    started = true;
    return (
      sseEvent(
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
      ) + sseEvent({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }, 'content_block_start')
    );
  };
  const finish = () =>
    sseEvent({ type: 'content_block_stop', index: 0 }, 'content_block_stop') +
    sseEvent(
      {
        type: 'message_delta',
        delta: { stop_reason: stopReason ?? 'end_turn', stop_sequence: null },
        usage: { input_tokens: inputTokens, output_tokens: outputTokens },
      },
      'message_delta',
    ) +
    sseEvent({ type: 'message_stop' }, 'message_stop');
  let finished = false;
  return {
    onEvent(message: EventSourceMessage) {
      if (message.data === '[DONE]') {
        if (finished || !started) return '';
        finished = true;
        return finish();
      }
      const chunk = JSON.parse(message.data) as Json;
      if (chunk.error) {
        return sseEvent({ type: 'error', error: { type: 'api_error', message: String((chunk.error as Json).message ?? 'upstream error') } }, 'error');
      }
      let out = started ? '' : start(chunk);
      const usage = chunk.usage as Json | undefined | null;
      if (usage) {
        inputTokens = Number(usage.prompt_tokens ?? inputTokens);
        outputTokens = Number(usage.completion_tokens ?? outputTokens);
      }
      for (const choice of (chunk.choices as Json[] | undefined) ?? []) {
        const text = (choice.delta as Json | undefined)?.content;
        if (typeof text === 'string' && text.length > 0) {
          out += sseEvent({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text } }, 'content_block_delta');
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

// ---- OpenAI client -> Anthropic provider ----

export function openAIRequestToAnthropic(body: Json): Json {
  const system: string[] = [];
  const messages: Json[] = [];
  (body.messages as Json[]).forEach((m, i) => {
    const text = textOf(m.content, `messages[${i}].content`);
    if (m.role === 'system' || m.role === 'developer') system.push(text);
    else if (m.role === 'user' || m.role === 'assistant') messages.push({ role: m.role, content: text });
    else {
      throw invalidRequest(`messages[${i}].role`, `messages[${i}].role "${String(m.role)}" cannot be translated for the anthropic provider`);
    }
  });
  const request: Json = {
    model: body.model,
    messages,
    max_tokens: body.max_completion_tokens ?? body.max_tokens ?? 4096,
  };
  if (system.length) request.system = system.join('\n\n');
  if (body.temperature !== undefined) request.temperature = body.temperature;
  if (body.top_p !== undefined) request.top_p = body.top_p;
  if (body.stop !== undefined) request.stop_sequences = Array.isArray(body.stop) ? body.stop : [body.stop];
  if (body.stream === true) request.stream = true;
  return request;
}

export function anthropicResponseToOpenAI(response: Json): Json {
  const usage = (response.usage as Json | undefined) ?? {};
  const input = Number(usage.input_tokens ?? 0);
  const output = Number(usage.output_tokens ?? 0);
  const text = ((response.content as Json[] | undefined) ?? [])
    .filter((b) => b.type === 'text')
    .map((b) => String(b.text ?? ''))
    .join('');
  return {
    id: `chatcmpl-${String(response.id ?? '')}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: response.model,
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: text, refusal: null },
        finish_reason: toOpenAIStop(response.stop_reason) ?? 'stop',
        logprobs: null,
      },
    ],
    usage: {
      prompt_tokens: input,
      completion_tokens: output,
      total_tokens: input + output,
      prompt_tokens_details: { cached_tokens: Number(usage.cache_read_input_tokens ?? 0) },
    },
  };
}

/** Anthropic stream events in, OpenAI chat chunks out (with a usage chunk when asked, then [DONE]). */
export function anthropicStreamToOpenAI(includeUsage: boolean): SseTranslator {
  let id = '';
  let model: unknown;
  const created = Math.floor(Date.now() / 1000);
  let input = 0;
  let output = 0;
  let done = false;
  const chunk = (choices: Json[], usage: Json | null = null) =>
    sseEvent({ id, object: 'chat.completion.chunk', created, model, choices, usage });
  return {
    onEvent(message: EventSourceMessage) {
      const event = JSON.parse(message.data) as Json;
      switch (event.type) {
        case 'message_start': {
          const m = event.message as Json;
          id = `chatcmpl-${String(m.id ?? '')}`;
          model = m.model;
          input = Number((m.usage as Json | undefined)?.input_tokens ?? 0);
          return chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]);
        }
        case 'content_block_delta': {
          const delta = event.delta as Json;
          if (delta.type !== 'text_delta') return '';
          return chunk([{ index: 0, delta: { content: delta.text }, finish_reason: null }]);
        }
        case 'message_delta': {
          const usage = event.usage as Json | undefined;
          if (usage?.output_tokens !== undefined) output = Number(usage.output_tokens);
          if (usage?.input_tokens !== undefined) input = Number(usage.input_tokens);
          const reason = toOpenAIStop((event.delta as Json | undefined)?.stop_reason);
          return reason ? chunk([{ index: 0, delta: {}, finish_reason: reason }]) : '';
        }
        case 'message_stop': {
          done = true;
          const usage = includeUsage
            ? chunk([], { prompt_tokens: input, completion_tokens: output, total_tokens: input + output })
            : '';
          return usage + 'data: [DONE]\n\n';
        }
        case 'error': {
          const error = (event.error as Json | undefined) ?? {};
          return sseEvent({ error: { message: String(error.message ?? 'upstream error'), type: String(error.type ?? 'api_error'), param: null, code: null } });
        }
        default:
          return ''; // ping, content_block_start/stop and event types added later
      }
    },
    onEnd() {
      return done ? '' : new Error('The provider ended the stream before message_stop.');
    },
  };
}
