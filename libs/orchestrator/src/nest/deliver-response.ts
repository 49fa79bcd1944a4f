import { StreamableFile } from '@nestjs/common';
import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { Observable, type Subscription } from 'rxjs';
import { isRawResponse, type CallEvent, type RawResponse, type StreamHead } from '../core/events.js';
import { ClientClosedError } from '../core/errors.js';
import { unwrapAnswer } from '../core/http/answer-headers.js';

export interface DeliveryTarget {
  /** The Node response under the framework's one: watched for the client leaving, cut when a stream breaks. */
  raw: ServerResponse;
  setHeaders: (headers: Record<string, string>) => void;
  /** Sets the response's status (a `RawResponse` that carries one). */
  setStatus?: (status: number) => void;
  /** Fastify sends a Buffer as it is; Express's adapter would serialise it as JSON, so it gets a stream. */
  // eslint-disable-next-line @typescript-eslint/no-redundant-type-constituents -- the literals name the known adapters
  platform: 'express' | 'fastify' | string;
}

/**
 * Turns a call's events into what Nest sends: the value of a plain answer, or,
 * once a stream's first chunk is here, a StreamableFile that writes every
 * chunk as it arrives. Until that first chunk nothing is sent, so a stream
 * that fails early still gets an ordinary JSON error with the right status.
 */
export function deliver<T>(events: Observable<CallEvent<T>>, target: DeliveryTarget): Observable<unknown> {
  return new Observable<unknown>((subscriber) => {
    let head: Extract<CallEvent<T>, { kind: 'head' }> | undefined;
    let body: Readable | undefined;
    let subscription: Subscription | undefined;
    const onClientGone = () => {
      // 'close' also follows a complete answer; only an unfinished one means the client left.
      if (target.raw.writableFinished) return;
      subscription?.unsubscribe();
      body?.destroy();
      subscriber.error(new ClientClosedError());
    };
    if (target.raw.destroyed) return onClientGone();
    // A plain listener, not an AbortSignal: this runs for every request, and signals cost far more.
    target.raw.once('close', onClientGone);
    const stopListening = () => target.raw.removeListener('close', onClientGone);

    subscription = events.subscribe({
      next(event) {
        if (event.kind === 'value') {
          stopListening();
          const { value, headers } = unwrapAnswer(event.value);
          if (headers) target.setHeaders(headers);
          subscriber.next(isRawResponse(value) ? rawBody(value, target) : value);
          subscriber.complete();
        } else if (event.kind === 'head') {
          head = event;
        } else if (body) {
          body.push(event.chunk);
        } else if (head) {
          // From here on the response belongs to the stream: Nest destroys `body` if the client leaves.
          stopListening();
          body = new Readable({ read() {} });
          body.once('close', () => subscription?.unsubscribe());
          body.push(event.chunk);
          target.setHeaders(streamHeaders(head.head));
          subscriber.next(new StreamableFile(body, { type: head.head.contentType }));
          subscriber.complete();
        }
      },
      error(error: unknown) {
        stopListening();
        if (!body) return subscriber.error(error);
        if (head?.formatError) {
          body.push(head.formatError(error));
          body.push(null);
        } else {
          // No way to say "error" inside this stream: cutting it is what the client can see.
          target.raw.destroy();
          body.destroy();
        }
      },
      complete() {
        stopListening();
        if (body) body.push(null);
        else if (!subscriber.closed) {
          // A stream that ended before its first chunk: answer with an empty stream.
          if (head) {
            target.setHeaders(streamHeaders(head.head));
            subscriber.next(new StreamableFile(Readable.from([]), { type: head.head.contentType }));
          }
          subscriber.complete();
        }
      },
    });

    return () => {
      stopListening();
      // Once the stream is handed to Nest, the subscription lives as long as the body.
      if (!body) subscription?.unsubscribe();
    };
  });
}

/** The bytes of a `RawResponse` as the platform sends them unchanged. */
function rawBody(response: RawResponse, target: DeliveryTarget): unknown {
  if (response.status !== undefined) target.setStatus?.(response.status);
  target.setHeaders(
    response.headers
      ? { ...response.headers, 'content-type': response.contentType }
      : { 'content-type': response.contentType },
  );
  if (target.platform === 'fastify') return response.body;
  return new StreamableFile(response.body, { type: response.contentType, length: response.body.length });
}

function streamHeaders(head: StreamHead): Record<string, string> {
  return { 'cache-control': 'no-cache', 'x-accel-buffering': 'no', ...head.headers };
}
