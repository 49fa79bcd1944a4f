import { createHash } from 'node:crypto';

/**
 * Deterministic stand-ins for model behaviour. Everything here is a pure function of the request so a test can
 * predict an answer exactly and tell two answers apart.
 */

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Text of an OpenAI or Anthropic message `content`: a string, or the text parts of a content-part array. */
export function contentToText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  const parts: string[] = [];
  for (const part of content) {
    if (typeof part === 'string') parts.push(part);
    else if (isRecord(part) && typeof part.text === 'string') parts.push(part.text);
  }
  return parts.join('\n');
}

/** The last user message, falling back to the last message of any role. */
export function lastUserText(messages: readonly unknown[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (isRecord(message) && message.role === 'user') return contentToText(message.content);
  }
  const last = messages[messages.length - 1];
  return isRecord(last) ? contentToText(last.content) : '';
}

export function allMessagesText(messages: readonly unknown[]): string {
  return messages.map((m) => (isRecord(m) ? contentToText(m.content) : '')).join('\n');
}

/** Token counts in usage fields are whitespace-separated words: cheap, stable and of a plausible magnitude. */
export function countWords(text: string): number {
  let count = 0;
  for (const word of text.split(/\s+/)) if (word !== '') count++;
  return count;
}

/** Stream pieces, one per word; joined they give back the text exactly. */
export function splitWords(text: string): string[] {
  const pieces = text.match(/\s*\S+\s*/g);
  if (pieces === null) return text === '' ? [] : [text];
  return pieces;
}

export interface EchoReply {
  text: string;
  pieces: string[];
  /** True when the reply was cut short by the request's token limit. */
  truncated: boolean;
}

/**
 * `Echo: <input>`. A numeric `limit` (max_tokens, n_predict) caps the number of words, which lets tests exercise the
 * length/max_tokens/limit finish reasons; a negative or missing limit means no cap.
 */
export function echoReply(input: string, limit: unknown): EchoReply {
  const all = splitWords(`Echo: ${input}`);
  const cap = typeof limit === 'number' && Number.isInteger(limit) && limit >= 0 ? limit : Infinity;
  const pieces = all.length > cap ? all.slice(0, cap) : all;
  return { text: pieces.join(''), pieces, truncated: pieces.length < all.length };
}

/**
 * `mock:long-<KiB>` in the last message: a chat answer of about that many KiB (at most 16 MiB) in numbered pieces of
 * 512 bytes (an event each), for streams too long to keep whole; a missing or repeated piece shows in the text.
 */
export const LONG_MARKER = /mock:long-(\d{1,5})/;
const LONG_PIECE = 512;

export function longReply(kib: number): EchoReply {
  const total = Math.min(kib, 16 * 1024) * 1024;
  const pieces: string[] = [];
  for (let at = 0; at < total; at += LONG_PIECE) {
    const size = Math.min(LONG_PIECE, total - at);
    pieces.push(`${String(pieces.length).padStart(6, '0')} ${'x'.repeat(Math.max(0, size - 8))} `);
  }
  return { text: pieces.join(''), pieces, truncated: false };
}

/** Unit-length vector derived from sha256 of the input, so equal inputs embed equally. */
export const EMBEDDING_DIMS = 8;

/** Most dimensions a request may ask for (OpenAI's `dimensions`): enough for answers of a megabyte and more. */
export const MAX_EMBEDDING_DIMS = 4096;

export function embeddingFor(input: string, dims = EMBEDDING_DIMS): number[] {
  const digest = createHash('sha256').update(input).digest();
  const raw: number[] = [];
  // The digest gives the first 16 values; a xorshift generator seeded by it gives the rest, cheaply.
  for (let i = 0; i < 16 && raw.length < dims; i++) raw.push(digest.readInt16BE(i * 2) / 32768);
  let x = digest.readUInt32BE(0) | 1;
  while (raw.length < dims) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    raw.push((x | 0) / 2147483648);
  }
  const norm = Math.sqrt(raw.reduce((sum, v) => sum + v * v, 0)) || 1;
  return raw.map((v) => Math.round((v / norm) * 1e6) / 1e6);
}

/** Little-endian float32 bytes, the wire form OpenAI uses for `encoding_format: "base64"`. */
export function embeddingToBase64(vector: readonly number[]): string {
  return Buffer.from(new Float32Array(vector).buffer).toString('base64');
}

/** One token per Unicode code point: trivially reversible by `detokenize`. */
export function tokenize(content: string): number[] {
  const ids: number[] = [];
  for (const char of content) ids.push(char.codePointAt(0) ?? 0);
  return ids;
}

export function isTokenId(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= 0x10ffff;
}

export function detokenize(ids: readonly number[]): string {
  let out = '';
  for (const id of ids) out += String.fromCodePoint(id);
  return out;
}

export const CHATML_TEMPLATE =
  '{% for message in messages %}' +
  "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}" +
  '{% endfor %}' +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

export function renderChatML(messages: readonly unknown[]): string {
  let prompt = '';
  for (const message of messages) {
    const role = isRecord(message) && typeof message.role === 'string' ? message.role : 'user';
    const content = isRecord(message) ? contentToText(message.content) : '';
    prompt += `<|im_start|>${role}\n${content}<|im_end|>\n`;
  }
  return `${prompt}<|im_start|>assistant\n`;
}

/** Hash of a credential as recorded in the call log; use it in tests to check which key reached the provider. */
export function hashCredential(credential: string): string {
  return createHash('sha256').update(credential).digest('hex').slice(0, 12);
}

/** Prompt text of a llama.cpp native or OpenAI legacy completion: strings as they are, anything else as JSON. */
export function promptToText(prompt: unknown): string {
  if (typeof prompt === 'string') return prompt;
  if (Array.isArray(prompt) && prompt.length === 1 && typeof prompt[0] === 'string') return prompt[0];
  return JSON.stringify(prompt) ?? '';
}
