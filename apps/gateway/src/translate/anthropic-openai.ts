import { API_FORMATS } from '../apis/formats.js';
import { invalidRequest } from '../common/api-error.js';
import type { EventSourceMessage } from 'eventsource-parser';
import { sseEvent, type SseTranslator } from './sse.js';

/**
 * Translation between the Anthropic Messages API and OpenAI chat completions:
 * an Anthropic client in front of an OpenAI-compatible provider, and an OpenAI
 * client in front of Anthropic. Text, images, tools (definitions, tool choice,
 * tool calls and their results, streamed argument deltas), stop reasons and
 * token counts are mapped. A field or block that has no counterpart is a 400
 * naming it, never dropped, with two documented exceptions that change no
 * answer: `cache_control` (a caching hint; OpenAI-compatible providers cache
 * prompts on their own) and the thinking blocks of earlier assistant turns
 * (Anthropic itself leaves them out of the context).
 */

/** OpenAI's end marker, as its API's table says it. */
const OPENAI_END = API_FORMATS.openai.endData!;

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

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Absent, or null (which both APIs read as absent). */
function absent(value: unknown): boolean {
  return value === undefined || value === null;
}

function untranslatable(field: string, why: string): never {
  throw invalidRequest(field, `${field} ${why}`);
}

/** Fields other than `known` are refused by name: nothing a client asked for is dropped without a word. */
function refuseUnknown(body: Json, known: ReadonlySet<string>, provider: string, where = ''): void {
  for (const [field, value] of Object.entries(body)) {
    if (!known.has(field) && !absent(value)) {
      untranslatable(
        `${where}${field}`,
        `cannot be translated for ${provider}; remove it, or use a provider that has it.`,
      );
    }
  }
}

function requireArray(value: unknown, field: string): unknown[] {
  if (!Array.isArray(value)) untranslatable(field, value === undefined ? 'is required.' : 'must be an array.');
  return value;
}

function requireObjectAt(value: unknown, field: string): Json {
  if (!isObject(value)) untranslatable(field, 'must be an object.');
  return value;
}

function parseArguments(text: unknown, field: string): unknown {
  if (typeof text !== 'string' || text === '') return {};
  try {
    return JSON.parse(text);
  } catch {
    return untranslatable(field, 'must be a JSON object (the tool call arguments).');
  }
}

/** A tool's arguments as the provider sent them: an object when they parse, else the text itself (never lost). */
function argumentsOf(text: unknown): unknown {
  if (typeof text !== 'string' || text === '') return {};
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

// ---- Anthropic client -> OpenAI-compatible provider ----

const ANTHROPIC_REQUEST_FIELDS = new Set([
  'model',
  'messages',
  'system',
  'max_tokens',
  'temperature',
  'top_p',
  'stop_sequences',
  'stream',
  'tools',
  'tool_choice',
  'metadata',
  'thinking',
  'cache_control',
]);
const FOR_OPENAI = 'an OpenAI-compatible provider';

export function anthropicRequestToOpenAI(body: Json): Json {
  refuseUnknown(body, ANTHROPIC_REQUEST_FIELDS, FOR_OPENAI);
  const messages: Json[] = [];
  if (!absent(body.system)) messages.push({ role: 'system', content: anthropicText(body.system, 'system') });
  requireArray(body.messages, 'messages').forEach((m, i) =>
    messages.push(...anthropicMessageToOpenAI(m, `messages[${i}]`)),
  );

  const request: Json = { messages };
  if (!absent(body.model)) request.model = body.model;
  if (!absent(body.max_tokens)) request.max_tokens = body.max_tokens;
  if (!absent(body.temperature)) request.temperature = body.temperature;
  if (!absent(body.top_p)) request.top_p = body.top_p;
  if (!absent(body.stop_sequences)) request.stop = body.stop_sequences;
  if (!absent(body.tools))
    request.tools = requireArray(body.tools, 'tools').map((t, i) => anthropicToolToOpenAI(t, `tools[${i}]`));
  if (!absent(body.tool_choice)) Object.assign(request, anthropicToolChoiceToOpenAI(body.tool_choice));
  if (!absent(body.metadata)) {
    const metadata = requireObjectAt(body.metadata, 'metadata');
    refuseUnknown(metadata, new Set(['user_id']), FOR_OPENAI, 'metadata.');
    if (!absent(metadata.user_id)) request.user = metadata.user_id;
  }
  if (!absent(body.thinking)) {
    const thinking = requireObjectAt(body.thinking, 'thinking');
    if (thinking.type !== 'disabled') {
      untranslatable(
        'thinking',
        `(${String(thinking.type)}) cannot be translated for ${FOR_OPENAI}: chat completions have no thinking budget.`,
      );
    }
  }
  if (body.stream === true) {
    request.stream = true;
    request.stream_options = { include_usage: true };
  }
  return request;
}

/** Text of a string or of text blocks (Anthropic `system`, tool results). */
function anthropicText(content: unknown, where: string): string {
  if (typeof content === 'string') return content;
  return requireArray(content, where)
    .map((block, i) => {
      if (isObject(block) && block.type === 'text' && typeof block.text === 'string') return block.text;
      return untranslatable(
        `${where}[${i}]`,
        `of type "${String((block as Json | null)?.type)}" cannot be translated here; only text can.`,
      );
    })
    .join('');
}

/** One Anthropic message as OpenAI messages (a user message with tool results becomes tool messages first). */
function anthropicMessageToOpenAI(message: unknown, where: string): Json[] {
  const m = requireObjectAt(message, where);
  const role = m.role;
  const content = m.content;
  if (typeof content === 'string' || absent(content)) return [{ role, content: content ?? '' }];
  const blocks = requireArray(content, `${where}.content`);
  if (role === 'assistant') return [anthropicAssistantToOpenAI(blocks, `${where}.content`)];

  const toolMessages: Json[] = [];
  const parts: Json[] = [];
  blocks.forEach((block, i) => {
    const at = `${where}.content[${i}]`;
    const b = requireObjectAt(block, at);
    switch (b.type) {
      case 'text':
        parts.push({ type: 'text', text: String(b.text ?? '') });
        break;
      case 'image':
        parts.push({ type: 'image_url', image_url: { url: imageUrl(b.source, `${at}.source`) } });
        break;
      case 'tool_result':
        toolMessages.push({
          role: 'tool',
          tool_call_id: b.tool_use_id,
          // `is_error` has no field in chat completions: the result's text (the error message) is the tool's answer.
          content: absent(b.content) ? '' : anthropicText(b.content, `${at}.content`),
        });
        break;
      default:
        untranslatable(at, `of type "${String(b.type)}" cannot be translated for ${FOR_OPENAI}.`);
    }
  });
  const out = [...toolMessages];
  if (parts.length > 0 || toolMessages.length === 0) {
    const textOnly = parts.every((p) => p.type === 'text');
    out.push({ role, content: textOnly ? parts.map((p) => p.text).join('') : parts });
  }
  return out;
}

function anthropicAssistantToOpenAI(blocks: unknown[], where: string): Json {
  let text = '';
  const toolCalls: Json[] = [];
  blocks.forEach((block, i) => {
    const at = `${where}[${i}]`;
    const b = requireObjectAt(block, at);
    switch (b.type) {
      case 'text':
        text += String(b.text ?? '');
        break;
      case 'tool_use':
        toolCalls.push({
          id: b.id,
          type: 'function',
          function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) },
        });
        break;
      case 'thinking':
      case 'redacted_thinking':
        // Earlier turns' thinking is not part of the context (Anthropic leaves it out too).
        break;
      default:
        untranslatable(at, `of type "${String(b.type)}" cannot be translated for ${FOR_OPENAI}.`);
    }
  });
  const message: Json = { role: 'assistant', content: toolCalls.length > 0 && text === '' ? null : text };
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  return message;
}

function imageUrl(source: unknown, where: string): string {
  const s = requireObjectAt(source, where);
  if (s.type === 'base64' && typeof s.media_type === 'string' && typeof s.data === 'string')
    return `data:${s.media_type};base64,${s.data}`;
  if (s.type === 'url' && typeof s.url === 'string') return s.url;
  return untranslatable(
    where,
    `of type "${String(s.type)}" cannot be translated for ${FOR_OPENAI}; send the image as base64 or a URL.`,
  );
}

function anthropicToolToOpenAI(tool: unknown, where: string): Json {
  const t = requireObjectAt(tool, where);
  if (!absent(t.type) && t.type !== 'custom') {
    untranslatable(where, `("${String(t.type)}") is one of Anthropic's own tools; ${FOR_OPENAI} has only functions.`);
  }
  refuseUnknown(t, new Set(['type', 'name', 'description', 'input_schema', 'cache_control']), FOR_OPENAI, `${where}.`);
  const fn: Json = { name: t.name, parameters: t.input_schema ?? { type: 'object', properties: {} } };
  if (!absent(t.description)) fn.description = t.description;
  return { type: 'function', function: fn };
}

function anthropicToolChoiceToOpenAI(choice: unknown): Json {
  const c = requireObjectAt(choice, 'tool_choice');
  const out: Json = {};
  switch (c.type) {
    case 'auto':
      out.tool_choice = 'auto';
      break;
    case 'any':
      out.tool_choice = 'required';
      break;
    case 'none':
      out.tool_choice = 'none';
      break;
    case 'tool':
      out.tool_choice = { type: 'function', function: { name: c.name } };
      break;
    default:
      untranslatable('tool_choice.type', `"${String(c.type)}" is not auto, any, none or tool.`);
  }
  if (c.disable_parallel_tool_use === true) out.parallel_tool_calls = false;
  return out;
}

/** Anthropic's input_tokens leave out the prompt tokens read from the cache; OpenAI's prompt_tokens include them. */
function anthropicUsage(usage: Json | undefined): Json {
  const prompt = Number(usage?.prompt_tokens ?? 0);
  const cached = Number((usage?.prompt_tokens_details as Json | undefined)?.cached_tokens ?? 0);
  return {
    input_tokens: Math.max(0, prompt - cached),
    output_tokens: Number(usage?.completion_tokens ?? 0),
    cache_read_input_tokens: cached,
    cache_creation_input_tokens: 0,
  };
}

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

// ---- OpenAI client -> Anthropic provider ----

const OPENAI_REQUEST_FIELDS = new Set([
  'model',
  'messages',
  'max_tokens',
  'max_completion_tokens',
  'temperature',
  'top_p',
  'stop',
  'stream',
  'stream_options',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'user',
  'n',
  'logprobs',
  'presence_penalty',
  'frequency_penalty',
  'store',
  'response_format',
]);
const FOR_ANTHROPIC = 'the anthropic provider';

export function openAIRequestToAnthropic(body: Json): Json {
  refuseUnknown(body, OPENAI_REQUEST_FIELDS, FOR_ANTHROPIC);
  // Accepted only at the value that asks for nothing Anthropic lacks.
  if (!absent(body.n) && body.n !== 1) untranslatable('n', `other than 1 cannot be translated for ${FOR_ANTHROPIC}.`);
  if (!absent(body.logprobs) && body.logprobs !== false)
    untranslatable('logprobs', `cannot be translated for ${FOR_ANTHROPIC}.`);
  for (const field of ['presence_penalty', 'frequency_penalty'] as const) {
    if (!absent(body[field]) && body[field] !== 0) untranslatable(field, `cannot be translated for ${FOR_ANTHROPIC}.`);
  }
  if (!absent(body.store) && body.store !== false)
    untranslatable('store', `cannot be translated for ${FOR_ANTHROPIC}.`);
  if (!absent(body.response_format) && (body.response_format as Json | null)?.type !== 'text') {
    untranslatable(
      'response_format',
      `cannot be translated for ${FOR_ANTHROPIC}; describe the format in the prompt, or use tools.`,
    );
  }

  const system: string[] = [];
  const messages: Json[] = [];
  const push = (role: string, blocks: Json[]) => {
    const last = messages.at(-1);
    // Tool results and the user's next words share one user message, results first, as Anthropic expects.
    if (last && last.role === role && role === 'user') (last.content as Json[]).push(...blocks);
    else messages.push({ role, content: blocks });
  };
  requireArray(body.messages, 'messages').forEach((message, i) => {
    const where = `messages[${i}]`;
    const m = requireObjectAt(message, where);
    switch (m.role) {
      case 'system':
      case 'developer':
        system.push(openAIText(m.content, `${where}.content`));
        break;
      case 'user':
        push('user', openAIUserBlocks(m.content, `${where}.content`));
        break;
      case 'assistant': {
        const blocks: Json[] = [];
        const text = absent(m.content) ? '' : openAIText(m.content, `${where}.content`);
        if (text !== '') blocks.push({ type: 'text', text });
        ((m.tool_calls as Json[] | undefined) ?? []).forEach((call, j) => {
          const fn = (call.function as Json | undefined) ?? {};
          blocks.push({
            type: 'tool_use',
            id: call.id,
            name: fn.name,
            input: parseArguments(fn.arguments, `${where}.tool_calls[${j}].function.arguments`),
          });
        });
        messages.push({ role: 'assistant', content: blocks.length > 0 ? blocks : [{ type: 'text', text: '' }] });
        break;
      }
      case 'tool':
        push('user', [
          { type: 'tool_result', tool_use_id: m.tool_call_id, content: openAIText(m.content, `${where}.content`) },
        ]);
        break;
      default:
        untranslatable(`${where}.role`, `"${String(m.role)}" cannot be translated for ${FOR_ANTHROPIC}.`);
    }
  });

  const request: Json = {
    model: body.model,
    messages,
    max_tokens: body.max_completion_tokens ?? body.max_tokens ?? 4096,
  };
  if (system.length) request.system = system.join('\n\n');
  if (!absent(body.temperature)) request.temperature = body.temperature;
  if (!absent(body.top_p)) request.top_p = body.top_p;
  if (!absent(body.stop)) request.stop_sequences = Array.isArray(body.stop) ? body.stop : [body.stop];
  if (!absent(body.tools))
    request.tools = requireArray(body.tools, 'tools').map((t, i) => openAIToolToAnthropic(t, `tools[${i}]`));
  const choice = absent(body.tool_choice) ? undefined : openAIToolChoiceToAnthropic(body.tool_choice);
  if (body.parallel_tool_calls === false)
    request.tool_choice = { ...(choice ?? { type: 'auto' }), disable_parallel_tool_use: true };
  else if (choice) request.tool_choice = choice;
  if (!absent(body.user)) request.metadata = { user_id: body.user };
  if (body.stream === true) request.stream = true;
  return request;
}

function openAIText(content: unknown, where: string): string {
  if (typeof content === 'string') return content;
  if (absent(content)) return '';
  return requireArray(content, where)
    .map((part, i) => {
      if (isObject(part) && part.type === 'text' && typeof part.text === 'string') return part.text;
      return untranslatable(
        `${where}[${i}]`,
        `of type "${String((part as Json | null)?.type)}" cannot be translated here; only text can.`,
      );
    })
    .join('');
}

function openAIUserBlocks(content: unknown, where: string): Json[] {
  if (typeof content === 'string' || absent(content)) return [{ type: 'text', text: content ?? '' }];
  return requireArray(content, where).map((part, i) => {
    const at = `${where}[${i}]`;
    const p = requireObjectAt(part, at);
    if (p.type === 'text') return { type: 'text', text: String(p.text ?? '') };
    if (p.type === 'image_url') {
      const url = String((p.image_url as Json | undefined)?.url ?? '');
      const data = /^data:([^;,]+);base64,(.*)$/s.exec(url);
      return {
        type: 'image',
        source: data ? { type: 'base64', media_type: data[1], data: data[2] } : { type: 'url', url },
      };
    }
    return untranslatable(at, `of type "${String(p.type)}" cannot be translated for ${FOR_ANTHROPIC}.`);
  });
}

function openAIToolToAnthropic(tool: unknown, where: string): Json {
  const t = requireObjectAt(tool, where);
  if (t.type !== 'function')
    untranslatable(
      `${where}.type`,
      `"${String(t.type)}" cannot be translated for ${FOR_ANTHROPIC}; only functions can.`,
    );
  const fn = requireObjectAt(t.function, `${where}.function`);
  const out: Json = { name: fn.name, input_schema: fn.parameters ?? { type: 'object', properties: {} } };
  if (!absent(fn.description)) out.description = fn.description;
  return out;
}

function openAIToolChoiceToAnthropic(choice: unknown): Json {
  if (choice === 'auto') return { type: 'auto' };
  if (choice === 'none') return { type: 'none' };
  if (choice === 'required') return { type: 'any' };
  if (isObject(choice) && choice.type === 'function' && isObject(choice.function))
    return { type: 'tool', name: choice.function.name };
  return untranslatable('tool_choice', `cannot be translated for ${FOR_ANTHROPIC}.`);
}

/** OpenAI's prompt_tokens count every prompt token; Anthropic's input_tokens leave out the cached ones. */
function openAIUsage(usage: Json | undefined): Json {
  const input = Number(usage?.input_tokens ?? 0);
  const cacheRead = Number(usage?.cache_read_input_tokens ?? 0);
  const cacheWrite = Number(usage?.cache_creation_input_tokens ?? 0);
  const output = Number(usage?.output_tokens ?? 0);
  const prompt = input + cacheRead + cacheWrite;
  return {
    prompt_tokens: prompt,
    completion_tokens: output,
    total_tokens: prompt + output,
    prompt_tokens_details: { cached_tokens: cacheRead },
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
