import { allMessagesText, contentToText, countWords, echoReply, isRecord, lastUserText } from './content.js';
import type { Exchange } from './exchange.js';
import { namedSse, type RouteDefinition } from './route-definition.js';
import { chooseTool, lastToolResult } from './tools.js';

function anthropicTools(body: Record<string, unknown>): Array<{ name: string; schema: unknown }> {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  return tools.flatMap((t) =>
    isRecord(t) && typeof t.name === 'string' ? [{ name: t.name, schema: t.input_schema }] : [],
  );
}

function anthropicChoice(value: unknown): 'auto' | 'none' | 'required' | { name: string } {
  if (!isRecord(value)) return 'auto';
  if (value.type === 'none') return 'none';
  if (value.type === 'any') return 'required';
  if (value.type === 'tool' && typeof value.name === 'string') return { name: value.name };
  return 'auto';
}

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
  const history = body.messages as unknown[];
  const toolResult = lastToolResult(history);
  const call =
    toolResult === undefined
      ? chooseTool(anthropicTools(body), anthropicChoice(body.tool_choice), lastUserText(history))
      : undefined;
  const reply = echoReply(toolResult ?? lastUserText(history), body.max_tokens);
  const id = `msg_mock_${exchange.seq}`;
  const toolId = `toolu_mock_${exchange.seq}`;
  const model = exchange.requestedModel;
  const args = call ? JSON.stringify(call.args) : '';
  const outputTokens = call ? countWords(args) : reply.pieces.length;
  const stopReason = call ? 'tool_use' : reply.truncated ? 'max_tokens' : 'end_turn';
  const usage = {
    input_tokens: inputTokens(body),
    output_tokens: outputTokens,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
  };
  const block = call
    ? { type: 'tool_use', id: toolId, name: call.name, input: call.args }
    : { type: 'text', text: reply.text };

  if (!exchange.call.stream) {
    exchange.sendJson(200, {
      id,
      type: 'message',
      role: 'assistant',
      model,
      content: [block],
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
      content_block: call ? { ...block, input: {} } : { type: 'text', text: '' },
    });
    if (call) {
      const half = Math.ceil(args.length / 2);
      for (const partial of [args.slice(0, half), args.slice(half)]) {
        yield namedSse('content_block_delta', {
          type: 'content_block_delta',
          index: 0,
          delta: { type: 'input_json_delta', partial_json: partial },
        });
      }
    } else {
      for (const piece of reply.pieces) {
        yield namedSse('content_block_delta', {
          type: 'content_block_delta',
          index: 0,
          delta: { type: 'text_delta', text: piece },
        });
      }
    }
    yield namedSse('content_block_stop', { type: 'content_block_stop', index: 0 });
    yield namedSse('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: stopReason, stop_sequence: null },
      usage: { output_tokens: outputTokens },
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
