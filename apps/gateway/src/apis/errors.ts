import type { ClientApi } from '../common/apis.js';

// How a provider's answer says it failed, in every API here: an error status with an error body, a 2xx body that is
// not what the route expects, or an error event in a stream (or a stream cut before its end marker).

/** The provider answered with an error status; relayed to the client after the retry policy ran. */
export class UpstreamHttpError extends Error {
  override name = 'UpstreamHttpError';
  private parsed?: { value: unknown };

  constructor(
    readonly status: number,
    /** The error body as the provider sent it (capped). */
    readonly body: Buffer,
    readonly contentType: string | undefined,
    /** The API the provider answered in: its error format. */
    readonly api: ClientApi,
    readonly retryAfter?: string,
  ) {
    super(`The provider answered ${status}.`);
  }

  /** The body parsed as JSON, or undefined when it is not JSON. */
  get json(): unknown {
    if (!this.parsed) {
      let value: unknown;
      try {
        value = JSON.parse(this.body.toString('utf8'));
      } catch {
        value = undefined;
      }
      this.parsed = { value };
    }
    return this.parsed.value;
  }

  /** The message of an OpenAI-, Anthropic- or llama.cpp-shaped error body. */
  get upstreamMessage(): string | undefined {
    return upstreamMessage(this.json);
  }
}

/** The provider's 2xx answer was not what the route expects (e.g. not JSON). */
export class UpstreamProtocolError extends Error {
  override name = 'UpstreamProtocolError';
  readonly status = 502;
}

/**
 * A streamed answer that did not finish: it ended before its end marker, or
 * the provider sent an error event in it. Either way it is not an answer: it
 * reaches every caller as an error and is never kept in the window.
 */
export class UpstreamStreamError extends Error {
  override name = 'UpstreamStreamError';
  /** A stream the provider cut or failed counts against it (and against the breaker), as a 502 would. */
  readonly status = 502;

  constructor(
    message: string,
    /** The provider's own error event already went to the client with the stream: nothing more is to be written. */
    readonly delivered: boolean,
    /** That error event's data, parsed (e.g. llama.cpp's `{"error":{"code":400,...}}` about the request itself). */
    readonly event?: unknown,
  ) {
    super(message);
  }
}

/** An error body is only relayed or read for its message: more than this is not worth holding. */
export const MAX_ERROR_BODY = 64 * 1024;

/**
 * Whether a JSON body's first key is `error`: how every provider here shapes
 * an error object. Read from the first bytes only, so answers are not parsed.
 */
export function startsWithErrorField(body: Buffer): boolean {
  return /^\s*\{\s*"error"\s*:/.test(body.subarray(0, 64).toString('latin1'));
}

/** A JSON document starts with `{` or `[` (after whitespace); anything else is not what a JSON route sends. */
export function looksLikeJson(body: Buffer): boolean {
  for (const byte of body) {
    if (byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09) continue;
    return byte === 0x7b || byte === 0x5b;
  }
  return false;
}

/** The message of an OpenAI-, Anthropic- or llama.cpp-shaped error body (`error` a string, or an object's `message`). */
export function upstreamMessage(body: unknown): string | undefined {
  const error = (body as { error?: unknown } | undefined)?.error;
  if (typeof error === 'string') return error;
  const message = (error as { message?: unknown } | undefined)?.message;
  return typeof message === 'string' ? message : undefined;
}
