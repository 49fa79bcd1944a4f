import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { Observable } from 'rxjs';

/** One SSE event as text: `event:` line (if named), `data:` line, blank line. */
export function sseEvent(data: unknown, event?: string): string {
  const json = typeof data === 'string' ? data : JSON.stringify(data);
  return event ? `event: ${event}\ndata: ${json}\n\n` : `data: ${json}\n\n`;
}

export interface SseTranslator {
  /** Text to send for one upstream event. */
  onEvent(message: EventSourceMessage): string;
  /** Text to send once the upstream stream has ended, or the error it ended with (no terminator). */
  onEnd(): string | Error;
}

/**
 * Re-encodes an upstream SSE stream event by event, as the text arrives. The
 * upstream's errors (a cut connection) pass through untouched, so the client
 * sees them as errors, not as a clean end.
 */
export function translateSse(text: Observable<string>, translator: SseTranslator): Observable<string> {
  return new Observable<string>((subscriber) => {
    let out = '';
    const parser = createParser({
      onEvent: (message) => {
        out += translator.onEvent(message);
      },
    });
    const subscription = text.subscribe({
      next(chunk) {
        try {
          parser.feed(chunk);
        } catch (error) {
          // A provider event that is not valid JSON: the stream cannot go on, and must not crash the process.
          subscriber.error(new Error(`The provider sent an unreadable stream event: ${(error as Error).message}`));
          return;
        }
        if (out) {
          subscriber.next(out);
          out = '';
        }
      },
      error: (error: unknown) => subscriber.error(error),
      complete() {
        const end = translator.onEnd();
        if (end instanceof Error) return subscriber.error(end);
        out += end;
        if (out) subscriber.next(out);
        subscriber.complete();
      },
    });
    return () => subscription.unsubscribe();
  });
}

/** Two translations in a row (e.g. Anthropic -> chat completions -> Responses): the first one's events feed the second. */
export function pipeTranslators(first: SseTranslator, second: SseTranslator): SseTranslator {
  let out = '';
  const parser = createParser({
    onEvent: (message) => {
      out += second.onEvent(message);
    },
  });
  const through = (text: string) => {
    parser.feed(text);
    const result = out;
    out = '';
    return result;
  };
  return {
    onEvent: (message) => through(first.onEvent(message)),
    onEnd() {
      const end = first.onEnd();
      if (end instanceof Error) return end;
      const text = through(end);
      const last = second.onEnd();
      return last instanceof Error ? last : text + last;
    },
  };
}
