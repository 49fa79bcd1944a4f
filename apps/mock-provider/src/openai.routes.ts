import {
  allMessagesText,
  countWords,
  echoReply,
  embeddingFor,
  MAX_EMBEDDING_DIMS,
  embeddingToBase64,
  isRecord,
  lastUserText,
  LONG_MARKER,
  longReply,
  promptToText,
} from './content.js';
import type { Exchange } from './exchange.js';
import { namedSse, sse, unixSeconds, type RouteDefinition } from './route-definition.js';
import { chooseTool, lastToolResult, openAIChoice, openAITools, valueForSchema, type ToolCall } from './tools.js';

const SYSTEM_FINGERPRINT = 'fp_mock';
const MODEL_CREATED = unixSeconds();

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

function usageOf(promptTokens: number, completionTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
  };
}

function includeUsage(body: Record<string, unknown>): boolean {
  return isRecord(body.stream_options) && body.stream_options.include_usage === true;
}

function validateChat(body: Record<string, unknown>): string | undefined {
  const { messages } = body;
  if (!Array.isArray(messages) || messages.length === 0) return "'messages' must be a non-empty array.";
  if (!messages.every(isRecord)) return "Every entry of 'messages' must be an object.";
  return undefined;
}

/** The JSON schema of `response_format: { type: "json_schema" }`, when the request asks for structured output. */
function responseSchema(body: Record<string, unknown>): unknown {
  const format = body.response_format;
  if (!isRecord(format) || format.type !== 'json_schema' || !isRecord(format.json_schema)) return undefined;
  return format.json_schema.schema ?? { type: 'object', properties: {} };
}

/** Splits a tool call's argument text in two, as a real stream sends it in fragments. */
function fragments(text: string): string[] {
  const half = Math.ceil(text.length / 2);
  return text.length < 2 ? [text] : [text.slice(0, half), text.slice(half)];
}

async function chatCompletions(exchange: Exchange, body: Record<string, unknown>): Promise<void> {
  const messages = body.messages as unknown[];
  const toolResult = lastToolResult(messages);
  const userText = lastUserText(messages);
  const call: ToolCall | undefined =
    toolResult === undefined ? chooseTool(openAITools(body), openAIChoice(body.tool_choice), userText) : undefined;
  const schema = responseSchema(body);
  const answerText = toolResult ?? userText;
  const long = call === undefined && schema === undefined ? LONG_MARKER.exec(answerText) : null;
  const reply = long
    ? longReply(Number(long[1]))
    : schema === undefined
      ? echoReply(answerText, body.max_completion_tokens ?? body.max_tokens)
      : {
          text: JSON.stringify(valueForSchema(schema, answerText)),
          pieces: [JSON.stringify(valueForSchema(schema, answerText))],
          truncated: false,
        };
  const callId = `call_mock_${exchange.seq}`;
  const args = call ? JSON.stringify(call.args) : '';
  const completionTokens = call ? countWords(args) : reply.pieces.length;
  const usage = usageOf(countWords(allMessagesText(messages)), completionTokens);
  const id = `chatcmpl-mock-${exchange.seq}`;
  const created = unixSeconds();
  const model = exchange.requestedModel;
  const finishReason = call ? 'tool_calls' : reply.truncated ? 'length' : 'stop';

  if (!exchange.call.stream) {
    const message = call
      ? {
          role: 'assistant',
          content: null,
          refusal: null,
          tool_calls: [{ id: callId, type: 'function', function: { name: call.name, arguments: args } }],
        }
      : { role: 'assistant', content: reply.text, refusal: null };
    exchange.sendJson(200, {
      id,
      object: 'chat.completion',
      created,
      model,
      system_fingerprint: SYSTEM_FINGERPRINT,
      choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason }],
      usage,
    });
    return;
  }

  const withUsage = includeUsage(body);
  const base = { id, object: 'chat.completion.chunk', created, model, system_fingerprint: SYSTEM_FINGERPRINT };
  // With include_usage every chunk before the usage chunk carries `usage: null`, as OpenAI sends it.
  const usageSlot = withUsage ? { usage: null } : {};
  const chunk = (delta: object, finish: string | null): string =>
    sse({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...usageSlot });

  function* events(): Generator<string> {
    yield chunk({ role: 'assistant', content: call ? null : '' }, null);
    if (call) {
      yield chunk(
        { tool_calls: [{ index: 0, id: callId, type: 'function', function: { name: call.name, arguments: '' } }] },
        null,
      );
      for (const part of fragments(args))
        yield chunk({ tool_calls: [{ index: 0, function: { arguments: part } }] }, null);
    } else {
      for (const piece of reply.pieces) yield chunk({ content: piece }, null);
    }
    yield chunk({}, finishReason);
    if (withUsage) yield sse({ ...base, choices: [], usage });
    yield 'data: [DONE]\n\n';
  }
  await exchange.sendStream(events());
}

function validateCompletion(body: Record<string, unknown>): string | undefined {
  if (body.prompt === undefined || body.prompt === null) return "'prompt' is required.";
  return undefined;
}

async function completions(exchange: Exchange, body: Record<string, unknown>): Promise<void> {
  const prompt = promptToText(body.prompt);
  const reply = echoReply(prompt, body.max_tokens);
  const usage = usageOf(countWords(prompt), reply.pieces.length);
  const id = `cmpl-mock-${exchange.seq}`;
  const created = unixSeconds();
  const model = exchange.requestedModel;
  const finishReason = reply.truncated ? 'length' : 'stop';
  const base = { id, object: 'text_completion', created, model, system_fingerprint: SYSTEM_FINGERPRINT };

  if (!exchange.call.stream) {
    exchange.sendJson(200, {
      ...base,
      choices: [{ text: reply.text, index: 0, logprobs: null, finish_reason: finishReason }],
      usage,
    });
    return;
  }

  const withUsage = includeUsage(body);
  const usageSlot = withUsage ? { usage: null } : {};
  const chunk = (text: string, finish: string | null): string =>
    sse({ ...base, choices: [{ text, index: 0, logprobs: null, finish_reason: finish }], ...usageSlot });

  function* events(): Generator<string> {
    for (const piece of reply.pieces) yield chunk(piece, null);
    yield chunk('', finishReason);
    if (withUsage) yield sse({ ...base, choices: [], usage });
    yield 'data: [DONE]\n\n';
  }
  await exchange.sendStream(events());
}

/** Token-array inputs are embedded through their JSON text, which keeps them deterministic too. */
function embeddingInputs(input: unknown): string[] | undefined {
  if (typeof input === 'string') return input === '' ? undefined : [input];
  if (!Array.isArray(input) || input.length === 0) return undefined;
  if (input.every((item): item is string => typeof item === 'string')) return input;
  if (input.every((item) => typeof item === 'number')) return [JSON.stringify(input)];
  if (input.every((item) => Array.isArray(item) && item.every((n) => typeof n === 'number'))) {
    return input.map((item) => JSON.stringify(item));
  }
  return undefined;
}

function validateEmbeddings(body: Record<string, unknown>): string | undefined {
  if (embeddingInputs(body.input) === undefined) {
    return "'input' must be a non-empty string, an array of strings, or token arrays.";
  }
  if (body.encoding_format !== undefined && body.encoding_format !== 'float' && body.encoding_format !== 'base64') {
    return "'encoding_format' must be 'float' or 'base64'.";
  }
  const dims = body.dimensions;
  if (
    dims !== undefined &&
    !(Number.isInteger(dims) && (dims as number) >= 1 && (dims as number) <= MAX_EMBEDDING_DIMS)
  ) {
    return `'dimensions' must be an integer from 1 to ${MAX_EMBEDDING_DIMS}.`;
  }
  return undefined;
}

function embeddings(exchange: Exchange, body: Record<string, unknown>): void {
  const inputs = embeddingInputs(body.input) ?? [];
  // The openai SDK asks for base64 unless told otherwise, and decodes it itself.
  const base64 = body.encoding_format === 'base64';
  const dims = typeof body.dimensions === 'number' ? body.dimensions : undefined;
  const promptTokens = inputs.reduce((sum, text) => sum + countWords(text), 0);
  exchange.sendJson(200, {
    object: 'list',
    data: inputs.map((text, index) => {
      const vector = embeddingFor(text, dims);
      return { object: 'embedding', index, embedding: base64 ? embeddingToBase64(vector) : vector };
    }),
    model: exchange.requestedModel,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
  });
}

/** The text of Responses API `input`: a string, or message items (the last user one), or a function call's output. */
function responsesInput(input: unknown): { userText: string; toolOutput?: string; allText: string } {
  if (typeof input === 'string') return { userText: input, allText: input };
  const items = Array.isArray(input) ? input.filter(isRecord) : [];
  const last = items[items.length - 1];
  const allText = items
    .map((i) => (typeof i.output === 'string' ? i.output : promptToText(textOfParts(i.content))))
    .join('\n');
  if (last && last.type === 'function_call_output')
    return { userText: '', toolOutput: String(last.output ?? ''), allText };
  const users = items.filter((i) => i.role === 'user');
  const user = users[users.length - 1];
  return { userText: user ? textOfParts(user.content) : '', allText };
}

function textOfParts(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((p) => (isRecord(p) && typeof p.text === 'string' ? p.text : '')).join('');
}

function validateResponses(body: Record<string, unknown>): string | undefined {
  if (body.input === undefined) return "Missing required parameter: 'input'.";
  if (typeof body.input !== 'string' && !Array.isArray(body.input)) return "Invalid type for 'input'.";
  return undefined;
}

/** POST /v1/responses in OpenAI's shapes: a message or a function call; streams with sequence numbers and indexes. */
async function responses(exchange: Exchange, body: Record<string, unknown>): Promise<void> {
  const input = responsesInput(body.input);
  const tools = (Array.isArray(body.tools) ? body.tools : []).flatMap((t) =>
    isRecord(t) && t.type === 'function' && typeof t.name === 'string' ? [{ name: t.name, schema: t.parameters }] : [],
  );
  const choice =
    body.tool_choice === 'none' || body.tool_choice === 'required'
      ? body.tool_choice
      : isRecord(body.tool_choice) && typeof body.tool_choice.name === 'string'
        ? { name: body.tool_choice.name }
        : 'auto';
  const call = input.toolOutput === undefined ? chooseTool(tools, choice, input.userText) : undefined;
  const format =
    isRecord(body.text) && isRecord(body.text.format) && body.text.format.type === 'json_schema'
      ? body.text.format
      : undefined;
  const answerText = input.toolOutput ?? input.userText;
  const reply = format
    ? {
        text: JSON.stringify(valueForSchema(format.schema, answerText)),
        pieces: [JSON.stringify(valueForSchema(format.schema, answerText))],
        truncated: false,
      }
    : echoReply(answerText, body.max_output_tokens);
  const seq = exchange.seq;
  const id = `resp_mock_${seq}`;
  const createdAt = unixSeconds();
  const model = exchange.requestedModel;
  const args = call ? JSON.stringify(call.args) : '';
  const inputTokens =
    countWords(input.allText) + countWords(typeof body.instructions === 'string' ? body.instructions : '');
  const outputTokens = call ? countWords(args) : reply.pieces.length;
  const usage = {
    input_tokens: inputTokens,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: outputTokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: inputTokens + outputTokens,
  };
  const item = call
    ? {
        type: 'function_call',
        id: `fc_mock_${seq}`,
        call_id: `call_mock_${seq}`,
        name: call.name,
        arguments: args,
        status: 'completed',
      }
    : {
        type: 'message',
        id: `msg_mock_${seq}`,
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text: reply.text, annotations: [], logprobs: [] }],
      };
  const incomplete = !call && reply.truncated;
  const response = (status: string, output: unknown[], withUsage: boolean) => ({
    id,
    object: 'response',
    created_at: createdAt,
    status,
    error: null,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    model,
    output,
    parallel_tool_calls: true,
    previous_response_id: null,
    temperature: body.temperature ?? 1,
    text: body.text ?? { format: { type: 'text' } },
    tool_choice: body.tool_choice ?? 'auto',
    tools: body.tools ?? [],
    top_p: body.top_p ?? 1,
    usage: withUsage ? usage : null,
  });
  const finalStatus = incomplete ? 'incomplete' : 'completed';

  if (!exchange.call.stream) {
    exchange.sendJson(200, response(finalStatus, [item], true));
    return;
  }

  function* events(): Generator<string> {
    let n = 0;
    const ev = (type: string, payload: object) => namedSse(type, { type, sequence_number: n++, ...payload });
    yield ev('response.created', { response: response('in_progress', [], false) });
    yield ev('response.in_progress', { response: response('in_progress', [], false) });
    if (call) {
      const fc = item as { id: string };
      yield ev('response.output_item.added', {
        output_index: 0,
        item: { ...item, arguments: '', status: 'in_progress' },
      });
      for (const part of fragments(args))
        yield ev('response.function_call_arguments.delta', { item_id: fc.id, output_index: 0, delta: part });
      yield ev('response.function_call_arguments.done', { item_id: fc.id, output_index: 0, arguments: args });
      yield ev('response.output_item.done', { output_index: 0, item });
    } else {
      const msg = item as { id: string };
      const part = { type: 'output_text', text: '', annotations: [], logprobs: [] };
      yield ev('response.output_item.added', {
        output_index: 0,
        item: { ...item, status: 'in_progress', content: [] },
      });
      yield ev('response.content_part.added', { item_id: msg.id, output_index: 0, content_index: 0, part });
      for (const piece of reply.pieces) {
        yield ev('response.output_text.delta', {
          item_id: msg.id,
          output_index: 0,
          content_index: 0,
          delta: piece,
          logprobs: [],
        });
      }
      yield ev('response.output_text.done', {
        item_id: msg.id,
        output_index: 0,
        content_index: 0,
        text: reply.text,
        logprobs: [],
      });
      yield ev('response.content_part.done', {
        item_id: msg.id,
        output_index: 0,
        content_index: 0,
        part: { ...part, text: reply.text },
      });
      yield ev('response.output_item.done', { output_index: 0, item });
    }
    yield ev(incomplete ? 'response.incomplete' : 'response.completed', {
      response: response(finalStatus, [item], true),
    });
  }
  await exchange.sendStream(events());
}

function models(exchange: Exchange): void {
  exchange.sendJson(200, {
    object: 'list',
    data: [{ id: exchange.config.model, object: 'model', created: MODEL_CREATED, owned_by: 'mock-provider' }],
  });
}

export const OPENAI_ROUTES: readonly RouteDefinition[] = [
  {
    method: 'POST',
    paths: ['/v1/chat/completions', '/chat/completions'],
    family: 'openai',
    streams: true,
    validate: validateChat,
    handle: chatCompletions,
  },
  {
    method: 'POST',
    paths: ['/v1/completions'],
    family: 'openai',
    streams: true,
    validate: validateCompletion,
    handle: completions,
  },
  {
    method: 'POST',
    paths: ['/v1/embeddings'],
    family: 'openai',
    streams: false,
    validate: validateEmbeddings,
    handle: embeddings,
  },
  { method: 'GET', paths: ['/v1/models', '/models'], family: 'openai', streams: false, handle: models },
  {
    method: 'POST',
    paths: ['/v1/responses', '/responses'],
    family: 'openai',
    streams: true,
    validate: validateResponses,
    handle: responses,
  },
];
