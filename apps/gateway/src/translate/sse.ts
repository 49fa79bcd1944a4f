import { createParser, type EventSourceMessage, type EventSourceParser } from 'eventsource-parser';

export { sseEvent } from '../apis/formats.js';

export interface SseTranslator {
  /** Text to send for one upstream event. */
  onEvent(message: EventSourceMessage): string;
  /** Text to send once the upstream stream has ended, or the error it ended with (no terminator). */
  onEnd(): string | Error;
}

/**
 * Re-encodes an upstream SSE stream event by event, as its text arrives: `feed` takes the text of one read and gives
 * what to send for it, `end` what to send once the upstream ended (or the error it ended with).
 */
export class StreamTranslation {
  private out = '';
  private readonly parser: EventSourceParser;

  constructor(private readonly translator: SseTranslator) {
    this.parser = createParser({
      onEvent: (message) => {
        this.out += this.translator.onEvent(message);
      },
    });
  }

  /** Text to send for the events the text completes; throws when the provider sent an event it cannot read. */
  feed(text: string): string {
    try {
      this.parser.feed(text);
    } catch (error) {
      // A provider event that is not valid JSON: the stream cannot go on.
      this.out = '';
      throw new Error(`The provider sent an unreadable stream event: ${(error as Error).message}`, { cause: error });
    }
    const out = this.out;
    this.out = '';
    return out;
  }

  /** Text to send once the upstream stream has ended, or the error it ended with (no end marker). */
  end(): string | Error {
    return this.translator.onEnd();
  }
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
