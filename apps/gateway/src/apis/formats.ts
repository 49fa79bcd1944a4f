import type { ClientApi } from '../common/apis.js';

/**
 * How a stream is read: an API's own format, or `responses` (the OpenAI Responses API, served on an OpenAI route but
 * with named events and no `[DONE]`).
 */
export type StreamFormat = ClientApi | 'responses';

/** One API's answers as the gateway reads them: its stream's end and error events, its usage, its error shapes. */
export interface ApiFormat {
  /** `event:` names that end the stream, and that say it failed. */
  readonly endEvents: readonly string[];
  readonly errorEvents: readonly string[];
  /** A data object's `type` that ends the stream, and that says it failed. */
  readonly endTypes: readonly string[];
  readonly errorTypes: readonly string[];
  /** A `data:` line that is the end marker as it stands (OpenAI's `[DONE]`). */
  readonly endData?: string;
  /** Every prompt's last chunk says `"stop": true`; the stream ends once each prompt did (llama.cpp's own routes). */
  readonly stopPerPrompt: boolean;
  /**
   * Usage, errors and the end marker come last (the usage event right before `[DONE]`, an error as the last thing
   * sent): only a chunk's last lines need reading.
   */
  readonly saysAllAtEnd: boolean;
  /** Where an answer or stream event carries its usage object, as paths of fields. */
  readonly usageAt: readonly (readonly string[])[];
  /** Token counts at an event's top level instead of a usage object: input and output. */
  readonly tokenCounts?: { readonly input: string; readonly output: string };
  /**
   * The last event of a stream that broke after it started, in this API's shape (`timeout`: the gateway's time
   * limit; else `code` says why); without the leading blank line.
   */
  readonly streamError: (message: string, timeout: boolean, code: 'stream_interrupted' | 'leader_lost') => string;
}

/** OpenAI chat completions and completions (and llama-server's `/v1` routes). */
const OPENAI: ApiFormat = {
  endEvents: [],
  errorEvents: ['error'],
  endTypes: [],
  errorTypes: [],
  endData: '[DONE]',
  stopPerPrompt: false,
  saysAllAtEnd: true,
  usageAt: [['usage']],
  streamError: (message, timeout, code) =>
    sseEvent({
      error: {
        message,
        type: timeout ? 'timeout' : 'server_error',
        param: null,
        code: timeout ? 'upstream_timeout' : code,
      },
    }),
};

/** The OpenAI Responses API: `response.completed` (or `response.incomplete`, capped); no `[DONE]`. */
const RESPONSES: ApiFormat = {
  ...OPENAI,
  endEvents: ['response.completed', 'response.incomplete'],
  errorEvents: ['error', 'response.failed'],
  endTypes: ['response.completed', 'response.incomplete'],
  errorTypes: ['error', 'response.failed'],
  endData: undefined,
  saysAllAtEnd: false,
  usageAt: [['response', 'usage']],
};

/** Anthropic Messages: `message_stop`; an error comes as `event: error`; input counted at the start, output at the end. */
const ANTHROPIC: ApiFormat = {
  endEvents: ['message_stop'],
  errorEvents: ['error'],
  endTypes: ['message_stop'],
  errorTypes: [],
  stopPerPrompt: false,
  saysAllAtEnd: false,
  usageAt: [['message', 'usage'], ['usage']],
  streamError: (message, timeout) =>
    sseEvent({ type: 'error', error: { type: timeout ? 'timeout_error' : 'api_error', message } }, 'error'),
};

/** llama.cpp's own routes: each prompt's last chunk says `"stop": true` and counts its tokens beside it. */
const LLAMA: ApiFormat = {
  endEvents: [],
  errorEvents: ['error'],
  endTypes: [],
  errorTypes: [],
  stopPerPrompt: true,
  saysAllAtEnd: false,
  usageAt: [],
  tokenCounts: { input: 'tokens_evaluated', output: 'tokens_predicted' },
  streamError: (message, timeout) => sseEvent({ error: { code: timeout ? 504 : 502, message, type: 'server_error' } }),
};

/** Every API's table: what scanning, translation, usage reading and redaction know of each. */
export const API_FORMATS: Readonly<Record<StreamFormat, ApiFormat>> = {
  openai: OPENAI,
  responses: RESPONSES,
  anthropic: ANTHROPIC,
  llama: LLAMA,
};

/**
 * What marks an event as an error in any of these APIs: a data object with an `error` field, or an `event: error`
 * line (its data need not say "error"). Text without either is no error event.
 */
export const ERROR_MARKERS: readonly string[] = ['"error"', 'event: error', 'event:error'];

/** Whether text may hold an error event (see `ERROR_MARKERS`). */
export function mayHoldError(text: string): boolean {
  for (const marker of ERROR_MARKERS) if (text.includes(marker)) return true;
  return false;
}

/** One SSE event as text: `event:` line (if named), `data:` line, blank line. */
export function sseEvent(data: unknown, event?: string): string {
  const json = typeof data === 'string' ? data : JSON.stringify(data);
  return event ? `event: ${event}\ndata: ${json}\n\n` : `data: ${json}\n\n`;
}

/** An OpenAI-compatible base URL as the provider uses it: ending in `/v1` (OPENAI_BASE_URL conventionally does). */
export function openAIBase(url: string): string {
  return url.endsWith('/v1') ? url : `${url}/v1`;
}
