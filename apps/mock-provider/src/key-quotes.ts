import type { Exchange } from './exchange.js';

/**
 * `mock:quote-key-<shape>[-<escape>]` in a request's body: the mock answers with the key it was sent (Authorization
 * or `x-api-key`) quoted back in that shape, written with that JSON escaping, as a careless provider's error would.
 * Tests drive the gateway's redaction of every shape with it.
 *
 * Shapes: `body` (a 401 JSON error body), `chat` (a chat stream's `event: error` whose data has no `error` field),
 * `null` (a chunk with `"error": null` and the key in another field), `split` (`chat`, with the key cut across two
 * writes), `responses` (the Responses API's `event: error`), `anthropic` (`event: error`), `llama` (a data object
 * with `error`). Escapes: `plain`, `dash` (every `-` as `\u002d`), `all` (every character as `\uXXXX`).
 */
export const QUOTE_KEY_MARKER = /mock:quote-key-(body|chat|null|split|responses|anthropic|llama)(?:-(plain|dash|all))?/;

export type QuoteShape = 'body' | 'chat' | 'null' | 'split' | 'responses' | 'anthropic' | 'llama';
export type QuoteEscape = 'plain' | 'dash' | 'all';

const HOLE = '\u0000KEY\u0000';
// The hole as JSON.stringify writes it inside a string.
const HOLE_JSON = JSON.stringify(HOLE).slice(1, -1);

/** The key as it would sit inside a JSON string, in the chosen escaping. */
export function escapeKey(key: string, escape: QuoteEscape): string {
  const plain = JSON.stringify(key).slice(1, -1);
  if (escape === 'dash') return plain.replace(/-/g, '\\u002d');
  if (escape === 'all')
    return [...key].map((char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
  return plain;
}

/** The key the request presented, as a provider reads it. */
export function keyOf(exchange: Exchange): string {
  const authorization = exchange.req.headers.authorization;
  const apiKey = exchange.req.headers['x-api-key'];
  if (typeof authorization === 'string' && authorization !== '') return authorization.replace(/^Bearer\s+/i, '');
  return typeof apiKey === 'string' ? apiKey : '';
}

function json(value: unknown, key: string): string {
  return JSON.stringify(value).split(HOLE_JSON).join(key);
}

/** Answers the exchange with its key quoted in `shape`, escaped as `escape`. */
export async function quoteKey(exchange: Exchange, shape: QuoteShape, escape: QuoteEscape): Promise<void> {
  const key = escapeKey(keyOf(exchange), escape);
  const message = `Incorrect API key provided: ${HOLE}.`;
  const res = exchange.res;
  if (shape === 'body') {
    const body = json({ error: { message, type: 'invalid_request_error', param: null, code: 'invalid_api_key' } }, key);
    exchange.call.status = 401;
    res.writeHead(401, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': String(Buffer.byteLength(body)),
    });
    res.end(body);
    return;
  }
  exchange.call.status = 200;
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  const first = {
    id: 'chatcmpl-quote',
    object: 'chat.completion.chunk',
    choices: [{ index: 0, delta: { content: 'Hi' }, finish_reason: null }],
  };
  let events: string[];
  switch (shape) {
    case 'chat':
    case 'split':
      events = [
        `data: ${JSON.stringify(first)}\n\n`,
        `event: error\ndata: ${json({ message, type: 'server_error', code: 'invalid_api_key' }, key)}\n\n`,
      ];
      break;
    case 'null':
      events = [`data: ${json({ ...first, error: null, detail: message }, key)}\n\n`, 'data: [DONE]\n\n'];
      break;
    case 'responses':
      events = [
        `event: response.created\ndata: ${JSON.stringify({ type: 'response.created', sequence_number: 0, response: { id: 'resp_quote', status: 'in_progress' } })}\n\n`,
        `event: error\ndata: ${json({ type: 'error', code: 'invalid_api_key', message, param: null, sequence_number: 1 }, key)}\n\n`,
      ];
      break;
    case 'anthropic':
      events = [
        `event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message: { id: 'msg_quote', type: 'message', role: 'assistant', content: [], model: 'claude', usage: { input_tokens: 1, output_tokens: 0 } } })}\n\n`,
        `event: error\ndata: ${json({ type: 'error', error: { type: 'authentication_error', message } }, key)}\n\n`,
      ];
      break;
    case 'llama':
      events = [
        `data: ${JSON.stringify({ content: 'Hi', stop: false, index: 0 })}\n\n`,
        `data: ${json({ error: { code: 401, message, type: 'authentication_error' } }, key)}\n\n`,
      ];
      break;
  }
  for (const event of events) {
    if (shape === 'split' && event.includes(key)) {
      // Cut in the middle of the key, sent apart: the gateway reads them as two chunks.
      const at = event.indexOf(key) + Math.floor(key.length / 2);
      res.write(event.slice(0, at));
      await exchange.wait(30);
      res.write(event.slice(at));
    } else res.write(event);
    await exchange.wait(5);
  }
  res.end();
}
