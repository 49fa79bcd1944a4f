import { RawResponse } from 'nest-prompt-orchestrator/core';
import { ChunkEvent, type CallEvent, type FlowControl } from 'nest-prompt-orchestrator/low-level';
import { TextDecoder } from 'node:util';
import type { Subscriber } from 'rxjs';
import type { Dispatcher } from 'undici';
import {
  MAX_ERROR_BODY,
  UpstreamHttpError,
  UpstreamProtocolError,
  looksLikeJson,
  startsWithErrorField,
} from '../apis/errors.js';
import { mayHoldError, type StreamFormat } from '../apis/formats.js';
import { usageOfJson } from '../apis/usage.js';
import type { Usage } from '../budgets/prices.js';
import type { ClientApi } from '../common/apis.js';
import { Interned } from '../common/interned.js';
import { keyPrefixOf, redactor, type KeyPrefix } from '../common/redaction.js';
import type { Translation } from '../providers/provider.js';
import { StreamTranslation, type SseTranslator } from '../translate/sse.js';
import { SseScan } from './sse-scan.js';

// A stream is read ahead of its fastest caller by at most about this much (plus one socket read).
const HIGH_WATER = 256 * 1024;
const LOW_WATER = 64 * 1024;
const EVENT_STREAM = /^text\/event-stream\b/i;
/** Content types as kept with every stored answer: one copy of each. */
const CONTENT_TYPES = new Interned(64);
const SSE_TYPE = 'text/event-stream; charset=utf-8';

/** What one upstream call needs to know beyond its request. */
export interface ExchangeOptions {
  /** The API the provider answers in on this route: the format of its errors. */
  api: ClientApi;
  /** Any content type is an answer (default: a JSON route; anything else is the provider's failure). */
  anyAnswer: boolean;
  /** How a stream of this route ends (`false`: not checked). */
  streamEnd: StreamFormat | false;
  /** Read the usage the answer reports (spend, token limits, metrics). */
  readUsage: boolean;
  /** Leave out of a stream the usage event the gateway asked for on the client's behalf. */
  stripUsage: boolean;
  /** The key the request presented: never quoted back in a relayed error event. */
  presentedKey: string | undefined;
  /** The last event a stream that broke after it started sends its callers (see `StreamedResponse.formatError`). */
  formatError: (error: unknown) => string;
  /** The route's client API is not the provider's: the answer (or each event of a stream) is translated back. */
  translation?: Translation;
  /** The client's request, as a translated stream's translator reads it (e.g. whether it asked for usage). */
  clientBody?: Record<string, unknown>;
}

/** What the request that made an exchange is told of it (the request implements these: nothing is made per call). */
export interface ExchangeHooks {
  /** The provider's status and headers are in. */
  onUpstreamAnswered(): void;
  /**
   * Told once with the answer's usage (or undefined) when a 2xx answer ends, whole or broken. A plain answer is
   * sent once the returned promise settles (its cost counted in the shared totals, under a spend cap).
   */
  onUpstreamUsage(usage: Usage | undefined): Promise<void> | undefined;
  /** The body of a 2xx JSON answer (e.g. to learn the upstream's identity from `/props`). */
  onUpstreamBody(bytes: Buffer): void;
  /** The call failed before any answer (refused, reset): told once. */
  onUpstreamConnectionLost(): void;
  /** Set when something reads a 2xx event stream as it passes (a recorded span): each piece passed on, in order. */
  readonly streamReader?: (bytes: Buffer) => void;
}

/**
 * One call to the provider, passed through or translated, as an undici
 * dispatch handler: the response's bytes go straight from undici's socket
 * reads into call events, with no Readable, no promise and no text decoding in
 * between. A JSON answer becomes one `RawResponse` (its status and
 * Content-Type kept); an event stream becomes a head and the very Buffers that
 * arrived, read on the way by `SseScan`. The head carries the call's flow
 * control: the callers' writers pause the upstream socket while every one of
 * them is slow to read.
 *
 * A translated route's answer is read the same way (its errors, its usage), then
 * translated: a JSON answer whole, a stream event by event as its text arrives
 * (the translator decides how it ends).
 */
export class UpstreamExchange implements Dispatcher.DispatchHandler, FlowControl {
  private controller?: Dispatcher.DispatchController;
  private mode: 'waiting' | 'body' | 'stream' | 'error' | 'done' = 'waiting';
  private status = 0;
  private contentType: string | undefined;
  private retryAfter: string | undefined;
  private parts: Buffer[] = [];
  private size = 0;
  private scan?: SseScan;
  /** A translated stream's translator and decoder (its events are text to it). */
  private translating?: StreamTranslation;
  private decoder?: TextDecoder;
  private cancelled = false;
  private unsent: Buffer[] = [];
  private unsentBytes = 0;
  private flushScheduled = false;
  /** See `presentedPrefix` (null: not made yet). */
  private keyPrefix: KeyPrefix | undefined | null = null;
  /**
   * Callers writing this stream; the upstream is paused while even the fastest of them is behind. The request that
   * made the exchange counts from the start (until it leaves): its first chunks may wait for their turn to be
   * delivered (see `DeliveryBatches`), and the stream must not run ahead of it meanwhile.
   */
  private readers = 1;
  /** Bytes of the stream sent to the callers so far: a caller that has received fewer is still catching up. */
  emitted = 0;
  /** The most any caller has passed on to its client: how far the stream has really got. */
  private fastest = 0;

  constructor(
    private readonly subscriber: Subscriber<CallEvent<RawResponse>>,
    private readonly options: ExchangeOptions,
    private readonly hooks: ExchangeHooks,
  ) {}

  get paused(): boolean {
    return this.controller?.paused ?? false;
  }

  /** A caller starts writing the stream (not the request that made it: that one is counted from the start). */
  addReader(): void {
    this.readers++;
  }

  /** A caller stopped writing it (done, gone or cut). */
  removeReader(): void {
    this.readers--;
    this.flow();
  }

  /**
   * How much of the stream a caller has passed on to its client (written, less what still waits in its socket's
   * buffer). Callers report it as they write and as their sockets drain.
   */
  progress(bytes: number): void {
    if (bytes <= this.fastest) return;
    this.fastest = bytes;
    if (this.controller?.paused) this.flow();
  }

  /** Aborts the call (the subscriber left: timeout, cancellation, every caller gone). */
  cancel(): void {
    if (this.mode === 'done' || this.cancelled) return;
    this.cancelled = true;
    // A translated stream counts what it used so far when its callers leave.
    if (this.mode === 'stream' && this.translating) void this.hooks.onUpstreamUsage(this.scan!.usage);
    this.controller?.abort(ABORTED);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.cancelled) controller.abort(ABORTED);
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    this.controller = controller;
    this.status = statusCode;
    const type = headers['content-type'];
    this.contentType = typeof type === 'string' ? CONTENT_TYPES.of(type) : undefined;
    this.hooks.onUpstreamAnswered();
    if (statusCode >= 400) {
      const retryAfter = headers['retry-after'];
      this.retryAfter = typeof retryAfter === 'string' ? retryAfter : undefined;
      this.mode = 'error';
      return;
    }
    if (this.contentType !== undefined && EVENT_STREAM.test(this.contentType)) {
      this.mode = 'stream';
      const { streamEnd, readUsage, stripUsage, translation } = this.options;
      if (translation?.stream) return this.startTranslation(translation.stream(this.options.clientBody ?? {}));
      // Whole lines: a key the provider quotes is never cut across two pieces, each searched on its own.
      this.scan = new SseScan(streamEnd, readUsage, stripUsage, true);
      this.subscriber.next({
        kind: 'head',
        head: { contentType: this.contentType ?? SSE_TYPE },
        formatError: this.options.formatError,
        flow: this,
      });
      return;
    }
    this.mode = 'body';
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.mode === 'stream') {
      // The events of one socket read (undici hands over each HTTP chunk, often one small event each) go on as one
      // Buffer, once the read is parsed: one call event per read, not one per event.
      this.unsent.push(chunk);
      this.unsentBytes += chunk.length;
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        queueMicrotask(this.flush);
      }
      return;
    }
    if (this.mode === 'error' && this.size + chunk.length > MAX_ERROR_BODY) {
      this.parts.push(chunk.subarray(0, MAX_ERROR_BODY - this.size));
      this.size = MAX_ERROR_BODY;
      this.finishError();
      this.cancelled = true;
      controller.abort(ABORTED);
      return;
    }
    if (this.mode === 'done') return;
    this.parts.push(chunk);
    this.size += chunk.length;
  }

  onResponseEnd(): void {
    this.flush();
    const mode = this.mode;
    if (mode === 'done') return;
    if (mode === 'error') return this.finishError();
    if (mode === 'stream') return this.finishStream();
    this.mode = 'done';
    const bytes = this.parts.length === 1 ? this.parts[0] : Buffer.concat(this.parts, this.size);
    this.parts = [];
    const status = this.status;
    const empty = bytes.length === 0 && status === 204;
    if (!empty && !this.options.anyAnswer && !looksLikeJson(bytes)) {
      return this.subscriber.error(new UpstreamProtocolError('The provider sent a body that is not JSON.'));
    }
    // A 2xx whose body is an error object (llama-server sends some failures so) is relayed as the error it is.
    if (startsWithErrorField(bytes))
      return this.subscriber.error(new UpstreamHttpError(status, bytes, this.contentType, this.options.api));
    if (this.options.translation) return this.translateAnswer(bytes, this.options.translation);
    this.hooks.onUpstreamBody(bytes);
    const answer = new RawResponse(
      bytes,
      this.contentType ?? 'application/json',
      undefined,
      status === 200 ? undefined : status,
    );
    const counted = this.hooks.onUpstreamUsage(this.options.readUsage ? usageOfJson(bytes) : undefined);
    if (counted) void counted.then(() => this.answer(answer));
    else this.answer(answer);
  }

  private answer(answer: RawResponse): void {
    this.subscriber.next({ kind: 'value', value: answer });
    this.subscriber.complete();
  }

  /**
   * A translated route's JSON answer: its usage counted (an error status is no answer to count: the hold is let go
   * when the call ends), then translated for the client.
   */
  private translateAnswer(bytes: Buffer, translation: Translation): void {
    const counted =
      this.status < 300
        ? this.hooks.onUpstreamUsage(this.options.readUsage ? usageOfJson(bytes) : undefined)
        : undefined;
    const translate = () => {
      let answer: RawResponse;
      try {
        let json: unknown;
        try {
          json = JSON.parse(bytes.toString('utf8'));
        } catch {
          json = undefined;
        }
        if (typeof json !== 'object' || json === null)
          throw new UpstreamProtocolError('The provider sent a body that is not a JSON object.');
        // The provider's own answer, before translation (e.g. its id and model on the call's span).
        this.hooks.onUpstreamBody(bytes);
        answer = new RawResponse(Buffer.from(JSON.stringify(translation.response(json as Record<string, unknown>))));
      } catch (error) {
        return this.subscriber.error(error);
      }
      this.answer(answer);
    };
    if (counted) void counted.then(translate);
    else translate();
  }

  /** A translated stream: its head is the client's event stream; the translator's text goes on as it comes. */
  private startTranslation(translator: SseTranslator): void {
    this.translating = new StreamTranslation(translator);
    this.decoder = new TextDecoder();
    // Read for its usage only: how a translated stream ends is the translator's to say.
    this.scan = new SseScan(this.options.api, this.options.readUsage, false);
    this.subscriber.next({ kind: 'head', head: { contentType: SSE_TYPE }, formatError: this.options.formatError });
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    if (!this.cancelled) this.flush();
    const mode = this.mode;
    this.mode = 'done';
    if (this.cancelled) return;
    if (mode === 'waiting') this.hooks.onUpstreamConnectionLost();
    if (mode === 'stream') void this.hooks.onUpstreamUsage(this.scan?.usage);
    this.subscriber.error(error);
  }

  private readonly flush = (): void => {
    this.flushScheduled = false;
    if (this.unsentBytes === 0) return;
    const chunk = this.unsent.length === 1 ? this.unsent[0] : Buffer.concat(this.unsent, this.unsentBytes);
    this.unsent = [];
    this.unsentBytes = 0;
    if (this.mode === 'stream' && this.controller) this.streamed(this.controller, chunk);
  };

  private streamed(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.translating) return this.translateChunk(controller, chunk, this.translating);
    const scan = this.scan!;
    const out = scan.feed(chunk);
    if (Array.isArray(out)) for (const piece of out) this.pass(piece);
    else this.pass(out);
    this.flow();
    // Cut once the error event is whole (its data may come in the next read), so the client reads it (redacted).
    if (scan.verdict === 'error' && scan.errorRead) {
      this.mode = 'done';
      void this.hooks.onUpstreamUsage(scan.usage);
      this.cancelled = true;
      controller.abort(ABORTED);
      this.subscriber.error(scan.failure(false));
    }
  }

  /** A read of a translated stream: its usage read, its text translated and passed on. */
  private translateChunk(controller: Dispatcher.DispatchController, chunk: Buffer, translating: StreamTranslation) {
    const scan = this.scan!;
    scan.feed(chunk);
    let text: string;
    try {
      text = translating.feed(this.decoder!.decode(chunk, { stream: true }));
    } catch (error) {
      this.mode = 'done';
      void this.hooks.onUpstreamUsage(scan.usage);
      this.cancelled = true;
      controller.abort(ABORTED);
      return this.subscriber.error(error);
    }
    this.passText(text);
  }

  /**
   * Translated text, on to the callers. An error event (the translator relays the provider's) may quote a key as an
   * error body does: it is redacted; ordinary text only of the provider's keys (see `pass`).
   */
  private passText(text: string): void {
    if (text.length === 0) return;
    const presented = this.options.presentedKey;
    if (mayHoldError(text)) text = redactor.json(text, [presented]);
    else if (redactor.mayQuote(text, this.presentedPrefix())) text = redactor.json(text, [presented], false);
    this.subscriber.next(new ChunkEvent(text));
  }

  /** Bytes of the stream, on to the callers. */
  private pass(bytes: Buffer): void {
    // A provider's error event may quote a key, as its error bodies do, in any JSON escaping: such a chunk is decoded
    // to look. An ordinary chunk is only searched for the provider's keys (and an escape), and only those keys go.
    const presented = this.options.presentedKey;
    if (this.scan!.verdict === 'error') bytes = redactor.jsonBytes(bytes, [presented]);
    else if (redactor.mayQuote(bytes, this.presentedPrefix())) bytes = redactor.jsonBytes(bytes, [presented], false);
    if (bytes.length === 0) return;
    this.hooks.streamReader?.(bytes);
    this.emitted += bytes.length;
    this.subscriber.next(new ChunkEvent(bytes));
  }

  /** The presented key's prefix, searched for in every chunk of the stream: made once, at its first chunk. */
  private presentedPrefix(): KeyPrefix | undefined {
    if (this.keyPrefix === null) this.keyPrefix = keyPrefixOf(this.options.presentedKey);
    return this.keyPrefix;
  }

  private finishStream(): void {
    this.mode = 'done';
    const scan = this.scan!;
    const rest = scan.end();
    if (this.translating) return this.finishTranslation(this.translating);
    if (rest && rest.length > 0) this.pass(rest);
    void this.hooks.onUpstreamUsage(scan.usage);
    const failure = scan.failure(true);
    if (failure) this.subscriber.error(failure);
    else this.subscriber.complete();
  }

  /** A translated stream ended: its translator says whether it was whole (an error if not) and what comes last. */
  private finishTranslation(translating: StreamTranslation): void {
    void this.hooks.onUpstreamUsage(this.scan!.usage);
    try {
      this.passText(translating.feed(this.decoder!.decode()));
    } catch (error) {
      return this.subscriber.error(error);
    }
    const end = translating.end();
    if (end instanceof Error) return this.subscriber.error(end);
    this.passText(end);
    this.subscriber.complete();
  }

  private finishError(): void {
    this.mode = 'done';
    const body = this.parts.length === 1 ? this.parts[0] : Buffer.concat(this.parts);
    this.parts = [];
    this.subscriber.error(
      new UpstreamHttpError(this.status, body, this.contentType, this.options.api, this.retryAfter),
    );
  }

  /**
   * Holds the upstream back while no caller keeps up: more than HIGH_WATER bytes sent that not even the fastest
   * has passed on (its socket is full, or its deliveries wait their turn, its first ones included). Lets it go
   * again below LOW_WATER. Nobody reading (every caller gone, the answer kept for the window): never held.
   */
  private flow(): void {
    const controller = this.controller;
    // A translated stream's text is not the bytes its callers count: it is not held back (nor was it ever).
    if (!controller || this.mode !== 'stream' || this.translating) return;
    const behind = this.emitted - this.fastest;
    if (this.readers > 0 && behind > HIGH_WATER) {
      if (!controller.paused) controller.pause();
    } else if (controller.paused && (this.readers === 0 || behind < LOW_WATER)) controller.resume();
  }
}

/** The reason a call is aborted from this side: never reported to anyone (the subscriber is gone). */
const ABORTED = new Error('The upstream call was aborted.');
