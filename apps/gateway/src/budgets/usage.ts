import { Observable, type ObservableInput, from } from 'rxjs';
import type { Usage } from './prices.js';
import { isUsageChunk, mergeUsage, usageOfEvent } from '../apis/usage.js';

// Reading usage is each API's table's business (see `apis/`): re-exported for what counts it.
export { mergeUsage, usageOfJson } from '../apis/usage.js';

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
