import {
  allMessagesText,
  countWords,
  echoReply,
  embeddingFor,
  MAX_EMBEDDING_DIMS,
  embeddingToBase64,
  isRecord,
  lastUserText,
  promptToText,
} from './content.js';
import type { Exchange } from './exchange.js';
import { sse, unixSeconds, type RouteDefinition } from './route-definition.js';

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

async function chatCompletions(exchange: Exchange, body: Record<string, unknown>): Promise<void> {
  const messages = body.messages as unknown[];
  const reply = echoReply(lastUserText(messages), body.max_completion_tokens ?? body.max_tokens);
  const usage = usageOf(countWords(allMessagesText(messages)), reply.pieces.length);
  const id = `chatcmpl-mock-${exchange.seq}`;
  const created = unixSeconds();
  const model = exchange.requestedModel;
  const finishReason = reply.truncated ? 'length' : 'stop';

  if (!exchange.call.stream) {
    exchange.sendJson(200, {
      id,
      object: 'chat.completion',
      created,
      model,
      system_fingerprint: SYSTEM_FINGERPRINT,
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: reply.text, refusal: null },
          logprobs: null,
          finish_reason: finishReason,
        },
      ],
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
    yield chunk({ role: 'assistant', content: '' }, null);
    for (const piece of reply.pieces) yield chunk({ content: piece }, null);
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
  if (dims !== undefined && !(Number.isInteger(dims) && (dims as number) >= 1 && (dims as number) <= MAX_EMBEDDING_DIMS)) {
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
];
