import { NEVER, Observable, ReplaySubject, Subject, of, share } from 'rxjs';
import { isRawResponse, type CallEvent, type Chunk, type StreamHead } from '../events.js';
import { sizeOf, type WindowPayload } from './answer-window.js';
import { DeliveryBatches } from './delivery-batches.js';

/** Callers served at once when one answer reaches many: about 10-20 ms of work before the event loop gets a turn. */
export const DELIVERY_BATCH_SIZE = 32;

/** How a request was answered, as sent in `x-orchestrator-dedup`. */
export type DedupOutcome = 'miss' | 'joined' | 'cached';

export interface LeadOptions<T> {
  /**
   * Asked when the last caller leaves: `true` cancels the call. A call that
   * has not reached the upstream yet is always cancelled by the caller; one
   * that has is kept by default, so that it lands in the window.
   */
  cancelWhenAbandoned: () => boolean;
  /**
   * Answers over this size are not recorded for the window, nor replayed to callers who would join once the
   * answer has grown past it: the flight is then forgotten (an identical request makes a call of its own) and what
   * was kept for late joiners is let go, so a long stream costs its callers' sockets, not a copy of itself.
   */
  maxEntryBytes: number;
  /** Receives the finished answer (if within bounds); the flight stays joinable until the returned promise settles. */
  onSuccess?: (entry: WindowPayload<T>) => Promise<void>;
  /**
   * The leader's span (a W3C `traceparent`), for joiners to link to; absent
   * without tracing. `pending`: not known yet (the fleet is being asked who
   * leads); joiners are linked once `setLeader` tells.
   */
  leader?: string | 'pending';
  /** What the call is for (a route, an upstream), for whoever lists the calls in flight. */
  route?: string;
  upstream?: string;
}

/** One call in flight, as a status page shows it. */
export interface FlightInfo {
  readonly key: string;
  readonly route?: string;
  readonly upstream?: string;
  /** Epoch ms. */
  readonly startedAt: number;
  /** Callers of this process waiting on it now (the leader's included). */
  readonly callers: number;
}

/** A flight's facts, and the count of its subscribers (kept by the delivery operator). */
interface Flight {
  readonly key: string;
  readonly route?: string;
  readonly upstream?: string;
  readonly startedAt: number;
  subscribers: number;
}

type Linker = (leader: string | undefined) => void;

/**
 * Singleflight over RxJS: one shared call per key, multicast with `share` and a
 * ReplaySubject connector, so that a caller who joins late still receives every
 * event from the first one, then the live tail.
 *
 * Invariants: a key maps to at most one flight; a flight's entry is removed when
 * its call ends (success, error or cancellation), and only if the map still holds
 * that same flight, so a newer flight under the same key is never clobbered.
 * Errors reach every caller that joined and are never kept. Events reach the
 * callers in batches (`DeliveryBatches`): a herd's answer never holds the
 * event loop for more than one batch.
 */
export class SingleFlight<T> {
  private readonly flights = new Map<string, Observable<CallEvent<T>>>();
  private readonly infos = new Map<string, Flight>();
  // Beside the map rather than in it: without tracing nothing is kept, and a flight's entry goes with the flight.
  // A list while the leader is not known yet: the joiners waiting to be linked.
  private readonly leaders = new WeakMap<Observable<CallEvent<T>>, string | Linker[]>();

  /**
   * Bytes the streams in flight keep now, together. Each flight keeps its stream from the start (for callers who join
   * late, and for the window) up to `maxEntryBytes`; many long streams at once would keep that many times over, so
   * past `maxHeldBytes` together the flight whose chunk crosses it lets its copy go, as if it had outgrown
   * `maxEntryBytes`.
   */
  private held = 0;
  private readonly maxHeldBytes: number;
  private readonly batches: DeliveryBatches;

  constructor(options: { maxHeldBytes?: number; batches?: DeliveryBatches } = {}) {
    this.maxHeldBytes = options.maxHeldBytes ?? Number.POSITIVE_INFINITY;
    this.batches = options.batches ?? new DeliveryBatches({ size: DELIVERY_BATCH_SIZE });
  }

  /** Bytes the streams in flight keep now, for late joiners and for the window. */
  get heldBytes(): number {
    return this.held;
  }

  /** Calls in flight; bounded by the number of distinct keys being called right now. */
  get size(): number {
    return this.flights.size;
  }

  join(key: string): Observable<CallEvent<T>> | undefined {
    return this.flights.get(key);
  }

  /** The calls in flight with the most callers waiting on them, at most `limit`. */
  busiest(limit: number): FlightInfo[] {
    const all = [...this.infos.values()].sort((a, b) => b.subscribers - a.subscribers || a.startedAt - b.startedAt);
    return all.slice(0, limit).map((f) => ({ key: f.key, route: f.route, upstream: f.upstream, startedAt: f.startedAt, callers: f.subscribers }));
  }

  /** Callers waiting on every call in flight here, together. */
  get callers(): number {
    let n = 0;
    for (const info of this.infos.values()) n += info.subscribers;
    return n;
  }

  /** Calls `link` with the span of the request that leads `flight` (a `traceparent`), now or once known; not at all without one. */
  onLeader(flight: Observable<CallEvent<T>>, link: Linker): void {
    const leader = this.leaders.get(flight);
    if (typeof leader === 'string') link(leader);
    else leader?.push(link);
  }

  /** Names the span joiners of a `pending` flight link to (this replica's leader, or another replica's). */
  setLeader(flight: Observable<CallEvent<T>>, traceparent: string | undefined): void {
    const waiting = this.leaders.get(flight);
    if (typeof waiting === 'string') return;
    if (traceparent) this.leaders.set(flight, traceparent);
    else this.leaders.delete(flight);
    for (const link of waiting ?? []) link(traceparent);
  }

  /** Registers `call` as the flight for `key` and returns its shared events. */
  lead(key: string, call: Observable<CallEvent<T>>, options: LeadOptions<T>): Observable<CallEvent<T>> {
    const onSuccess = options.onSuccess;
    const recorder = onSuccess ? new AnswerRecorder<T>(options.maxEntryBytes) : undefined;
    let written: Promise<void> | undefined;
    let replay: FlightReplay<CallEvent<T>> | undefined;
    // This flight's share of `held`: what its replay (and the recorder, on the same Buffers) keeps of the stream.
    let kept = 0;
    const release = () => {
      this.held -= kept;
      kept = 0;
    };
    // Who waits on the call right now: what a status page shows beside it (299 callers on one call, not "1 in flight").
    const info: Flight = { key, route: options.route, upstream: options.upstream, startedAt: Date.now(), subscribers: 0 };
    const forget = () => {
      if (this.flights.get(key) !== delivered) return;
      this.flights.delete(key);
      this.infos.delete(key);
    };
    // One operator for what `tap` and `finalize` would do in two.
    const recorded = new Observable<CallEvent<T>>((subscriber) => {
      const subscription = call.subscribe({
        next: (event) => {
          recorder?.record(event);
          if (event.kind === 'chunk' && replay && !replay.dropped) {
            kept += event.chunk.length;
            this.held += event.chunk.length;
            // Too long to keep, or the streams in flight keep too much together: the one that grows lets its copy go.
            if (kept > options.maxEntryBytes || this.held > this.maxHeldBytes) {
              forget();
              replay.drop();
              recorder?.abandon();
              release();
            }
          }
          subscriber.next(event);
        },
        error: (error: unknown) => {
          // Before the callers see the error: one that retries at once must start a new call, not join this one.
          forget();
          subscriber.error(error);
        },
        complete: () => {
          const entry = recorder?.entry();
          if (entry && onSuccess) written = onSuccess(entry);
          subscriber.complete();
        },
      });
      return () => {
        subscription.unsubscribe();
        // The window counts a finished answer in its own budget; late joiners of the finished flight are few and brief.
        release();
        // Until the window holds the answer, late callers still join the finished flight.
        if (written) void written.finally(forget);
        else forget();
      };
    });
    const shared: Observable<CallEvent<T>> = recorded.pipe(
      share({
        connector: () => (replay = new FlightReplay<CallEvent<T>>()),
        resetOnError: false,
        resetOnComplete: false,
        resetOnRefCountZero: () => (options.cancelWhenAbandoned() ? of(true) : NEVER),
      }),
    );
    // A caller that joined just before the replay was let go, and subscribes after, cannot get the answer's start.
    const joinable = new Observable<CallEvent<T>>((subscriber) =>
      replay?.dropped ? subscriber.error(new FlightOutgrownError()) : shared.subscribe(subscriber),
    );
    const delivered = joinable.pipe(this.batches.operator<CallEvent<T>>(info));
    this.flights.set(key, delivered);
    this.infos.set(key, info);
    if (options.leader) this.leaders.set(delivered, options.leader === 'pending' ? [] : options.leader);
    return delivered;
  }
}

/** A caller subscribed to a flight whose start was no longer kept (see `LeadOptions.maxEntryBytes`); it may try again. */
export class FlightOutgrownError extends Error {
  override name = 'FlightOutgrownError';
  readonly status = 503;
  constructor() {
    super('The answer this request joined had grown past what is kept for late joiners; try again.');
  }
}

/**
 * A flight's ReplaySubject whose replay can be let go once nobody can join any more (the flight is forgotten
 * first): subscribers already there go on receiving the live events.
 */
class FlightReplay<E> extends ReplaySubject<E> {
  dropped = false;

  drop(): void {
    this.dropped = true;
    // RxJS 7 keeps the replay in `_buffer`, which it does not expose: emptying it is what lets the events go.
    (this as unknown as { _buffer: unknown[] })._buffer.length = 0;
  }

  override next(value: E): void {
    // Once dropped, events only pass through (ReplaySubject.next would keep each one again).
    if (this.dropped) Subject.prototype.next.call(this, value);
    else super.next(value);
  }
}

/** Collects a call's events into a window entry while it runs, until it grows past its bound. */
class AnswerRecorder<T> {
  private size = 0;
  private value?: { value: T };
  private head?: StreamHead;
  private chunks: Chunk[] = [];
  private overflowed = false;

  constructor(private readonly maxBytes: number) {}

  /** Keeps nothing more: the answer will not be stored. */
  abandon(): void {
    this.overflowed = true;
    this.chunks = [];
    this.value = undefined;
  }

  record(event: CallEvent<T>): void {
    if (this.overflowed) return;
    if (event.kind === 'value') {
      this.value = { value: event.value };
      this.size = sizeOf(event.value);
    } else if (event.kind === 'head') {
      this.head = event.head;
    } else {
      this.size += event.chunk.length;
      this.chunks.push(event.chunk);
    }
    if (this.size > this.maxBytes) this.abandon();
  }

  entry(): WindowPayload<T> | undefined {
    if (this.overflowed) return undefined;
    if (this.value) {
      const value = this.value.value;
      if (!isRawResponse(value)) return { kind: 'value', value };
      return { kind: 'bytes', body: value.body, contentType: value.contentType, headers: value.headers, status: value.status };
    }
    if (this.head) return { kind: 'stream', head: this.head, chunks: joinBytes(this.chunks) };
    return undefined;
  }
}

/**
 * A finished stream of relayed bytes kept as one Buffer: replayed in one write, stored in a shared store as one
 * value, and never decoded chunk by chunk (a chunk may end inside a multi-byte character). Text chunks stay as
 * they are.
 */
function joinBytes(chunks: Chunk[]): Chunk[] {
  if (chunks.length < 2 || chunks.every((chunk) => typeof chunk === 'string')) return chunks;
  return [Buffer.concat(chunks.map((chunk) => (typeof chunk === 'string' ? Buffer.from(chunk) : chunk)))];
}
