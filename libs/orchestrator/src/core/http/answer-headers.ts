import { RawResponse, StreamedResponse, isRawResponse, isStreamedResponse } from '../events.js';

/** Response header telling how dedup answered: `miss`, `joined` or `cached`. */
export const DEDUP_HEADER = 'x-orchestrator-dedup';

/**
 * Headers never copied from the leader's response to the others: per-response
 * framing and dates, this package's own, and `set-cookie` (a session cookie
 * made for one caller must never reach another).
 */
const NOT_SHARED: ReadonlySet<string> = new Set([
  'set-cookie',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'date',
  'age',
  DEDUP_HEADER,
]);

export type HeaderValues = Record<string, number | string | readonly string[] | undefined>;

/** What the handler set on its response while it ran: headers new since `before`, or changed. */
export function headersSetSince(before: HeaderValues, now: HeaderValues): Record<string, string> | undefined {
  let set: Record<string, string> | undefined;
  for (const [name, value] of Object.entries(now)) {
    if (value === undefined || NOT_SHARED.has(name)) continue;
    const text = Array.isArray(value) ? value.join(', ') : String(value);
    const earlier = before[name];
    if (earlier !== undefined && (Array.isArray(earlier) ? earlier.join(', ') : String(earlier)) === text) continue;
    (set ??= {})[name] = text;
  }
  return set;
}

// A string brand, not a symbol: the envelope crosses the shared window (Redis) and the fleet as JSON.
const ANSWER = 'nest-prompt-orchestrator:answer';

/** A handler's value with the headers it set: plain data, so that it is stored and shared as it is. */
interface AnswerWithHeaders {
  [ANSWER]: 1;
  value: unknown;
  headers: Record<string, string>;
}

/**
 * The handler's answer with the headers it set at run time made part of it,
 * so that every joined and replayed caller gets them: on a stream's head, on
 * a `RawResponse`'s headers, or around a plain value.
 */
export function withHandlerHeaders(value: unknown, headers: Record<string, string> | undefined): unknown {
  if (!headers) return value;
  if (isStreamedResponse(value)) {
    return new StreamedResponse(
      value.chunks,
      { ...value.head, headers: { ...headers, ...value.head.headers } },
      value.formatError,
    );
  }
  if (isRawResponse(value))
    return new RawResponse(value.body, value.contentType, { ...headers, ...value.headers }, value.status);
  return { [ANSWER]: 1, value, headers } satisfies AnswerWithHeaders;
}

/** The value as the handler returned it, and the headers to send with it (see `withHandlerHeaders`). */
export function unwrapAnswer(value: unknown): { value: unknown; headers?: Record<string, string> } {
  if (typeof value === 'object' && value !== null && (value as Partial<AnswerWithHeaders>)[ANSWER] === 1) {
    const answer = value as AnswerWithHeaders;
    return { value: answer.value, headers: answer.headers };
  }
  return { value };
}
