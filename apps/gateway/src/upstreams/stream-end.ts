import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { Observable } from 'rxjs';
import type { ClientApi } from '../common/apis.js';

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

/**
 * How a stream ends: an API's own end marker, or `responses` (the OpenAI Responses API: a `response.completed` or
 * `response.incomplete` event, no `[DONE]`).
 */
export type StreamFormat = ClientApi | 'responses';

type Verdict = 'end' | 'error' | undefined;

/** Reads the events of one stream in the given API: after each, whether the stream is complete, failed, or neither. */
type EndCheck = () => (event: EventSourceMessage) => Verdict;

const END_CHECKS: Record<StreamFormat, EndCheck> = {
  // OpenAI (and llama-server's /v1 routes): `data: [DONE]`; an error comes as a data object with `error`.
  openai: () => (event) => (event.data === '[DONE]' ? 'end' : hasErrorField(event.data) ? 'error' : undefined),
  // The Responses API: `response.completed` (or `response.incomplete`, capped); `error` or `response.failed` is an error.
  responses: () => (event) => {
    const type = event.event ?? (parse(event.data) as { type?: unknown } | undefined)?.type;
    if (type === 'error' || type === 'response.failed' || hasErrorField(event.data)) return 'error';
    return type === 'response.completed' || type === 'response.incomplete' ? 'end' : undefined;
  },
  // Anthropic: `message_stop`; an error comes as `event: error`.
  anthropic: () => (event) =>
    event.event === 'error'
      ? 'error'
      : event.event === 'message_stop' || isType(event.data, 'message_stop')
        ? 'end'
        : undefined,
  // llama.cpp's native routes: every prompt's last chunk says `"stop": true`; an error comes as a data object with `error`.
  llama: () => {
    const unfinished = new Set<number>();
    let finished = false;
    return (event) => {
      if (hasErrorField(event.data)) return 'error';
      const chunk = parse(event.data) as { index?: unknown; stop?: unknown } | undefined;
      const index = typeof chunk?.index === 'number' ? chunk.index : 0;
      if (chunk?.stop === true) {
        unfinished.delete(index);
        finished = true;
      } else unfinished.add(index);
      return finished && unfinished.size === 0 ? 'end' : undefined;
    };
  },
};

/**
 * Passes an upstream SSE stream through unchanged, reading it on the way:
 * a stream that completes without its API's end marker, or that carries an
 * error event, fails with `UpstreamStreamError` instead of ending cleanly.
 */
export function checkStreamEnd(text: Observable<string>, format: StreamFormat): Observable<string> {
  return new Observable<string>((subscriber) => {
    const check = END_CHECKS[format]();
    let verdict: Verdict;
    let errorEvent: unknown;
    const parser = createParser({
      onEvent: (event) => {
        if (verdict === 'error') return;
        verdict = check(event);
        if (verdict === 'error') errorEvent = parse(event.data);
      },
    });
    const subscription = text.subscribe({
      next(chunk) {
        subscriber.next(chunk);
        parser.feed(chunk);
        if (verdict === 'error')
          subscriber.error(new UpstreamStreamError('The provider sent an error in the stream.', true, errorEvent));
      },
      error: (error: unknown) => subscriber.error(error),
      complete() {
        if (verdict === 'end') subscriber.complete();
        else subscriber.error(new UpstreamStreamError('The provider ended the stream before its end marker.', false));
      },
    });
    return () => subscription.unsubscribe();
  });
}

function parse(data: string): unknown {
  try {
    return JSON.parse(data);
  } catch {
    return undefined;
  }
}

// Cheap tests first: most events are neither, and parsing every chunk of a long stream twice costs.
function hasErrorField(data: string): boolean {
  if (!data.includes('"error"')) return false;
  const value = parse(data) as { error?: unknown } | undefined;
  return typeof value === 'object' && value !== null && value.error !== undefined && value.error !== null;
}

function isType(data: string, type: string): boolean {
  return data.includes(`"${type}"`) && (parse(data) as { type?: unknown } | undefined)?.type === type;
}
