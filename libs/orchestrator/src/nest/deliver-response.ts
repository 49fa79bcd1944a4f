import { StreamableFile } from '@nestjs/common';
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { Observable, type Subscriber, type Unsubscribable } from 'rxjs';
import { isRawResponse, type CallEvent, type RawResponse, type StreamHead } from '../core/events.js';
import { unwrapAnswer } from '../core/http/answer-headers.js';
import { NodeResponseSink } from '../core/http/node-response-sink.js';

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
    const sink = new NestResponseSink<T>(subscriber, target);
    sink.listen(events);
    return sink;
  });
}

/** Answers through the Observable Nest's interceptor returns: one value (the answer, or a stream), then complete. */
class NestResponseSink<T> extends NodeResponseSink<T> implements Unsubscribable {
  constructor(
    private readonly subscriber: Subscriber<unknown>,
    private readonly target: DeliveryTarget,
  ) {
    super(target.raw);
  }

  /** Nest is done with the answer (or gave up on it). */
  unsubscribe(): void {
    this.stopWatching();
    // Once the stream is handed to Nest, the subscription lives as long as the body.
    if (!this.body) this.events?.unsubscribe();
  }

  protected answer(answer: T): void {
    this.stopWatching();
    const { value, headers } = unwrapAnswer(answer);
    if (headers) this.target.setHeaders(headers);
    this.subscriber.next(isRawResponse(value) ? rawBody(value, this.target) : value);
    this.subscriber.complete();
  }

  protected sendStream(body: Readable, head: StreamHead, headers: Record<string, string>): void {
    this.target.setHeaders(headers);
    this.subscriber.next(new StreamableFile(body, { type: head.contentType }));
    this.subscriber.complete();
  }

  protected fail(error: unknown): void {
    this.stopWatching();
    this.subscriber.error(error);
  }

  protected override completedEmpty(): void {
    this.stopWatching();
    this.subscriber.complete();
  }
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
