import { ApiError, invalidRequest } from '../common/api-error.js';
import { Interned } from '../common/interned.js';
import { JsonSyntaxError, JsonTooDeepError, scanJson, type JsonSkeleton } from './json-skeleton.js';
import type { ProxiedCall } from './proxied-call.js';

// Deeper than any real request; a provider parsing it recursively could overflow its stack.
const MAX_DEPTH = 128;
const JSON_TYPE = /^application\/(.+\+)?json\b/i;
const MULTIPART_TYPE = /^multipart\/form-data\b/i;
/** The top-level fields any feature reads (model, sampling, output bound, streaming): the rest of a body is never parsed. */
const SUMMARY_FIELDS = [
  'model',
  'stream',
  'stream_options',
  'temperature',
  'seed',
  'n',
  'best_of',
  'max_tokens',
  'max_completion_tokens',
  'max_output_tokens',
  'n_predict',
] as const;
const MODELS = new Interned(256);
export const EMPTY_BODY = Buffer.alloc(0);

/**
 * Reading the body: bounded by the gateway's limit, kept as the chunks that came (joined only when something needs
 * one Buffer). A request without a body is served at once.
 */
export function readBody(call: ProxiedCall): void {
  const request = call.request;
  const headers = request.headers;
  const length = headers['content-length'];
  const max = call.plane.parts.config.maxBodyBytes;
  if (length !== undefined && Number(length) > max) return call.delivery.fail(tooLarge(max));
  if ((length === undefined || length === '0') && headers['transfer-encoding'] === undefined) {
    request.resume();
    return void call.serve();
  }
  request.on('data', call.data);
  request.on('end', call.ended);
  // A client that resets mid-upload: 'close' on the response follows and accounts for it.
  request.on('error', noop);
}

/** One chunk of the body (the request's 'data' listener). */
export function readChunk(call: ProxiedCall, chunk: Buffer): void {
  call.size += chunk.length;
  const max = call.plane.parts.config.maxBodyBytes;
  if (call.size > max) {
    call.request.removeListener('data', call.data);
    call.request.removeListener('end', call.ended);
    call.body = call.parts = undefined;
    return call.delivery.fail(tooLarge(max));
  }
  if (call.body === undefined) call.body = chunk;
  else (call.parts ??= [call.body]).push(chunk);
}

/** The request's bytes in one Buffer, joined when first needed: a request answered from memory never needs them. */
export function joinBody(call: ProxiedCall): Buffer | undefined {
  if (call.parts) call.body = Buffer.concat(call.parts, call.size);
  call.parts = undefined;
  return call.body;
}

/**
 * The body's headers as the route takes them: a JSON object (or value), an upload, or nothing. Whether there is a
 * JSON body to read (see `scanBody`).
 */
export function checkContent(call: ProxiedCall): boolean {
  const info = call.info;
  if (info.method !== 'POST') return false;
  const headers = call.request.headers;
  const upload = info.body === 'multipart';
  const type = headers['content-type'];
  const present = call.size > 0;
  const matches = type !== undefined && (upload ? MULTIPART_TYPE : JSON_TYPE).test(type);
  // Said to be JSON but empty: not JSON (as the platforms' own parsers say when they see it).
  if (matches && !upload && !present)
    throw new ApiError(400, 'The request body is empty: it is not valid JSON.', 'invalid_json');
  if (!present) return false;
  if (!matches) {
    const expected = upload ? 'multipart/form-data' : 'application/json';
    throw new ApiError(
      415,
      `Content-Type must be ${expected}, got ${type ? `"${type.slice(0, 100)}"` : 'none'}.`,
      'unsupported_media_type',
    );
  }
  const encoding = headers['content-encoding'];
  if (encoding !== undefined && encoding.toLowerCase() !== 'identity') {
    throw new ApiError(415, 'The request body encoding is not supported.', 'unsupported_encoding');
  }
  return !upload;
}

/**
 * The JSON body's structure, checked without parsing it (see `scanJson`). Sets the context's body to the few
 * fields features read (the whole body only with --log-prompts).
 */
export function scanBody(call: ProxiedCall): JsonSkeleton {
  const info = call.info;
  let skeleton: JsonSkeleton;
  try {
    skeleton = scanJson(joinBody(call)!, MAX_DEPTH);
  } catch (error) {
    if (error instanceof JsonTooDeepError) throw new ApiError(400, error.message, 'nested_too_deep');
    if (error instanceof JsonSyntaxError)
      throw new ApiError(400, 'The request body is not valid JSON.', 'invalid_json');
    throw error;
  }
  if (info.body !== 'json') {
    if (skeleton.type !== 'object') {
      const got = skeleton.type === 'array' ? 'an array' : skeleton.type;
      throw invalidRequest(null, `The request body must be a JSON object, got ${got}.`);
    }
    const stream = skeleton.typeOf('stream');
    if (stream !== undefined && stream !== 'boolean' && stream !== 'null')
      throw invalidRequest('stream', 'stream must be true or false.');
  }
  const summary: Record<string, unknown> = {};
  if (skeleton.type === 'object')
    for (const name of SUMMARY_FIELDS) if (skeleton.has(name)) summary[name] = skeleton.field(name);
  // Kept with the answer (its tag) for as long as the window keeps it: one copy of each model name.
  if (typeof summary.model === 'string') summary.model = MODELS.of(summary.model);
  summarised(
    call,
    call.plane.parts.config.observability.logPrompts ? JSON.parse(call.body!.toString('utf8')) : summary,
  );
  return skeleton;
}

/** The request's body as features read it (its summary, or the whole body with --log-prompts). */
export function summarised(call: ProxiedCall, body: unknown): void {
  const context = call.context;
  context.body = body;
  const model = (body as { model?: unknown } | undefined)?.model;
  if (context.span && typeof model === 'string')
    context.span.setAttributes({ 'gen_ai.request.model': model.slice(0, 200) });
}

export function tooLarge(max: number): ApiError {
  return new ApiError(413, `The request body is larger than this gateway accepts (${max} bytes).`, 'request_too_large');
}

function noop(): void {}
