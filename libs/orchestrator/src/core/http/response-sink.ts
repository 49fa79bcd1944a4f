import type { Observer } from 'rxjs';
import type { CallEvent, Chunk } from '../events.js';

/** A stream's head event: its content type and headers, how to say an error inside it, and its flow control. */
export type StreamHeadEvent<T> = Extract<CallEvent<T>, { kind: 'head' }>;

/**
 * Where a call's answer is written: the one place that turns a call's events into a response, shared by the Nest
 * interceptor, the framework-free `serve` and the gateway, which differ only in how they write.
 *
 * The rules every response follows live here: a whole answer is sent as soon as it is there; a stream's response
 * starts with its first chunk, so a call that fails before it still gets an ordinary error answer with its status; a
 * stream that ends before any chunk is an empty stream; a stream that breaks after it started ends with its format's
 * error event, or is cut when its format has none.
 *
 * A subclass writes; it is the observer of the call's events itself (no closures per request).
 */
export abstract class ResponseSink<T> implements Observer<CallEvent<T>> {
  /** The head of the stream being answered, once it came. */
  protected streamHead?: StreamHeadEvent<T>;
  /** Whether the stream's response has started (its head and first chunk written). */
  protected streaming = false;
  /** Whether a whole answer was given. */
  protected answered = false;

  /** A whole answer. */
  protected abstract answer(value: T): void;
  /** Starts the stream's response (headers), just before its first chunk or its end. */
  protected abstract openStream(head: StreamHeadEvent<T>): void;
  /** One chunk of a started stream. */
  protected abstract writeChunk(chunk: Chunk): void;
  /** The started stream is over. */
  protected abstract endStream(): void;
  /** The call failed before anything was sent: an error answer. */
  protected abstract fail(error: unknown): void;
  /**
   * The stream broke after it started. `lastEvent` is the error event of its format (`''` when its format ends
   * silently), or `undefined` when it has no way to say "error": then the response is cut.
   */
  protected abstract breakStream(error: unknown, lastEvent: string | undefined): void;
  /** The head arrived (before any chunk): a hook for what need not wait for the first chunk. */
  protected headArrived(_head: StreamHeadEvent<T>): void {}
  /** The call completed without a value or a stream. */
  protected completedEmpty(): void {}

  next(event: CallEvent<T>): void {
    if (event.kind === 'value') {
      this.answered = true;
      this.answer(event.value);
    } else if (event.kind === 'head') {
      this.streamHead = event;
      this.headArrived(event);
    } else {
      this.startStreamOnce();
      // A chunk without a head has no stream to go to.
      if (this.streaming) this.writeChunk(event.chunk);
    }
  }

  error(error: unknown): void {
    if (!this.streaming) return this.fail(error);
    this.breakStream(error, this.streamHead?.formatError?.(error));
  }

  complete(): void {
    // A stream that ended before its first chunk: an empty stream.
    if (this.streamHead) this.startStreamOnce();
    if (this.streaming) this.endStream();
    else if (!this.answered) this.completedEmpty();
  }

  /** Starts the stream's response unless it has started. */
  protected startStreamOnce(): void {
    if (this.streaming || !this.streamHead) return;
    this.streaming = true;
    this.openStream(this.streamHead);
  }
}
