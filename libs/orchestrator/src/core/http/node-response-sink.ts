import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import type { Observable, Subscription } from 'rxjs';
import { ClientClosedError } from '../errors.js';
import type { CallEvent, Chunk, StreamHead } from '../events.js';
import { ResponseSink, type StreamHeadEvent } from './response-sink.js';

/**
 * A sink that answers on a Node response through a server framework: it watches the response for the client leaving
 * until the answer is handed over, and gives a stream to the framework as a Readable it pipes to the client.
 * Subclasses say how the framework is handed a value, a stream or an error.
 */
export abstract class NodeResponseSink<T> extends ResponseSink<T> {
  /** The stream's body once it started: the framework reads it, this sink pushes the chunks. */
  protected body?: Readable;
  /** The subscription to the call's events. */
  protected events?: Subscription;

  constructor(protected readonly raw: ServerResponse) {
    super();
  }

  /** Hands a started stream to the framework, with the headers it goes with. */
  protected abstract sendStream(body: Readable, head: StreamHead, headers: Record<string, string>): void;

  /** Subscribes to the call's events; a client that already left is answered at once. */
  listen(events: Observable<CallEvent<T>>): void {
    if (this.raw.destroyed) return this.clientGone();
    // A plain listener, not an AbortSignal: this runs for every request, and signals cost far more.
    this.raw.once('close', this.clientGone);
    this.events = events.subscribe(this);
  }

  /** The answer is handed over (or failed): from here on, the client leaving is the framework's concern. */
  protected stopWatching(): void {
    this.raw.removeListener('close', this.clientGone);
  }

  protected openStream(head: StreamHeadEvent<T>): void {
    this.stopWatching();
    const body = (this.body = new Readable({ read() {} }));
    // The framework destroys the body if the client leaves: the call's events are no longer wanted.
    body.once('close', this.bodyClosed);
    this.sendStream(body, head.head, streamHeaders(head.head));
  }

  protected writeChunk(chunk: Chunk): void {
    this.body!.push(chunk);
  }

  protected endStream(): void {
    this.body!.push(null);
  }

  protected breakStream(_error: unknown, lastEvent: string | undefined): void {
    const body = this.body!;
    if (lastEvent !== undefined) {
      body.push(lastEvent);
      body.push(null);
    } else {
      // No way to say "error" inside this stream: cutting it is what the client can see.
      this.raw.destroy();
      body.destroy();
    }
  }

  private readonly clientGone = (): void => {
    // 'close' also follows a complete answer; only an unfinished one means the client left.
    if (this.raw.writableFinished) return;
    this.events?.unsubscribe();
    this.fail(new ClientClosedError());
  };

  private readonly bodyClosed = (): void => {
    this.events?.unsubscribe();
  };
}

/** A stream's response headers: never cached nor buffered by a proxy on the way, then the stream's own. */
function streamHeaders(head: StreamHead): Record<string, string> {
  return { 'cache-control': 'no-cache', 'x-accel-buffering': 'no', ...head.headers };
}
