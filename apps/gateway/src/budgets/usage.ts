import { Observable, type ObservableInput, from } from 'rxjs';
import type { Usage } from './prices.js';

// A usage object is a few hundred bytes; past this the bytes after `"usage"` are not one.
const MAX_USAGE_BYTES = 8 * 1024;
const USAGE = Buffer.from('"usage"');

/**
 * The usage of a whole JSON answer, read from its tail: the last `"usage"`
 * field (providers put it at or near the end) is located and only that object
 * parsed, so a large answer is not parsed a second time.
 */
export function usageOfJson(bytes: Buffer): Usage | undefined {
  let at = bytes.lastIndexOf(USAGE);
  if (at < 0) return llamaUsageOf(bytes);
  // Inside a string the quotes are escaped (`\"usage\"`): not the field.
  while (at > 0 && bytes[at - 1] === 0x5c) at = bytes.lastIndexOf(USAGE, at - 1);
  if (at < 0) return undefined;
  const start = bytes.indexOf(0x7b, at + USAGE.length);
  if (start < 0 || start - at > 32) return undefined;
  const end = objectEnd(bytes, start, Math.min(bytes.length, start + MAX_USAGE_BYTES));
  if (end < 0) return undefined;
  try {
    return normalise(JSON.parse(bytes.subarray(start, end + 1).toString('utf8')));
  } catch {
    return undefined;
  }
}

const LLAMA_MARKER = Buffer.from('"tokens_predicted"');
const LLAMA_INPUT = /"tokens_evaluated"\s*:\s*(\d+)/;
const LLAMA_OUTPUT = /"tokens_predicted"\s*:\s*(\d+)/;

/** llama.cpp's own routes report `tokens_evaluated` / `tokens_predicted` side by side at the top level, near the end. */
function llamaUsageOf(bytes: Buffer): Usage | undefined {
  const at = bytes.lastIndexOf(LLAMA_MARKER);
  if (at < 0) return undefined;
  const text = bytes.toString('utf8', Math.max(0, at - 200), Math.min(bytes.length, at + 200));
  const output = LLAMA_OUTPUT.exec(text);
  const input = LLAMA_INPUT.exec(text);
  return output ? { input: input ? Number(input[1]) : 0, output: Number(output[1]), cached: 0 } : undefined;
}

/** Index of the `}` closing the object opened at `start`, or -1 before `limit`. */
function objectEnd(bytes: Buffer, start: number, limit: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < limit; i++) {
    const c = bytes[i];
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b) depth++;
    else if (c === 0x7d && --depth === 0) return i;
  }
  return -1;
}

/** The token counts of any provider's usage object (OpenAI chat, completions, embeddings, Responses; Anthropic). */
export function normalise(usage: unknown): Usage | undefined {
  if (typeof usage !== 'object' || usage === null) return undefined;
  const u = usage as Record<string, unknown>;
  const n = (value: unknown) =>
    typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;
  const details = (u.prompt_tokens_details ?? u.input_tokens_details) as Record<string, unknown> | undefined;
  if ('prompt_tokens' in u || 'completion_tokens' in u) {
    return { input: n(u.prompt_tokens), output: n(u.completion_tokens), cached: n(details?.cached_tokens) };
  }
  if ('input_tokens' in u || 'output_tokens' in u) {
    // Anthropic counts prompt-cache reads and writes apart from input_tokens; OpenAI's Responses API includes them.
    const cacheRead = n(u.cache_read_input_tokens);
    const anthropic = 'cache_read_input_tokens' in u || 'cache_creation_input_tokens' in u;
    const input = n(u.input_tokens) + (anthropic ? cacheRead + n(u.cache_creation_input_tokens) : 0);
    return { input, output: n(u.output_tokens), cached: anthropic ? cacheRead : n(details?.cached_tokens) };
  }
  return undefined;
}

/** llama.cpp's final stream event carries `tokens_evaluated` / `tokens_predicted` beside its `stop: true`. */
function llamaUsage(data: Record<string, unknown>): Usage | undefined {
  const output = data.tokens_predicted;
  if (typeof output !== 'number') return undefined;
  const input = data.tokens_evaluated;
  return {
    input: typeof input === 'number' && input > 0 ? Math.floor(input) : 0,
    output: Math.max(0, Math.floor(output)),
    cached: 0,
  };
}

/** Larger of each count: Anthropic streams report input at the start and output at the end. */
export function mergeUsage(a: Usage | undefined, b: Usage): Usage {
  return a
    ? { input: Math.max(a.input, b.input), output: Math.max(a.output, b.output), cached: Math.max(a.cached, b.cached) }
    : b;
}

/** The usage in one SSE data object: `usage` (OpenAI), `message.usage` (Anthropic's start), `response.usage` (Responses). */
export function usageOfEvent(data: unknown): Usage | undefined {
  if (typeof data !== 'object' || data === null) return undefined;
  const d = data as { usage?: unknown; message?: { usage?: unknown }; response?: { usage?: unknown } };
  return (
    normalise(d.usage) ??
    normalise(d.message?.usage) ??
    normalise(d.response?.usage) ??
    llamaUsage(data as Record<string, unknown>)
  );
}

/** Whether an OpenAI chunk is the usage-only chunk `include_usage` adds (no choices, usage set). */
export function isUsageChunk(data: unknown): boolean {
  const d = data as { choices?: unknown; usage?: unknown } | null;
  return (
    typeof d === 'object' &&
    d !== null &&
    Array.isArray(d.choices) &&
    d.choices.length === 0 &&
    typeof d.usage === 'object' &&
    d.usage !== null
  );
}

const MAX_CARRY = 1024 * 1024;

/**
 * Passes an SSE stream through, reading the usage it reports on the way:
 * only lines that mention `"usage"` are parsed. With `strip`, the usage-only
 * chunk the gateway asked for (the client did not) is left out, so the client
 * sees the stream it asked for. `onEnd` gets the usage when the stream ends
 * (completed or failed).
 */
export function tapUsage(
  chunks: ObservableInput<string>,
  strip: boolean,
  onEnd: (usage: Usage | undefined) => void,
): Observable<string> {
  return new Observable<string>((subscriber) => {
    let usage: Usage | undefined;
    let carry = '';
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      onEnd(usage);
    };
    const read = (line: string): boolean => {
      // A line is dropped only when it is the added usage chunk.
      if (!(line.includes('"usage"') || line.includes('"tokens_predicted"')) || !line.startsWith('data:')) return true;
      // Chunks before the usage chunk carry `"usage":null`: nothing to parse.
      if (line.includes('"usage":null') && !line.includes('"usage":{')) return true;
      let data: unknown;
      try {
        data = JSON.parse(line.slice(5));
      } catch {
        return true;
      }
      const found = usageOfEvent(data);
      if (found) usage = mergeUsage(usage, found);
      return !(strip && isUsageChunk(data));
    };
    const subscription = from(chunks).subscribe({
      next: (chunk) => {
        // Nearly every chunk of a long stream is whole events with no usage in them: passed on without splitting.
        if (
          !strip &&
          carry === '' &&
          chunk.endsWith('\n') &&
          !chunk.includes('"usage"') &&
          !chunk.includes('"tokens_predicted"')
        ) {
          subscriber.next(chunk);
          return;
        }
        const text = carry + chunk;
        const last = text.lastIndexOf('\n');
        if (last < 0) {
          carry = text.length > MAX_CARRY ? '' : text;
          if (!strip) subscriber.next(chunk);
          else if (text.length > MAX_CARRY) subscriber.next(text);
          return;
        }
        carry = text.slice(last + 1);
        const lines = text.slice(0, last).split('\n');
        if (!strip) {
          for (const line of lines) read(line.endsWith('\r') ? line.slice(0, -1) : line);
          subscriber.next(chunk);
          return;
        }
        const kept = lines.filter((line) => read(line.endsWith('\r') ? line.slice(0, -1) : line));
        if (kept.length > 0) subscriber.next(kept.join('\n') + '\n');
      },
      error: (error: unknown) => {
        if (strip && carry) subscriber.next(carry);
        end();
        subscriber.error(error);
      },
      complete: () => {
        if (carry && read(carry) && strip) subscriber.next(carry);
        end();
        subscriber.complete();
      },
    });
    return () => {
      subscription.unsubscribe();
      end();
    };
  });
}

/**
 * The request body to send when the gateway asks an OpenAI chat or completions stream for its usage: the client's
 * body with `stream_options.include_usage` set, or undefined when the client asked already (or does not stream).
 */
export function withStreamUsage(body: unknown): Record<string, unknown> | undefined {
  if (!needsStreamUsage(body)) return undefined;
  const b = body as Record<string, unknown>;
  return { ...b, stream_options: { ...(b.stream_options as object | null | undefined), include_usage: true } };
}

/** Whether `withStreamUsage` would change the body: it streams, and does not ask for its usage already. */
export function needsStreamUsage(body: unknown): boolean {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return false;
  const b = body as Record<string, unknown>;
  if (b.stream !== true) return false;
  const options = b.stream_options;
  if (options !== undefined && options !== null && typeof options !== 'object') return false;
  return (options as { include_usage?: unknown } | null | undefined)?.include_usage !== true;
}
