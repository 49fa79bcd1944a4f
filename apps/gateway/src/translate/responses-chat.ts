import type { EventSourceMessage } from 'eventsource-parser';
import { API_FORMATS } from '../apis/formats.js';
import { absent, isObject, untranslatable as refuse } from './anthropic-openai-common.js';
import { sseEvent, type SseTranslator } from './sse.js';

/**
 * The OpenAI Responses API in terms of chat completions, for a provider that
 * has no `/v1/responses`: requests (input items, instructions, function tools,
 * tool choice), answers (message and function-call output items, usage) and
 * streams (chat chunks in, Responses events out, with sequence numbers and
 * indexes as OpenAI sends them). What has no chat-completions counterpart
 * (built-in tools, `previous_response_id`, reasoning settings, file inputs) is
 * a 400 naming it. Composed with the Anthropic translation, it serves the
 * Responses API in front of Anthropic.
 */

type Json = Record<string, unknown>;

const REQUEST_FIELDS = new Set([
  'model',
  'input',
  'instructions',
  'max_output_tokens',
  'temperature',
  'top_p',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'stream',
  'text',
  'user',
  // Whether OpenAI keeps the response for later retrieval: it changes no answer (nothing is kept here).
  'store',
  'truncation',
]);
const WHERE = 'a provider without the Responses API';

export function responsesRequestToChat(body: Json): Json {
  for (const [field, value] of Object.entries(body)) {
    if (!REQUEST_FIELDS.has(field) && !absent(value))
      refuse(field, `cannot be translated for ${WHERE}; remove it, or use /v1/chat/completions.`);
  }
  if (!absent(body.truncation) && body.truncation !== 'disabled')
    refuse('truncation', `other than "disabled" cannot be translated for ${WHERE}.`);
  const messages: Json[] = [];
  if (!absent(body.instructions)) messages.push({ role: 'system', content: String(body.instructions) });
  const input = body.input;
  if (typeof input === 'string') messages.push({ role: 'user', content: input });
  else if (Array.isArray(input)) input.forEach((item, i) => addItem(messages, item, `input[${i}]`));
  else refuse('input', input === undefined ? 'is required.' : 'must be a string or an array of items.');

  const request: Json = { messages };
  if (!absent(body.model)) request.model = body.model;
  if (!absent(body.max_output_tokens)) request.max_tokens = body.max_output_tokens;
  if (!absent(body.temperature)) request.temperature = body.temperature;
  if (!absent(body.top_p)) request.top_p = body.top_p;
  if (!absent(body.user)) request.user = body.user;
  if (!absent(body.parallel_tool_calls)) request.parallel_tool_calls = body.parallel_tool_calls;
  if (!absent(body.tools)) {
    if (!Array.isArray(body.tools)) refuse('tools', 'must be an array.');
    request.tools = body.tools.map((tool, i) => {
      if (!isObject(tool) || tool.type !== 'function')
        refuse(
          `tools[${i}]`,
          `("${String((tool as Json | null)?.type)}") is a built-in tool; ${WHERE} has only functions.`,
        );
      const fn: Json = { name: tool.name, parameters: tool.parameters ?? { type: 'object', properties: {} } };
      if (!absent(tool.description)) fn.description = tool.description;
      if (!absent(tool.strict)) fn.strict = tool.strict;
      return { type: 'function', function: fn };
    });
  }
  if (!absent(body.tool_choice)) {
    const choice = body.tool_choice;
    if (choice === 'auto' || choice === 'none' || choice === 'required') request.tool_choice = choice;
    else if (isObject(choice) && choice.type === 'function')
      request.tool_choice = { type: 'function', function: { name: choice.name } };
    else refuse('tool_choice', `cannot be translated for ${WHERE}.`);
  }
  if (!absent(body.text)) {
    const format = isObject(body.text) ? body.text.format : undefined;
    if (isObject(format) && format.type === 'json_schema') {
      request.response_format = {
        type: 'json_schema',
        json_schema: { name: format.name, schema: format.schema, strict: format.strict },
      };
    } else if (isObject(format) && format.type === 'json_object') request.response_format = { type: 'json_object' };
    else if (!absent(format) && !(isObject(format) && format.type === 'text'))
      refuse('text.format', `cannot be translated for ${WHERE}.`);
  }
  if (body.stream === true) {
    request.stream = true;
    request.stream_options = { include_usage: true };
  }
  return request;
}

function addItem(messages: Json[], item: unknown, where: string): void {
  if (!isObject(item)) refuse(where, 'must be an object.');
  const type = item.type ?? 'message';
  switch (type) {
    case 'message': {
      const role = item.role === 'developer' ? 'system' : item.role;
      messages.push({ role, content: messageContent(item.content, `${where}.content`) });
      return;
    }
    case 'function_call': {
      const call = {
        id: item.call_id,
        type: 'function',
        function: { name: item.name, arguments: String(item.arguments ?? '') },
      };
      const last = messages.at(-1);
      // Calls made in one turn go back as one assistant message with several tool calls.
      if (last?.role === 'assistant' && Array.isArray(last.tool_calls)) (last.tool_calls as Json[]).push(call);
      else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
      return;
    }
    case 'function_call_output':
      messages.push({
        role: 'tool',
        tool_call_id: item.call_id,
        content: typeof item.output === 'string' ? item.output : JSON.stringify(item.output),
      });
      return;
    case 'reasoning':
      // Earlier turns' reasoning is not part of a chat-completions context.
      return;
    default:
      refuse(where, `of type "${String(type)}" cannot be translated for ${WHERE}.`);
  }
}

function messageContent(content: unknown, where: string): unknown {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) refuse(where, 'must be a string or an array of parts.');
  const parts = content.map((part, i) => {
    if (!isObject(part)) refuse(`${where}[${i}]`, 'must be an object.');
    switch (part.type) {
      case 'input_text':
      case 'output_text':
      case 'text':
        return { type: 'text', text: String(part.text ?? '') };
      case 'refusal':
        return { type: 'text', text: String(part.refusal ?? '') };
      case 'input_image':
        if (typeof part.image_url !== 'string')
          refuse(`${where}[${i}]`, `(an image by file id) cannot be translated for ${WHERE}; send its URL.`);
        return {
          type: 'image_url',
          image_url: { url: part.image_url, ...(absent(part.detail) ? {} : { detail: part.detail }) },
        };
      default:
        return refuse(`${where}[${i}]`, `of type "${String(part.type)}" cannot be translated for ${WHERE}.`);
    }
  });
  return parts.every((p) => p.type === 'text') ? parts.map((p) => p.text).join('') : parts;
}

interface Output {
  id: string;
  text: string;
  calls: Array<{ id: string; name: string; arguments: string }>;
}

function responsesUsage(usage: Json | undefined): Json | null {
  if (!usage) return null;
  const input = Number(usage.prompt_tokens ?? 0);
  const output = Number(usage.completion_tokens ?? 0);
  return {
    input_tokens: input,
    input_tokens_details: {
      cached_tokens: Number((usage.prompt_tokens_details as Json | undefined)?.cached_tokens ?? 0),
    },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: input + output,
  };
}

function outputItems(o: Output): Json[] {
  const items: Json[] = [];
  if (o.text !== '' || o.calls.length === 0) {
    items.push({
      type: 'message',
      id: `msg_${o.id}`,
      status: 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text: o.text, annotations: [], logprobs: [] }],
    });
  }
  o.calls.forEach((c, i) =>
    items.push({
      type: 'function_call',
      id: `fc_${o.id}_${i}`,
      call_id: c.id,
      name: c.name,
      arguments: c.arguments,
      status: 'completed',
    }),
  );
  return items;
}

function responseObject(
  id: string,
  model: unknown,
  status: string,
  output: Json[],
  usage: Json | null,
  createdAt: number,
): Json {
  return {
    id: `resp_${id}`,
    object: 'response',
    created_at: createdAt,
    status,
    error: null,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    model,
    output,
    usage,
  };
}

export function chatResponseToResponses(response: Json): Json {
  const choice = ((response.choices as Json[] | undefined) ?? [])[0] ?? {};
  const message = (choice.message as Json | undefined) ?? {};
  const id = String(response.id ?? '');
  const calls = ((message.tool_calls as Json[] | undefined) ?? []).map((c) => {
    const fn = (c.function as Json | undefined) ?? {};
    return { id: String(c.id ?? ''), name: String(fn.name ?? ''), arguments: String(fn.arguments ?? '') };
  });
  const output = outputItems({ id, text: typeof message.content === 'string' ? message.content : '', calls });
  const status = choice.finish_reason === 'length' ? 'incomplete' : 'completed';
  const created = typeof response.created === 'number' ? response.created : Math.floor(Date.now() / 1000);
  return responseObject(
    id,
    response.model,
    status,
    output,
    responsesUsage(response.usage as Json | undefined),
    created,
  );
}

/** Chat chunks in (with a usage chunk before `[DONE]`), Responses API events out. */
export function chatStreamToResponses(): SseTranslator {
  let sequence = 0;
  let id = '';
  let model: unknown;
  const createdAt = Math.floor(Date.now() / 1000);
  let started = false;
  let done = false;
  let finish: unknown;
  let usage: Json | undefined;
  const out: Output = { id: '', text: '', calls: [] };
  // The message item, when open: its output index.
  let message: number | undefined;
  let nextIndex = 0;
  const callIndex = new Map<number, number>(); // the chunk's tool-call index -> position in out.calls
  const callOutput: number[] = []; // position in out.calls -> output index

  const emit = (type: string, data: Json) => sseEvent({ type, sequence_number: sequence++, ...data }, type);
  const inProgress = () => responseObject(id, model, 'in_progress', [], null, createdAt);
  const closeMessage = () => {
    if (message === undefined) return '';
    const index = message;
    message = undefined;
    const item_id = `msg_${id}`;
    const part = { type: 'output_text', text: out.text, annotations: [], logprobs: [] };
    return (
      emit('response.output_text.done', {
        item_id,
        output_index: index,
        content_index: 0,
        text: out.text,
        logprobs: [],
      }) +
      emit('response.content_part.done', { item_id, output_index: index, content_index: 0, part }) +
      emit('response.output_item.done', {
        output_index: index,
        item: { type: 'message', id: item_id, status: 'completed', role: 'assistant', content: [part] },
      })
    );
  };
  const closeCalls = () =>
    out.calls
      .map((c, i) => {
        const item = {
          type: 'function_call',
          id: `fc_${id}_${i}`,
          call_id: c.id,
          name: c.name,
          arguments: c.arguments,
          status: 'completed',
        };
        return (
          emit('response.function_call_arguments.done', {
            item_id: item.id,
            output_index: callOutput[i],
            arguments: c.arguments,
          }) + emit('response.output_item.done', { output_index: callOutput[i], item })
        );
      })
      .join('');
  const complete = () => {
    done = true;
    const text = closeMessage() + closeCalls();
    out.id = id;
    const status = finish === 'length' ? 'incomplete' : 'completed';
    const type = status === 'incomplete' ? 'response.incomplete' : 'response.completed';
    return (
      text +
      emit(type, { response: responseObject(id, model, status, outputItems(out), responsesUsage(usage), createdAt) })
    );
  };

  return {
    onEvent(event: EventSourceMessage) {
      if (event.data === API_FORMATS.openai.endData) return done || !started ? '' : complete();
      const chunk = JSON.parse(event.data) as Json;
      if (chunk.error) {
        const error = isObject(chunk.error) ? chunk.error : { message: String(chunk.error) };
        // Not done: the stream ends as a failed one (never kept in the window).
        return emit('error', {
          code: error.code ?? null,
          message: String(error.message ?? 'upstream error'),
          param: null,
        });
      }
      let text = '';
      if (!started) {
        started = true;
        id = String(chunk.id ?? '');
        model = chunk.model;
        text +=
          emit('response.created', { response: inProgress() }) +
          emit('response.in_progress', { response: inProgress() });
      }
      if (isObject(chunk.usage)) usage = chunk.usage;
      for (const choice of (chunk.choices as Json[] | undefined) ?? []) {
        const delta = (choice.delta as Json | undefined) ?? {};
        if (typeof delta.content === 'string' && delta.content !== '') {
          if (message === undefined) {
            message = nextIndex++;
            const item_id = `msg_${id}`;
            text +=
              emit('response.output_item.added', {
                output_index: message,
                item: { type: 'message', id: item_id, status: 'in_progress', role: 'assistant', content: [] },
              }) +
              emit('response.content_part.added', {
                item_id,
                output_index: message,
                content_index: 0,
                part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
              });
          }
          out.text += delta.content;
          text += emit('response.output_text.delta', {
            item_id: `msg_${id}`,
            output_index: message,
            content_index: 0,
            delta: delta.content,
            logprobs: [],
          });
        }
        for (const call of (delta.tool_calls as Json[] | undefined) ?? []) {
          const key = Number(call.index ?? 0);
          const fn = (call.function as Json | undefined) ?? {};
          if (!callIndex.has(key)) {
            text += closeMessage();
            callIndex.set(key, out.calls.length);
            callOutput.push(nextIndex++);
            out.calls.push({ id: String(call.id ?? `call_${key}`), name: String(fn.name ?? ''), arguments: '' });
            const i = out.calls.length - 1;
            const item = {
              type: 'function_call',
              id: `fc_${id}_${i}`,
              call_id: out.calls[i].id,
              name: out.calls[i].name,
              arguments: '',
              status: 'in_progress',
            };
            text += emit('response.output_item.added', { output_index: callOutput[i], item });
          }
          const i = callIndex.get(key)!;
          if (typeof fn.arguments === 'string' && fn.arguments !== '') {
            out.calls[i].arguments += fn.arguments;
            text += emit('response.function_call_arguments.delta', {
              item_id: `fc_${id}_${i}`,
              output_index: callOutput[i],
              delta: fn.arguments,
            });
          }
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      return text;
    },
    onEnd() {
      return done ? '' : new Error('The provider ended the stream before its end marker.');
    },
  };
}
