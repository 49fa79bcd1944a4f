import { monitorEventLoopDelay } from 'node:perf_hooks';
import { OverloadedError, QueueTimeoutError } from '../errors.js';
import type { WithDefaults } from '../options.js';
import { AdaptiveLimit, type Clock } from './adaptive-limit.js';
import type { CONCURRENCY_FIELDS, ConcurrencyOptions } from './concurrency.options.js';

/** A limiter's settings with every default applied (see `ConcurrencyOptions` for each field). */
export type ConcurrencyLimiterOptions = Omit<
  WithDefaults<ConcurrencyOptions, typeof CONCURRENCY_FIELDS>,
  'name' | 'detachedLimit' | 'adaptive'
> & {
  detachedLimit: number;
  adaptive?: ConcurrencyOptions['adaptive'];
};

/** Gives a slot back; calling it twice is harmless. */
export type ReleaseSlot = () => void;

/**
 * How long an upstream that reports its load may be taken to keep running a call after it was aborted, when no
 * reading says otherwise: a server that notices a closed connection only when it next writes, or polls the socket
 * (llama.cpp checks a non-streamed request's connection about once a second).
 */
export const ABORTED_CALL_HOLD_MS = 2_000;

/**
 * One read of the upstream's load in progress (`ConcurrencyLimiter.beginLoadReading`): which of the limiter's own
 * calls the upstream surely counted, so that the rest of what it reports busy is work the limiter did not send.
 */
export class LoadReading {
  /** Of the calls that held a slot when the reading began, those that have ended since. */
  ended = 0;
  done = false;

  constructor(
    private readonly limiter: ConcurrencyLimiter,
    /** The last slot taken early enough to be counted by the upstream (slots are numbered as they are taken). */
    readonly lastTaken: number,
    /** Of the slots held when it began, those taken up to `lastTaken`. */
    readonly heldAtStart: number,
    /** When it began, on the limiter's own count of aborts and readings. */
    readonly tick: number,
  ) {}

  /** Calls that held a slot from (settled) before the reading began until now: the upstream counted each of them busy. */
  get heldThroughout(): number {
    return this.heldAtStart - this.ended;
  }

  /**
   * What the upstream said: `busy` of its slots were taken (or requests waiting inside it for one), at some moment
   * since the reading began. `undefined`: it said nothing (the reading failed); what was known stays.
   */
  end(busy: number | undefined): void {
    if (this.done) return;
    this.done = true;
    this.limiter.endLoadReading(this, busy);
  }
}

interface AbortedCall {
  tick: number;
  timer: ReturnType<typeof setTimeout>;
}

/** A slot taken recently, while the upstream reports its load: a reading may be too soon to count it. */
interface RecentTake {
  at: number;
  number: number;
  held: boolean;
}

// Recent takes kept at most: past it the oldest are dropped (then taken as counted, as any older call is).
const RECENT_TAKES_KEPT = 1_024;

interface Waiter {
  tenant: string;
  grant: (release: ReleaseSlot) => void;
  timer?: ReturnType<typeof setTimeout>;
  /** Its place in its line, while it waits there. */
  place?: number;
}

/**
 * One tenant's waiters, first come first served. An array rather than a Set: past the limit, every request joins a
 * line and leaves it, and a Set churned so keeps the waiters it held (and their requests) alive across scavenges
 * (see `KeyTable`). A waiter that leaves before its turn only empties its place.
 */
class WaitLine {
  private waiters: Array<Waiter | undefined> = [];
  /** Index of the first place that may hold a waiter. */
  private head = 0;
  /** Places dropped from the front since the line began: a waiter's place minus this is its index. */
  private dropped = 0;
  size = 0;

  push(waiter: Waiter): void {
    waiter.place = this.dropped + this.waiters.length;
    this.waiters.push(waiter);
    this.size++;
  }

  /** The waiter whose turn is next (the head always holds one while the line is not empty). */
  first(): Waiter | undefined {
    return this.waiters[this.head];
  }

  remove(waiter: Waiter): boolean {
    const index = waiter.place === undefined ? -1 : waiter.place - this.dropped;
    if (index < 0 || this.waiters[index] !== waiter) return false;
    this.waiters[index] = undefined;
    waiter.place = undefined;
    this.size--;
    if (this.size === 0) {
      this.dropped += this.waiters.length;
      this.waiters = [];
      this.head = 0;
    } else if (index === this.head) {
      while (this.waiters[this.head] === undefined) this.head++;
      // Most of the array is places already left: dropped, so that it stays about as long as the line is.
      if (this.head > 64 && this.head * 2 > this.waiters.length) {
        this.waiters.splice(0, this.head);
        this.dropped += this.head;
        this.head = 0;
      }
    }
    return true;
  }
}

// What `wait` returns when the caller never waited (granted or refused at once): nothing to leave.
const NOTHING_TO_LEAVE = (): void => undefined;

/**
 * A counting semaphore with a bounded wait queue shared fairly across tenants,
 * a maximum wait and abortable waits. Written here because the usual libraries
 * (p-limit, cockatiel's bulkhead, opossum's capacity) lack either the wait
 * bound, the abort, the fairness, or keep their refusals out of the breaker's
 * failure count.
 *
 * Fairness: each tenant waits in its own FIFO line, and a freed slot goes to
 * the next tenant in turn (round robin), so a tenant that floods the queue
 * delays the others by one slot turn, not by its whole backlog. With
 * `perTenantLimit`, a tenant never holds more slots than that.
 *
 * Detached calls (every caller gone, the call kept running so that its answer
 * lands in the window) move out of the callers' slots into a small budget of
 * their own (`detachedLimit`): work nobody waits for never blocks a live caller.
 * Not under a capacity (see below): there the slot is the upstream's, and a
 * detached call still runs in it, so it keeps it (a live caller waits for it
 * here, not inside the upstream), and is kept only while a slot is left for
 * live callers beside it.
 *
 * The limit can move while calls run: with `adaptive`, an `AdaptiveLimit`
 * finds it from the upstream's latency (`limit` in the options is then the
 * ceiling); `setCapacity` fixes it to what the upstream says it can run (a
 * llama.cpp server's slots). A lower limit never cuts calls in flight: new
 * ones wait until enough have ended.
 *
 * Under a capacity, the upstream may also say how much of it is busy (its load,
 * `beginLoadReading`): slots taken by work this limiter did not send (other
 * clients, other gateways) are not free, so the limit is the capacity minus
 * them, down to 0. A call aborted while running (a timeout, every caller gone)
 * may keep its slot upstream a moment longer: it is counted busy until a
 * reading that began after the abort says how things are, or for at most
 * `ABORTED_CALL_HOLD_MS`.
 *
 * Invariants: `active <= limit` (but right after the limit is lowered);
 * `detached <= detachedLimit`; a waiter is in
 * its tenant's line until it is granted, times out or is aborted, whichever
 * comes first, and exactly one of them happens.
 */
export class ConcurrencyLimiter {
  private active = 0;
  private detached = 0;
  private waiting = 0;
  /** Each tenant's line, in turn order: the tenant served last moves to the back. */
  private readonly lines = new Map<string, WaitLine>();
  /** Slots held per tenant, kept only when there is a per-tenant limit. */
  private readonly held = new Map<string, number>();
  private current: number;
  private readonly controller?: AdaptiveLimit;
  /** What the upstream said it can run (`setCapacity`); while set, the controller is not asked. */
  private capacity?: number;
  /** Slots the upstream reported busy with work other than this limiter's live calls, at its last reading. */
  private busyElsewhere = 0;
  /** Whether the upstream reports its load: only then are aborted calls counted until it says they ended. */
  private loadKnown = false;
  /** Calls aborted since the last reading began (or within the hold): the upstream may still run them. */
  private readonly aborted: AbortedCall[] = [];
  private readonly readings = new Set<LoadReading>();
  private recent: RecentTake[] = [];
  private readonly now: Clock;
  /** Slots taken so far, and aborts and readings so far: what a reading is ordered against. */
  private taken = 0;
  private ticks = 0;
  private loadListener?: () => void;

  private lag?: EventLoopLag;

  constructor(
    readonly name: string,
    private readonly options: ConcurrencyLimiterOptions,
    clock?: Clock,
  ) {
    const adaptive = options.adaptive;
    if (adaptive) {
      this.controller = new AdaptiveLimit(
        options.limit,
        adaptive === true ? {} : adaptive,
        clock,
        (limit) => {
          if (this.capacity === undefined) this.setLimit(limit);
        },
        (this.lag = clock ? undefined : eventLoopLag())?.read,
      );
    }
    this.current = this.controller?.limit ?? options.limit;
    this.now = clock ?? (() => performance.now());
  }

  get inFlight(): number {
    return this.active;
  }

  get queued(): number {
    return this.waiting;
  }

  /** Calls allowed in flight right now. */
  get limit(): number {
    return this.current;
  }

  /** The most the limit can be (`limit` in the options). */
  get ceiling(): number {
    return this.options.limit;
  }

  /**
   * The controller to tell of each call's latency, while the limit is adaptive
   * (absent when it is fixed, or while the upstream's own capacity is known).
   */
  get learning(): AdaptiveLimit | undefined {
    return this.capacity === undefined ? this.controller : undefined;
  }

  /** How the limit is set now: by the upstream's capacity, by the adaptive controller, or fixed. */
  get mode(): 'capacity' | 'adaptive' | 'fixed' {
    return this.capacity !== undefined ? 'capacity' : this.controller ? 'adaptive' : 'fixed';
  }

  /**
   * The upstream says how many calls it can run at once (a llama.cpp server's
   * slots): the limit is that (less what its load reports busy elsewhere),
   * within the ceiling, until told otherwise. `undefined` gives the limit back
   * to the adaptive controller (or the ceiling), and forgets the load.
   */
  setCapacity(capacity: number | undefined): void {
    this.capacity = capacity === undefined ? undefined : Math.max(1, Math.floor(capacity));
    if (this.capacity === undefined) this.forgetLoad();
    else this.updateLimit();
  }

  /** Slots the upstream's last reading found busy with work this limiter did not send (0 when it reports no load). */
  get slotsBusyElsewhere(): number {
    return this.busyElsewhere;
  }

  /** Whether the upstream reports its load (its last reading was taken in): then `slotsBusyElsewhere` is known. */
  get loadReported(): boolean {
    return this.loadKnown;
  }

  /** Calls aborted while running that the upstream may still be running (see `ABORTED_CALL_HOLD_MS`). */
  get abortedHeld(): number {
    return this.aborted.length;
  }

  /**
   * Starts a read of the upstream's load (under a capacity): call it before asking the upstream, and `end` the
   * reading with its answer. The calls that held a slot throughout are the limiter's own share of what it reports,
   * but those that took it less than `settleMs` before: the upstream may not have seen their request yet (a server
   * busy with a long step takes new requests in after it), so they are not taken as counted.
   */
  beginLoadReading(settleMs = 0): LoadReading {
    const settled = this.now() - settleMs;
    const recent = this.recent;
    let young = 0;
    let lastSettled = this.taken;
    let index = recent.length - 1;
    for (; index >= 0 && recent[index].at > settled; index--) {
      lastSettled = recent[index].number - 1;
      if (recent[index].held) young++;
    }
    // Older takes are settled for this reading and the next ones alike.
    if (index >= 0) recent.splice(0, index + 1);
    const reading = new LoadReading(this, lastSettled, this.active - young, ++this.ticks);
    this.readings.add(reading);
    return reading;
  }

  /** See `LoadReading.end`. */
  endLoadReading(reading: LoadReading, busy: number | undefined): void {
    this.readings.delete(reading);
    if (busy === undefined || this.capacity === undefined) return;
    this.loadKnown = true;
    // Calls that started or ended while the upstream was read may be in its count or not: taking the fewest as
    // ours errs towards slots busy elsewhere, which the next reading corrects (never towards sending too many).
    this.busyElsewhere = Math.max(0, Math.floor(busy) - reading.heldThroughout);
    // Calls aborted before the reading began are in what it reports if the upstream still runs them.
    while (this.aborted.length > 0 && this.aborted[0].tick < reading.tick) clearTimeout(this.aborted.shift()!.timer);
    this.updateLimit();
  }

  /** The upstream's load is unknown again (it went down, or stopped saying): the limit is its capacity. */
  forgetLoad(): void {
    this.loadKnown = false;
    this.busyElsewhere = 0;
    this.recent = [];
    for (const call of this.aborted.splice(0)) clearTimeout(call.timer);
    this.updateLimit();
  }

  /**
   * A call that was running upstream was aborted (a timeout, or every caller left): when the upstream reports its
   * load, its slot is counted busy until a reading says otherwise. Call it before the call's slot is released.
   */
  abortedCall(): void {
    if (!this.loadKnown || this.capacity === undefined) return;
    const call: AbortedCall = {
      tick: ++this.ticks,
      timer: setTimeout(() => this.holdEnded(call), ABORTED_CALL_HOLD_MS),
    };
    call.timer.unref?.();
    this.aborted.push(call);
    this.updateLimit();
    if (this.waiting > 0) this.loadListener?.();
  }

  /**
   * Told when a caller starts waiting while the limit is held down by what only the upstream can say has ended
   * (work elsewhere, aborted calls): a reading now may find a slot. One listener (the upstream's health check).
   */
  onLoadReadingWanted(listener: (() => void) | undefined): void {
    this.loadListener = listener;
  }

  /** Callers wait while slots are counted busy with work that ends without this limiter seeing it. */
  get loadReadingWanted(): boolean {
    return this.waiting > 0 && (this.busyElsewhere > 0 || this.aborted.length > 0);
  }

  private holdEnded(call: AbortedCall): void {
    const index = this.aborted.indexOf(call);
    if (index < 0) return;
    this.aborted.splice(index, 1);
    this.updateLimit();
  }

  private updateLimit(): void {
    if (this.capacity === undefined) return this.setLimit(this.controller?.limit ?? this.options.limit);
    // Every slot may be busy elsewhere: then nothing is sent until one is free.
    this.setLimit(this.capacity - this.busyElsewhere - this.aborted.length, 0);
  }

  private setLimit(limit: number, floor = 1): void {
    const next = Math.min(this.options.limit, Math.max(floor, limit));
    if (next === this.current) return;
    this.current = next;
    this.pump();
  }

  get queueSize(): number {
    return this.options.queueSize;
  }

  /** Calls running with no caller left, in their own budget. */
  get detachedInFlight(): number {
    return this.detached;
  }

  /** A slot at once if one is free for this tenant (no promise, no queue), else `undefined`. */
  tryAcquire(tenant = ''): ReleaseSlot | undefined {
    if (!this.options.fairQueue) tenant = '';
    if (this.active >= this.current || !this.underTenantLimit(tenant)) return undefined;
    return this.take(tenant);
  }

  /**
   * Resolves with a release function once a slot is free for this tenant.
   * Rejects with `OverloadedError` when the queue is full, `QueueTimeoutError`
   * after `maxWaitMs`, or the signal's reason when the caller aborts while waiting.
   */
  acquire(signal?: AbortSignal, tenant = ''): Promise<ReleaseSlot> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<ReleaseSlot>((resolve, reject) => {
      if (!signal) return void this.wait(tenant, resolve, reject);
      let settled = false;
      const settle =
        <A>(then: (value: A) => void) =>
        (value: A) => {
          settled = true;
          signal.removeEventListener('abort', onAbort);
          then(value);
        };
      const leave = this.wait(tenant, settle(resolve), settle(reject));
      function onAbort(): void {
        leave();
        reject(signal!.reason);
      }
      if (!settled) signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /**
   * `acquire` for a caller that keeps its wait itself: `grant` is given the slot (now, or once one is free) and
   * `refuse` the queue's refusal (`OverloadedError` now, `QueueTimeoutError` after `maxWaitMs`), exactly one of them
   * once; the function returned leaves the queue. No promise, no AbortSignal and no listener: a call that waits for
   * a slot (most of them, when the load is past the limit) costs the queue one entry and one timer.
   */
  wait(tenant: string, grant: (release: ReleaseSlot) => void, refuse: (error: Error) => void): () => void {
    if (!this.options.fairQueue) tenant = '';
    const now = this.tryAcquire(tenant);
    if (now) {
      grant(now);
      return NOTHING_TO_LEAVE;
    }
    if (this.waiting >= this.options.queueSize) {
      refuse(new OverloadedError(this.name, this.options.retryAfterSeconds));
      return NOTHING_TO_LEAVE;
    }
    const waiter: Waiter = { tenant, grant };
    waiter.timer = setTimeout(() => {
      this.leave(waiter);
      refuse(new QueueTimeoutError(this.name, this.options.maxWaitMs, this.options.retryAfterSeconds));
    }, this.options.maxWaitMs);
    let line = this.lines.get(tenant);
    if (!line) this.lines.set(tenant, (line = new WaitLine()));
    line.push(waiter);
    this.waiting++;
    if (this.loadListener && this.loadReadingWanted) this.loadListener();
    return () => this.leave(waiter);
  }

  /**
   * A call every caller left keeps running: returns the release of its slot from now on, or `undefined` when it
   * cannot be kept (the call should then be cancelled). Without a capacity, its slot goes to whoever waits and it
   * runs in the detached budget (`detachedLimit`). Under a capacity it keeps its slot, for it still takes one
   * upstream: kept only within the budget, and while at least one slot of the limit is left for live callers.
   */
  detach(release: ReleaseSlot): ReleaseSlot | undefined {
    if (this.detached >= this.options.detachedLimit) return undefined;
    if (this.capacity !== undefined) {
      if (this.detached + 1 >= this.current) return undefined;
      this.detached++;
      let released = false;
      return () => {
        if (released) return;
        released = true;
        this.detached--;
        release();
      };
    }
    this.detached++;
    release();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.detached--;
    };
  }

  private take(tenant: string): ReleaseSlot {
    if (this.active++ === 0) this.lag?.busy();
    const number = ++this.taken;
    if (this.options.perTenantLimit !== undefined) this.held.set(tenant, (this.held.get(tenant) ?? 0) + 1);
    let recent: RecentTake | undefined;
    if (this.loadKnown) {
      recent = { at: this.now(), number, held: true };
      if (this.recent.push(recent) > RECENT_TAKES_KEPT) this.recent.shift();
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.active === 0) this.lag?.idle();
      if (recent) recent.held = false;
      if (this.readings.size > 0) for (const reading of this.readings) if (number <= reading.lastTaken) reading.ended++;
      if (this.options.perTenantLimit !== undefined) {
        const held = (this.held.get(tenant) ?? 1) - 1;
        if (held === 0) this.held.delete(tenant);
        else this.held.set(tenant, held);
      }
      this.pump();
    };
  }

  private underTenantLimit(tenant: string): boolean {
    const cap = this.options.perTenantLimit;
    return cap === undefined || (this.held.get(tenant) ?? 0) < cap;
  }

  /** Gives free slots to the next tenants in turn whose limit allows one more. */
  private pump(): void {
    while (this.active < this.current && this.waiting > 0) {
      let next: Waiter | undefined;
      for (const [tenant, line] of this.lines) {
        if (!this.underTenantLimit(tenant)) continue;
        next = line.first();
        break;
      }
      if (!next) return;
      this.leave(next);
      // Served: to the back of the turn order (alone in it, it is there already: the map is not churned for nothing).
      const line = this.lines.size > 1 ? this.lines.get(next.tenant) : undefined;
      if (line) {
        this.lines.delete(next.tenant);
        this.lines.set(next.tenant, line);
      }
      next.grant(this.take(next.tenant));
    }
  }

  private leave(waiter: Waiter): void {
    const line = this.lines.get(waiter.tenant);
    if (line?.remove(waiter)) {
      this.waiting--;
      if (line.size === 0) this.lines.delete(waiter.tenant);
    }
    clearTimeout(waiter.timer);
  }
}

interface EventLoopLag {
  /** The mean delay (ms) since the last reading. */
  read: () => number;
  /** Calls are in flight: sample. */
  busy: () => void;
  /** None is: stop sampling. */
  idle: () => void;
}

/**
 * The event loop's mean delay (ms) while calls were in flight, since the last
 * reading: what a latency sample taken in this process gained from the
 * process itself being busy. One monitor per adaptive limiter (a libuv timer
 * every 10 ms, unreferenced), sampling only while the limiter has a call in
 * flight: that is the delay the readings stand for, and at rest its timer
 * would wake the process a hundred times a second.
 */
function eventLoopLag(): EventLoopLag {
  const histogram = monitorEventLoopDelay({ resolution: 10 });
  return {
    read: () => {
      // Never-sampled histograms report NaN; the monitor itself adds its resolution to every reading.
      const mean = histogram.count > 0 ? histogram.mean / 1e6 - 10 : 0;
      histogram.reset();
      return Math.max(0, mean);
    },
    busy: () => void histogram.enable(),
    idle: () => void histogram.disable(),
  };
}
