import {
  Observable,
  Subject,
  type Observer,
  type Subscriber,
  type Subscription,
  type TeardownLogic,
  type Unsubscribable,
} from 'rxjs';
import { isRawResponse, type CallEvent, type Chunk, type StreamHead } from '../events.js';
import { sizeOf, type WindowEntry, type WindowPayload } from './answer-window.js';
import { BatchedDelivery, DeliveryBatches } from './delivery-batches.js';
import { KeyTable } from '../collections/key-table.js';

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
  /** Receives the finished answer (if within bounds); the flight stays joinable until the returned promise (if any) settles. */
  onSuccess?: (entry: WindowPayload<T>) => Promise<void> | undefined;
  /**
   * The leader's span (a W3C `traceparent`), for joiners to link to; absent
   * without tracing. `pending`: not known yet (the fleet is being asked who
   * leads); joiners are linked once `setLeader` tells.
   */
  // eslint-disable-next-line @typescript-eslint/no-redundant-type-constituents -- the literal names the special value
  leader?: string | 'pending';
  /** What the call is for (a route, an upstream), for whoever lists the calls in flight. */
  route?: string;
  upstream?: string;
  /** The leader's `CallRequest.tag`: given to joiners, and stored with the answer. */
  tag?: unknown;
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

type Linker = (leader: string | undefined) => void;

/**
 * Singleflight over RxJS: one shared call per key, multicast with a replay
 * (as `share` with a ReplaySubject connector would, see `Flight`), so that a
 * caller who joins late still receives every event from the first one, then
 * the live tail.
 *
 * Invariants: a key maps to at most one flight; a flight's entry is removed when
 * its call ends (success, error or cancellation), and only if the map still holds
 * that same flight, so a newer flight under the same key is never clobbered.
 * Errors reach every caller that joined and are never kept. Events reach the
 * callers in batches (`DeliveryBatches`): a herd's answer never holds the
 * event loop for more than one batch.
 */
export class SingleFlight<T> {
  // Not a Map: flights come and go with every request (see `KeyTable`).
  private readonly flights = new KeyTable<Flight<T>>();
  // Beside the map rather than in it: without tracing nothing is kept, and a flight's entry goes with the flight.
  // A list while the leader is not known yet: the joiners waiting to be linked.
  private readonly leaders = new WeakMap<Observable<CallEvent<T>>, string | Linker[]>();

  /**
   * Bytes the streams in flight keep now, together. Each flight keeps its stream from the start (for callers who join
   * late, and for the window) up to `maxEntryBytes`; many long streams at once would keep that many times over, so
   * past `maxHeldBytes` together the flight whose chunk crosses it lets its copy go, as if it had outgrown
   * `maxEntryBytes`.
   */
  held = 0;
  readonly maxHeldBytes: number;
  readonly batches: DeliveryBatches;

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
    return this.flights.get(key)?.events;
  }

  /** The flight under `key`: its events, and its leader's tag. */
  find(key: string): { readonly events: Observable<CallEvent<T>>; readonly tag?: unknown } | undefined {
    return this.flights.get(key);
  }

  /** The calls in flight with the most callers waiting on them, at most `limit`. */
  busiest(limit: number): FlightInfo[] {
    const all = this.flights.values().sort((a, b) => b.subscribers - a.subscribers || a.startedAt - b.startedAt);
    return all.slice(0, limit).map((f) => ({
      key: f.key,
      route: f.route,
      upstream: f.upstream,
      startedAt: f.startedAt,
      callers: f.subscribers,
    }));
  }

  /** Callers waiting on every call in flight here, together. */
  get callers(): number {
    let n = 0;
    for (const flight of this.flights.values()) n += flight.subscribers;
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
    const flight = new Flight<T>(this, key, call, options);
    this.flights.set(key, flight);
    if (options.leader) this.leaders.set(flight.events, options.leader === 'pending' ? [] : options.leader);
    return flight.events;
  }

  /** The flight's call is over (or was let go): identical requests no longer join it. */
  forget(flight: Flight<T>): void {
    if (this.flights.get(flight.key) === flight) this.flights.delete(flight.key);
  }
}

/**
 * One call in flight and its callers: what `share` with a ReplaySubject
 * connector does (the first subscriber connects the call; the replay outlives
 * its end, for late joiners and errors alike; the last subscriber leaving
 * before the end resets it when `cancelWhenAbandoned` says so), written out so
 * that a flight costs one subscription of the call and one per caller, and it
 * is also where the answer is recorded for the window and what the stream
 * keeps is counted. The flight is the observer of its call.
 */
class Flight<T> implements Observer<CallEvent<T>> {
  readonly startedAt = Date.now();
  readonly route?: string;
  readonly upstream?: string;
  readonly tag?: unknown;
  /** Callers of this process waiting on the call now (the leader's included). */
  subscribers = 0;
  /** What callers subscribe to: one Observable for the whole flight. */
  readonly events: Observable<CallEvent<T>>;
  private replay?: FlightReplay<CallEvent<T>>;
  private source?: Subscription;
  private connected = false;
  /** The call completed or failed: nothing resets the flight any more. */
  private ended = false;
  private readonly recorder?: AnswerRecorder<T>;
  private written?: Promise<void>;
  /** This flight's share of `held`: what its replay (and the recorder, on the same Buffers) keeps of the stream. */
  private kept = 0;

  constructor(
    private readonly flights: SingleFlight<T>,
    readonly key: string,
    private readonly call: Observable<CallEvent<T>>,
    private readonly options: LeadOptions<T>,
  ) {
    this.route = options.route;
    this.upstream = options.upstream;
    this.tag = options.tag;
    if (options.onSuccess) this.recorder = new AnswerRecorder<T>(options.maxEntryBytes, options.tag);
    this.events = new Observable<CallEvent<T>>((subscriber) => this.attach(subscriber));
  }

  private attach(subscriber: Subscriber<CallEvent<T>>): TeardownLogic {
    // A caller that joined just before the replay was let go, and subscribes after, cannot get the answer's start.
    if (this.replay?.dropped) return subscriber.error(new FlightOutgrownError());
    this.subscribers++;
    const replay = (this.replay ??= new FlightReplay<CallEvent<T>>());
    const caller = new FlightCaller<T>(this, replay.join(new BatchedDelivery(this.flights.batches, subscriber)));
    if (!this.connected) {
      this.connected = true;
      const source = this.call.subscribe(this);
      // Ended (or reset) during the subscription itself: there is nothing left to unsubscribe.
      if (this.connected && !this.ended) this.source = source;
    }
    return caller;
  }

  /** A caller left: the last one leaving before the end lets the call go, if the flight says so. */
  left(): void {
    this.subscribers--;
    if (this.subscribers > 0 || this.ended || !this.connected || !this.options.cancelWhenAbandoned()) return;
    // Reset as `share` resets: a caller who still subscribes later starts a call of its own.
    const source = this.source;
    this.source = undefined;
    this.replay = undefined;
    this.connected = false;
    source?.unsubscribe();
    this.disconnected();
  }

  next(event: CallEvent<T>): void {
    const replay = this.replay!;
    this.recorder?.record(event);
    if (event.kind === 'chunk' && !replay.dropped) {
      const length = event.chunk.length;
      this.kept += length;
      this.flights.held += length;
      // Too long to keep, or the streams in flight keep too much together: the one that grows lets its copy go.
      if (this.kept > this.options.maxEntryBytes || this.flights.held > this.flights.maxHeldBytes) {
        this.flights.forget(this);
        replay.drop();
        this.recorder?.abandon();
        this.release();
      }
    }
    replay.next(event);
  }

  error(error: unknown): void {
    // Before the callers see the error: one that retries at once must start a new call, not join this one.
    this.flights.forget(this);
    this.ended = true;
    this.source = undefined;
    this.replay!.error(error);
    this.disconnected();
  }

  complete(): void {
    const entry = this.recorder?.entry();
    if (entry && this.options.onSuccess) this.written = this.options.onSuccess(entry);
    this.ended = true;
    this.source = undefined;
    this.replay!.complete();
    this.disconnected();
  }

  /**
   * The call's subscription is over (ended, or let go): what it kept is handed back (the window counts a finished
   * answer in its own budget; late joiners of the finished flight are few and brief), and the flight is forgotten,
   * once the window holds its answer: until then, late callers still join it.
   */
  private disconnected(): void {
    this.release();
    if (this.written) void this.written.finally(() => this.flights.forget(this));
    else this.flights.forget(this);
  }

  private release(): void {
    this.flights.held -= this.kept;
    this.kept = 0;
  }
}

/** One caller's subscription to a flight's replay; unsubscribing it is the caller leaving. */
class FlightCaller<T> implements Unsubscribable {
  constructor(
    private readonly flight: Flight<T>,
    private readonly subscription: Subscription,
  ) {}

  unsubscribe(): void {
    this.subscription.unsubscribe();
    this.flight.left();
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
 * A flight's events for its callers: every event so far, then the live ones (or the end, once there was one), as a
 * ReplaySubject gives them. The events so far are kept here rather than in a ReplaySubject so that they can be let
 * go once nobody can join any more (the flight is forgotten first): callers already there go on receiving the live
 * events.
 */
class FlightReplay<E> extends Subject<E> {
  dropped = false;
  private kept: E[] = [];

  /** Subscribes `observer` from the first event on (`subscribe` alone gives the live ones only). */
  join(observer: Observer<E>): Subscription {
    const kept = this.kept;
    for (let i = 0; i < kept.length; i++) observer.next(kept[i]);
    // A Subject that ended tells a new subscriber so at once: after the events kept, as a ReplaySubject does.
    return this.subscribe(observer);
  }

  /** Lets the events kept go, and keeps no more. */
  drop(): void {
    this.dropped = true;
    this.kept = [];
  }

  override next(value: E): void {
    if (!this.dropped) this.kept.push(value);
    super.next(value);
  }
}

/** Largest body Node's shared buffer pool takes (`Buffer.allocUnsafe` pools below half the pool's size). */
const POOLED_MAX = Buffer.poolSize >>> 1;

/**
 * A small body as the window keeps it: copied into Node's shared buffer pool, unless it already sits in a buffer of
 * the pool's size. A body read from a socket is a view of that read's own ArrayBuffer (headers included); kept for
 * the window's minutes, each would be one more ArrayBuffer and allocation per entry for the collector to promote,
 * track and free, where pooled bodies share one per 8 KiB.
 */
function compact(body: Buffer): Buffer {
  return body.length < POOLED_MAX && body.buffer.byteLength !== Buffer.poolSize ? Buffer.from(body) : body;
}

/** Collects a call's events into a window entry while it runs, until it grows past its bound. */
class AnswerRecorder<T> {
  private size = 0;
  private value?: { value: T };
  private head?: StreamHead;
  private chunks: Chunk[] = [];
  private overflowed = false;

  constructor(
    private readonly maxBytes: number,
    private readonly tag: unknown,
  ) {}

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

  /**
   * The answer as the window keeps it. Its times are there from the start (the window sets them when it stores
   * it): a field added later would move every entry's fields out of the object, a few hundred bytes each.
   */
  entry(): WindowEntry<T> | undefined {
    if (this.overflowed) return undefined;
    const tag = this.tag;
    if (this.value) {
      const value = this.value.value;
      if (!isRawResponse(value)) return { kind: 'value', value, tag, storedAt: 0, expiresAt: 0 };
      const { contentType, headers, status } = value;
      return { kind: 'bytes', body: compact(value.body), contentType, headers, status, tag, storedAt: 0, expiresAt: 0 };
    }
    // The chunks as they came (Buffers the stream already allocated): joined only for a shared store (see `AnswerWindow.set`).
    if (this.head) return { kind: 'stream', head: this.head, chunks: this.chunks, tag, storedAt: 0, expiresAt: 0 };
    return undefined;
  }
}
