import type { RawResponse } from 'nest-prompt-orchestrator/core';
import { ResponseSink, type StartedCall, type StreamHeadEvent } from 'nest-prompt-orchestrator/low-level';
import type { Subscription } from 'rxjs';
import { usageOfJson } from '../budgets/usage.js';
import { ApiError } from '../common/api-error.js';
import { ownBytes } from '../common/buffers.js';
import { drainBound, drainRequest, errorReply } from '../http/error-reply.js';
import { serverTiming } from '../observability/request-context.js';
import { learnUsage, noteOutcome, streamedUsage, unknownUsage } from './accounting.js';
import type { ProxiedCall } from './proxied-call.js';
import type { PendingReply } from './reply-batch.js';
import { UpstreamExchange } from '../upstreams/upstream-exchange.js';

/** An answer as the window holds it (a body, or a stream's head and chunks). */
type Stored = NonNullable<StartedCall<RawResponse>['stored']>;
/** A piece of a stream: bytes as they came, or text. */
type Chunk = string | Buffer;

/** A stream reader this far behind the stream (beyond what it was replayed on joining) is cut: memory stays bounded. */
const MAX_BEHIND_BYTES = 4 * 1024 * 1024;
/** A follower of another replica's stream cannot hold that stream back: it is cut later, but cut all the same. */
const MAX_BEHIND_UNHELD_BYTES = 32 * 1024 * 1024;
/** The last chunks of a reused stream kept to read its usage from: the usage event, the end marker, and a line split across them. */
const KEPT_LAST_CHUNKS = 3;
/** How long a cut reader may take to read its error event before its socket is closed. */
const CUT_GRACE_MS = 5_000;

/**
 * Delivery: a proxied call's answer written on Node's response, as the library's `ResponseSink` orders it. A whole
 * answer goes out with the others of its turn (the plane's `ReplyBatch`); a stream is written chunk by chunk with
 * the socket's backpressure, which holds its source back (`FlowControl`). Like a Fastify reply, it keeps the
 * response's state apart from the request's; it is the observer of the call's events itself.
 */
export class Delivery extends ResponseSink<RawResponse> implements PendingReply {
  private subscription?: Subscription;
  /** The stream's source in this process, when it can be held back. */
  private flow?: UpstreamExchange;
  private slow = false;
  private stall?: ReturnType<typeof setTimeout>;
  private received = 0;
  private replayed = 0;
  /** How old a `cached` answer is (its `Age` header). */
  private ageSeconds?: number;
  /** Lets go of the stored stream this request replays (see `ByteArena.hold`), once its response has closed. */
  private bytesHeld?: () => void;
  /** A whole answer waiting in the plane's `ReplyBatch` to be written (`respond`, then `writeReply`). */
  private replyBody?: Buffer;
  private replyStatus = 0;
  private replyType = '';
  private replyHeaders?: Record<string, string>;

  constructor(private readonly call: ProxiedCall) {
    super();
  }

  /** The call started (led, joined, or answered from the window): its answer is written as it comes. */
  deliver(started: StartedCall<RawResponse>): void {
    noteOutcome(this.call, started);
    this.ageSeconds = started.ageSeconds;
    const stored = started.stored;
    if (stored !== undefined && stored.kind !== 'value') return this.replay(stored);
    this.subscription = started.events.subscribe(this);
    // Gone while the flight was being found: it is left at once (a flight nobody waits for is let go, not kept
    // waiting for a subscriber that never comes).
    if (this.call.response.destroyed) this.leave();
  }

  /** Keeps a stored stream's bytes until this response closes. */
  hold(stored: Stored): void {
    if (stored.kind === 'stream' && this.bytesHeld === undefined)
      this.bytesHeld = this.call.plane.arena.hold(stored.chunks);
  }

  /** An answer from the window, written as the window holds it (a body, or a stream's head and chunks). */
  private replay(stored: Exclude<Stored, { kind: 'value' }>): void {
    const call = this.call;
    if (stored.kind === 'bytes') {
      call.inCall = false;
      if (unknownUsage(call)) learnUsage(call, usageOfJson(stored.body));
      return this.respond(stored.status ?? 200, stored.contentType, stored.body, stored.headers);
    }
    this.hold(stored);
    this.streamHead = { kind: 'head', head: stored.head };
    // The stream's chunks as they came, in one write to the socket.
    call.response.cork();
    for (const chunk of stored.chunks) {
      this.startStreamOnce();
      this.writeChunk(chunk);
    }
    call.response.uncork();
    this.complete();
  }

  protected answer(value: RawResponse): void {
    if (unknownUsage(this.call)) learnUsage(this.call, usageOfJson(value.body));
    this.respond(value.status ?? 200, value.contentType, value.body, value.headers);
  }

  protected override headArrived(head: StreamHeadEvent<RawResponse>): void {
    // Past the head nothing is retried or sent elsewhere: a long stream need not keep the request's bytes.
    this.call.body = undefined;
    if (head.flow instanceof UpstreamExchange) this.flow = head.flow;
  }

  override error(error: unknown): void {
    this.call.inCall = false;
    super.error(error);
  }

  override complete(): void {
    const call = this.call;
    call.inCall = false;
    if (this.streaming && unknownUsage(call)) learnUsage(call, streamedUsage(call));
    super.complete();
  }

  /** A response already gone is not started: nothing is written to it, and it never counts as the stream's reader. */
  protected override startStreamOnce(): void {
    if (this.streaming) return;
    const response = this.call.response;
    if (response.destroyed || response.writableEnded) return;
    super.startStreamOnce();
  }

  protected openStream(event: StreamHeadEvent<RawResponse>): void {
    const head = event.head;
    const headers = this.headersOf(this.ageSeconds);
    headers.push('content-type', head.contentType, 'cache-control', 'no-cache', 'x-accel-buffering', 'no');
    if (head.headers) for (const name in head.headers) headers.push(name, head.headers[name]);
    this.call.response.writeHead(200, headers);
    if (this.flow !== this.call.upstream?.leading) this.flow?.addReader();
  }

  /**
   * One chunk to this caller, with the socket's backpressure: it tells the stream's source how far it got (the
   * upstream pauses while no caller keeps up); one that falls too far behind the others is cut.
   */
  protected writeChunk(chunk: Chunk): void {
    const call = this.call;
    const response = call.response;
    if (response.destroyed || response.writableEnded) return;
    const flow = this.flow;
    // Joining late, a caller is first given what the stream already sent: shared bytes, not its own backlog.
    if (flow && this.received < flow.emitted - chunk.length) this.replayed += chunk.length;
    this.received += chunk.length;
    const kept = call.reusedChunks;
    if (kept) {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      if (!kept.first) kept.first = bytes;
      else if (kept.last.push(bytes) > KEPT_LAST_CHUNKS) kept.last.shift();
    }
    call.context.firstChunkAt ??= performance.now();
    // Behind a reader that is not keeping up, a chunk waits in its socket's buffer until the client reads it. A chunk
    // is a view of the socket read it came in (64 KiB, however few bytes of it the chunk is): waiting, it would hold
    // all of that read, so what a slow reader holds would depend on how the provider's bytes were cut, not on how far
    // behind it is. It waits as a copy of its own size instead; a slab of the arena's is held until this response
    // closes whatever it waits in (`hold`), so it waits as it is.
    if (response.writableLength > 0 && typeof chunk !== 'string' && this.bytesHeld === undefined)
      chunk = ownBytes(chunk);
    const ok = response.write(chunk);
    flow?.progress(this.received - response.writableLength);
    if (!ok && !this.slow) {
      this.slow = true;
      // Closures made only for a reader that is slow: most never are.
      response.once('drain', () => this.drained());
      // A reader that takes nothing for as long as a provider may stay silent holds its stream (and its upstream
      // slot) for nobody: it is cut, and the stream flows on for the others.
      this.stall ??= setTimeout(() => this.stalled(), call.plane.parts.config.timeoutMs);
      this.stall.refresh();
    }
    const behind = response.writableLength - this.replayed;
    if (behind > (flow ? MAX_BEHIND_BYTES : MAX_BEHIND_UNHELD_BYTES)) this.cut();
  }

  protected endStream(): void {
    if (!this.call.response.writableEnded) this.call.response.end();
  }

  private drained(): void {
    if (!this.slow) return;
    this.slow = false;
    clearTimeout(this.stall);
    this.flow?.progress(this.received);
  }

  private stalled(): void {
    if (this.slow && !this.call.response.writableFinished) this.call.response.destroy();
  }

  /** Too far behind while others read on: this caller leaves the stream with an error event, and its socket closes. */
  private cut(): void {
    this.subscription?.unsubscribe();
    this.call.inCall = false;
    const error = new ApiError(
      502,
      'This client read the stream too slowly and was cut off from it.',
      'reader_too_slow',
    );
    this.breakStream(error, this.streamHead?.formatError?.(error));
    setTimeout(() => this.call.response.destroy(), CUT_GRACE_MS).unref();
  }

  /** The stream broke after it started: its last event says so, if its format has a way to. */
  protected breakStream(_error: unknown, last: string | undefined): void {
    const response = this.call.response;
    if (response.writableEnded) return;
    // No way to say "error" inside this stream: cutting it is what the client can see.
    if (last === undefined) return void response.destroy();
    if (last) response.write(last);
    response.end();
  }

  /** Headers every answer carries: its id, timing, dedup outcome and age, and CORS when it is on. */
  private headersOf(ageSeconds: number | undefined): Array<string> {
    const { context, plane, request } = this.call;
    const headers = ['x-request-id', context.id, 'server-timing', serverTiming(context, performance.now())];
    if (context.outcome) headers.push('x-orchestrator-dedup', context.outcome);
    if (ageSeconds !== undefined) headers.push('age', String(ageSeconds));
    if (plane.corsOrigins) {
      const origin = request.headers.origin;
      if (typeof origin === 'string' && plane.allowsOrigin(origin)) headers.push('access-control-allow-origin', origin);
      headers.push('vary', 'Origin', 'access-control-expose-headers', plane.exposedHeaders);
    }
    return headers;
  }

  /** A whole answer, written with the others of this turn of the event loop (see `ReplyBatch`). */
  private respond(status: number, contentType: string, body: Buffer, extra: Record<string, string> | undefined): void {
    const response = this.call.response;
    if (response.headersSent || response.destroyed || this.replyBody !== undefined) return;
    this.replyStatus = status;
    this.replyType = contentType;
    this.replyBody = body;
    this.replyHeaders = extra;
    this.call.plane.replies.add(this);
  }

  /** See `PendingReply`: the answer `respond` was given, unless the client has gone meanwhile. */
  writeReply(): void {
    const body = this.replyBody!;
    const extra = this.replyHeaders;
    this.replyBody = this.replyHeaders = undefined;
    const response = this.call.response;
    if (response.headersSent || response.destroyed) return;
    // Built now: Server-Timing's total includes the wait for the rest of the turn.
    const headers = this.headersOf(this.ageSeconds);
    headers.push('content-type', this.replyType, 'content-length', String(body.length));
    if (extra) for (const name in extra) headers.push(name, extra[name]);
    try {
      response.writeHead(this.replyStatus, headers);
    } catch (error) {
      // A header Node refuses (a provider's value with a control character): the client is told, the batch goes on.
      return this.fail(error);
    }
    response.end(body);
  }

  /** The error as the client's API says it, unless the answer has started (then the connection is cut). */
  override fail(error: unknown): void {
    const call = this.call;
    call.inCall = false;
    // An answer is already on its way (see `respond`).
    if (this.replyBody !== undefined) return;
    const response = call.response;
    if (response.headersSent) {
      if (!response.writableEnded) response.destroy();
      return;
    }
    if (response.destroyed) return;
    const { parts } = call.plane;
    const { context, request } = call;
    const reply = errorReply(
      error,
      { api: context.api, requestId: context.id, presented: call.presented, context },
      { warn: parts.warn },
    );
    const send = () => {
      if (response.headersSent || response.destroyed) return;
      const headers = this.headersOf(undefined);
      for (const name in reply.headers) headers.push(name, reply.headers[name]);
      headers.push('content-length', String(reply.body.length));
      response.writeHead(reply.status, headers);
      response.end(reply.body);
    };
    // A client still sending a body that is too large would read a reset instead of this 413 (and its SDK would
    // retry): the rest of the body is read and dropped first, up to a bound.
    if (reply.status === 413 && !request.complete)
      drainRequest(request, drainBound(parts.config.maxBodyBytes)).then(send, send);
    else send();
  }

  /** The client hung up before its answer was written: it leaves the flight (which goes on for whoever else is in it). */
  private leave(): void {
    const call = this.call;
    this.subscription?.unsubscribe();
    if (call.inCall) call.plane.calls.noteClientGone();
    call.inCall = false;
  }

  /** The response closed (sent, or the client gone): no more waiting on it, and it is no longer a reader of its stream. */
  closed(): void {
    const call = this.call;
    clearTimeout(this.stall);
    this.bytesHeld?.();
    if (!call.response.writableFinished) this.leave();
    // The request that made the call counts as its reader from the start (see `UpstreamExchange.readers`).
    const upstream = call.upstream;
    const leading = upstream?.leading;
    if (leading) leading.removeReader();
    if (this.streaming && this.flow !== leading) this.flow?.removeReader();
    if (upstream) upstream.leading = undefined;
  }
}
