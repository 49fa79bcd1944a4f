import { allMessagesText, contentToText, countWords, echoReply, isRecord, lastUserText } from './content.js';
import type { Exchange } from './exchange.js';
import { namedSse, type RouteDefinition } from './route-definition.js';

function validateMessagesArray(body: Record<string, unknown>): string | undefined {
  const { messages } = body;
  if (!Array.isArray(messages) || messages.length === 0) return 'messages: must be a non-empty array';
  if (!messages.every(isRecord)) return 'messages: every entry must be an object';
  return undefined;
}

function validateMessages(body: Record<string, unknown>): string | undefined {
  if (typeof body.model !== 'string' || body.model === '') return 'model: Field required';
  const maxTokens = body.max_tokens;
  if (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 1) {
    return 'max_tokens: Field required (a positive integer)';
  }
  return validateMessagesArray(body);
}

function inputTokens(body: Record<string, unknown>): number {
  const messages = body.messages as unknown[];
  return countWords(contentToText(body.system)) + countWords(allMessagesText(messages));
}

async function messages(exchange: Exchange, body: Record<string, unknown>): Promise<void> {
  const reply = echoReply(lastUserText(body.messages as unknown[]), body.max_tokens);
  const id = `msg_mock_${exchange.seq}`;
  const model = exchange.requestedModel;
  const stopReason = reply.truncated ? 'max_tokens' : 'end_turn';
  const usage = {
    input_tokens: inputTokens(body),
    output_tokens: reply.pieces.length,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
  };

  if (!exchange.call.stream) {
    exchange.sendJson(200, {
      id,
      type: 'message',
      role: 'assistant',
      model,
      content: [{ type: 'text', text: reply.text }],
      stop_reason: stopReason,
      stop_sequence: null,
      usage,
    });
    return;
  }

  function* events(): Generator<string> {
    yield namedSse('message_start', {
      type: 'message_start',
      message: {
        id,
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { ...usage, output_tokens: 0 },
      },
    });
    yield namedSse('content_block_start', {
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'text', text: '' },
    });
    for (const piece of reply.pieces) {
      yield namedSse('content_block_delta', {
        type: 'content_block_delta',
        index: 0,
        delta: { type: 'text_delta', text: piece },
      });
    }
    yield namedSse('content_block_stop', { type: 'content_block_stop', index: 0 });
    yield namedSse('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: stopReason, stop_sequence: null },
      usage: { output_tokens: reply.pieces.length },
    });
    yield namedSse('message_stop', { type: 'message_stop' });
  }
  await exchange.sendStream(events());
}

function countTokens(exchange: Exchange, body: Record<string, unknown>): void {
  exchange.sendJson(200, { input_tokens: inputTokens(body) });
}

export const ANTHROPIC_ROUTES: readonly RouteDefinition[] = [
  {
    method: 'POST',
    paths: ['/v1/messages'],
    family: 'anthropic',
    streams: true,
    validate: validateMessages,
    handle: messages,
  },
  {
    method: 'POST',
    paths: ['/v1/messages/count_tokens'],
    family: 'anthropic',
    streams: false,
    validate: validateMessagesArray,
    handle: countTokens,
  },
];
