import {
  absent,
  isObject,
  parseArguments,
  refuseUnknown,
  requireArray,
  requireObjectAt,
  untranslatable,
  type Json,
} from './anthropic-openai-common.js';

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

/** Text of a string or of text blocks or parts (Anthropic `system`, tool results; OpenAI content). */
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

/** Text of an OpenAI message's content: a string, text parts, or nothing. */
function openAIText(content: unknown, where: string): string {
  return absent(content) ? '' : anthropicText(content, where);
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
