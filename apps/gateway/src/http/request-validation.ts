import { invalidRequest } from './api-error.js';

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The body as an object, or a 400 that says what was sent instead. */
export function requireObject(body: unknown): Json {
  if (!isObject(body)) {
    throw invalidRequest(
      null,
      body === undefined || (typeof body === 'object' && body !== null && Object.keys(body).length === 0)
        ? 'The request body must be a JSON object (Content-Type: application/json).'
        : `The request body must be a JSON object, got ${body === null ? 'null' : Array.isArray(body) ? 'an array' : typeof body}.`,
    );
  }
  return body;
}

function requireString(body: Json, field: string): void {
  const value = body[field];
  if (typeof value !== 'string' || value.length === 0) {
    throw invalidRequest(field, value === undefined ? `${field} is required.` : `${field} must be a non-empty string.`);
  }
}

function optional(body: Json, field: string, check: (v: unknown) => boolean, expected: string): void {
  const value = body[field];
  if (value !== undefined && value !== null && !check(value)) {
    throw invalidRequest(field, `${field} must be ${expected}.`);
  }
}

const isBool = (v: unknown) => typeof v === 'boolean';
const isNum = (v: unknown) => typeof v === 'number' && Number.isFinite(v);
const isPosInt = (v: unknown) => Number.isInteger(v) && (v as number) >= 1;

function requireMessages(body: Json, roles: string[]): Json[] {
  const messages = body.messages;
  if (!Array.isArray(messages)) {
    throw invalidRequest('messages', messages === undefined ? 'messages is required.' : 'messages must be an array.');
  }
  if (messages.length === 0) throw invalidRequest('messages', 'messages must contain at least one message.');
  messages.forEach((m: unknown, i) => {
    if (!isObject(m)) throw invalidRequest(`messages[${i}]`, `messages[${i}] must be an object.`);
    if (typeof m.role !== 'string' || !roles.includes(m.role)) {
      throw invalidRequest(`messages[${i}].role`, `messages[${i}].role must be one of ${roles.join(', ')}.`);
    }
    const content = m.content;
    if (content !== undefined && content !== null && typeof content !== 'string' && !Array.isArray(content)) {
      throw invalidRequest(`messages[${i}].content`, `messages[${i}].content must be a string or an array.`);
    }
  });
  return messages as Json[];
}

function samplingFields(body: Json): void {
  optional(body, 'stream', isBool, 'true or false');
  optional(body, 'temperature', (v) => isNum(v) && (v as number) >= 0 && (v as number) <= 2, 'a number from 0 to 2');
  optional(body, 'top_p', (v) => isNum(v) && (v as number) >= 0 && (v as number) <= 1, 'a number from 0 to 1');
  optional(body, 'max_tokens', isPosInt, 'a positive integer');
  optional(body, 'max_completion_tokens', isPosInt, 'a positive integer');
  optional(body, 'n', isPosInt, 'a positive integer');
  optional(body, 'stream_options', isObject, 'an object');
}

export function validateChat(body: unknown): Json {
  const o = requireObject(body);
  requireString(o, 'model');
  requireMessages(o, ['system', 'developer', 'user', 'assistant', 'tool', 'function']);
  samplingFields(o);
  return o;
}

export function validateCompletion(body: unknown): Json {
  const o = requireObject(body);
  requireString(o, 'model');
  const prompt = o.prompt;
  if (typeof prompt !== 'string' && !Array.isArray(prompt)) {
    throw invalidRequest('prompt', prompt === undefined ? 'prompt is required.' : 'prompt must be a string or an array.');
  }
  samplingFields(o);
  return o;
}

export function validateEmbeddings(body: unknown): Json {
  const o = requireObject(body);
  requireString(o, 'model');
  const input = o.input;
  if (typeof input !== 'string' && !(Array.isArray(input) && input.length > 0)) {
    throw invalidRequest('input', input === undefined ? 'input is required.' : 'input must be a string or a non-empty array.');
  }
  return o;
}

export function validateMessages(body: unknown): Json {
  const o = requireObject(body);
  requireString(o, 'model');
  if (!isPosInt(o.max_tokens)) {
    throw invalidRequest('max_tokens', o.max_tokens === undefined ? 'max_tokens is required.' : 'max_tokens must be a positive integer.');
  }
  requireMessages(o, ['user', 'assistant']);
  optional(o, 'system', (v) => typeof v === 'string' || Array.isArray(v), 'a string or an array of text blocks');
  optional(o, 'stream', isBool, 'true or false');
  optional(o, 'temperature', (v) => isNum(v) && (v as number) >= 0 && (v as number) <= 1, 'a number from 0 to 1');
  optional(o, 'stop_sequences', Array.isArray, 'an array of strings');
  return o;
}

export function validateNativeCompletion(body: unknown): Json {
  const o = requireObject(body);
  const prompt = o.prompt;
  if (typeof prompt !== 'string' && !Array.isArray(prompt) && !isObject(prompt)) {
    throw invalidRequest('prompt', prompt === undefined ? 'prompt is required.' : 'prompt must be a string, an array or an object.');
  }
  optional(o, 'stream', isBool, 'true or false');
  optional(o, 'n_predict', (v) => Number.isInteger(v) && (v as number) >= -1, 'an integer >= -1');
  return o;
}

export function validateTokenize(body: unknown): Json {
  const o = requireObject(body);
  if (typeof o.content !== 'string') throw invalidRequest('content', 'content must be a string.');
  return o;
}

export function validateDetokenize(body: unknown): Json {
  const o = requireObject(body);
  if (!Array.isArray(o.tokens) || !o.tokens.every((t) => Number.isInteger(t))) {
    throw invalidRequest('tokens', 'tokens must be an array of integers.');
  }
  return o;
}

export function validateApplyTemplate(body: unknown): Json {
  const o = requireObject(body);
  requireMessages(o, ['system', 'developer', 'user', 'assistant', 'tool']);
  return o;
}
