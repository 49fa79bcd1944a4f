import type { ObservableInput } from 'rxjs';

/** What a streamed answer starts with: everything a late joiner or a replay needs to answer the same way. */
export interface StreamHead {
  /** e.g. `text/event-stream`. */
  contentType: string;
  /** Extra response headers sent with every copy of the stream. */
  headers?: Record<string, string>;
}

/**
 * One piece of a streamed answer: bytes as they came off the wire (relayed to
 * every caller without decoding or re-encoding), or text a handler produced.
 */
export type Chunk = string | Buffer;

/**
 * A call yields either one value, or a head followed by chunks. Kept as
 * plain data so that a finished answer can be stored in (and replayed from) a
 * shared store such as Redis.
 */
export type CallEvent<T> =
  | { readonly kind: 'value'; readonly value: T }
  | {
      readonly kind: 'head';
      readonly head: StreamHead;
      /** In-process only (never stored): see `StreamedResponse.formatError`. */
      readonly formatError?: (error: unknown) => string;
      /** In-process only (never stored): whether the stream is held back by its readers (see `FlowControl`). */
      readonly flow?: FlowControl;
    }
  | { readonly kind: 'chunk'; readonly chunk: Chunk };

/**
 * A chunk of a stream as an event. Made by a constructor, not as an object literal: V8 tracks where literals are
 * made, and once most objects of one place outlive a scavenge (a stream's first chunks do, kept for late joiners),
 * it makes every later one there in old space (pretenuring). An old event keeps its young Buffer alive through every
 * scavenge: the Buffer reaches old space too, and is freed only by a full collection. With streams written to
 * readers that had stopped reading, that left tens of MB of passed-on Buffers waiting for one
 * (`test/faults/stalled-readers.slow-spec.ts`). Objects made by `new` are not pretenured so.
 */
export class ChunkEvent {
  readonly kind = 'chunk';
  constructor(readonly chunk: Chunk) {}
}

/**
 * A stream whose readers can hold its source back: while every caller is slow
 * to read, the source is paused rather than buffered without bound. The time
 * limits do not count a paused stretch as the upstream's silence.
 */
export interface FlowControl {
  readonly paused: boolean;
}

/**
 * Return this from a route handler (or from work given to `OrchestratorService`)
 * to send a streamed answer: every chunk is written to the client as it arrives,
 * shared with identical requests that join while it runs, and replayed from the
 * dedup window once finished.
 *
 * Keep `chunks` lazy (a cold Observable, an async generator): the upstream call
 * should start when it is subscribed, so that its time limits cover it.
 */
const STREAMED = Symbol.for('nest-prompt-orchestrator.streamed-response');

export class StreamedResponse {
  // A brand, not `instanceof` alone: two copies of the package (ESM and CommonJS) in one process still agree.
  // On the prototype (see below): a symbol-keyed field would be defined on every instance.
  declare readonly [STREAMED]: true;

  constructor(
    readonly chunks: ObservableInput<Chunk>,
    readonly head: StreamHead = { contentType: 'text/event-stream; charset=utf-8' },
    /**
     * Turns an error raised after the first chunk into a last chunk the client
     * can see (e.g. an SSE `error` event). Without it, the connection is cut.
     */
    readonly formatError?: (error: unknown) => string,
  ) {}
}

Object.defineProperty(StreamedResponse.prototype, STREAMED, { value: true });

export function isStreamedResponse(value: unknown): value is StreamedResponse {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[STREAMED] === true;
}

const RAW = Symbol.for('nest-prompt-orchestrator.raw-response');

/**
 * Return this from a route handler to answer with bytes that are already
 * serialised (e.g. a provider's JSON, relayed unchanged): they are written as
 * they are, shared as they are with every joined caller, and kept in the
 * window by their exact size. Nothing re-serialises them.
 */
export class RawResponse {
  // On the prototype (see below): one is made per answer, and a symbol-keyed field would be defined on each.
  declare readonly [RAW]: true;

  constructor(
    readonly body: Buffer,
    /** Default `application/json`. */
    readonly contentType: string = 'application/json',
    /** Extra response headers sent with every copy. */
    readonly headers?: Record<string, string>,
    /** The HTTP status to answer with (default: the route's own, e.g. 200), e.g. a provider's 204 relayed. */
    readonly status?: number,
  ) {}
}

Object.defineProperty(RawResponse.prototype, RAW, { value: true });

export function isRawResponse(value: unknown): value is RawResponse {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[RAW] === true;
}
