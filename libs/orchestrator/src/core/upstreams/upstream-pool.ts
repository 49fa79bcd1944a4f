import type { CircuitBreaker } from '../breaker/circuit-breaker.js';
import type { ConcurrencyLimiter } from '../concurrency/concurrency-limiter.js';
import { isUpstreamFailure } from '../breaker/failure-classifier.js';
import { isOrchestratorError } from '../errors.js';

/**
 * What a health check says of an upstream: serving (`up`), starting (`loading`:
 * e.g. a llama.cpp server reading its model answers 503), or unreachable or
 * failing (`down`); `pending` is a member added at run time that no check has
 * yet found up. Only `up` upstreams are in rotation.
 */
export type UpstreamHealth = 'up' | 'loading' | 'down' | 'pending';

/** One upstream of a pool, as `health()` and the status page show it. */
export interface UpstreamSnapshot {
  name: string;
  pool: string;
  /** What the last health check said (`up` when nothing checks it). */
  health: UpstreamHealth;
  /** Whether a request would be sent here now: healthy and its breaker not open. */
  available: boolean;
  breaker: CircuitBreaker['state'];
  /** The upstream's own capacity when it says it (a llama.cpp server's slots). */
  slots?: number;
  /** Of those, how many its last load reading found busy with work this process did not send (when it reports its load). */
  slotsBusyElsewhere?: number;
  /** How its limit is set (`capacity`: its slots; `adaptive`: learnt; `fixed`). */
  limitMode?: ConcurrencyLimiter['mode'];
  limit?: number;
  inFlight: number;
  queued: number;
  /** Why it is out of rotation, when it is (the last check's error). */
  detail?: string;
  /** Taken out of its pool: no new calls; listed until its calls in flight have ended. */
  draining?: true;
}

/**
 * One upstream (a provider base URL, a llama.cpp server): its own breaker and
 * concurrency limiter, and a health state a health check keeps up to date.
 * `target` is the caller's own description of it (a URL, a key), handed to the
 * call's work so that it knows where to send the request.
 */
export class Upstream<Target = unknown> {
  private state: UpstreamHealth = 'up';
  private detail?: string;
  private slots?: number;
  /** The pool it belongs to, told when its health changes (calls may wait for an upstream to come into rotation). @internal */
  group?: UpstreamPool<Target>;
  /** Whether a health check has let it in: members of a pool from the start are, members added later wait for one. */
  private joined = true;
  /** Calls under way here (queued for its slot, or attempting, or streaming): what a removal waits for. */
  private calls = 0;
  private drain?: { promise: Promise<void>; resolve: () => void };

  constructor(
    readonly name: string,
    readonly pool: string,
    /** Position in the pool's order of preference (0 first). */
    readonly index: number,
    readonly target: Target,
    readonly breaker: CircuitBreaker,
    readonly limiter: ConcurrencyLimiter,
  ) {}

  /** What the last health check said. */
  get health(): UpstreamHealth {
    return this.state;
  }

  /** In rotation: healthy, not draining, and its breaker lets a call through. */
  get available(): boolean {
    return this.state === 'up' && this.drain === undefined && this.breaker.isCallable();
  }

  /** Taken out of its pool (`UpstreamPool.remove`): it gets no new calls, and its calls in flight finish. */
  get draining(): boolean {
    return this.drain !== undefined;
  }

  /**
   * Whether the pool may send it new calls at all: not draining, and, when it was added at run time, let in by a
   * first good health check. (An upstream that is in the pool but out of rotation may still be tried last.)
   */
  get routable(): boolean {
    return this.joined && this.drain === undefined;
  }

  /** Calls under way here: queued for its slot, attempting, or streaming. */
  get callsInFlight(): number {
    return this.calls;
  }

  /** A call starts here (its slot wait included). @internal */
  enter(): void {
    this.calls++;
  }

  /** A call that `enter`ed has ended, however it ended. @internal */
  leave(): void {
    this.calls--;
    if (this.calls === 0) this.drain?.resolve();
  }

  /** Out of rotation until a health check says it is up (a member added at run time). @internal */
  awaitFirstCheck(): void {
    this.joined = false;
    this.state = 'pending';
  }

  /** Stops new calls; resolves once the calls under way have ended. @internal */
  startDraining(): Promise<void> {
    if (!this.drain) {
      let resolve!: () => void;
      const promise = new Promise<void>((done) => (resolve = done));
      this.drain = { promise, resolve };
      if (this.calls === 0) resolve();
    }
    return this.drain.promise;
  }

  /**
   * A health check's result. `slots` is the upstream's own capacity when it
   * says it (a llama.cpp server's `total_slots`): the limiter then never lets
   * more calls through than that; `undefined` leaves the limit as it is set
   * otherwise (adaptive or fixed). How many are busy is the limiter's load
   * reading (`limiter.beginLoadReading`); an upstream that is not up says
   * nothing of its load any more, so what was read of it is forgotten.
   */
  setHealth(health: UpstreamHealth, options: { slots?: number; detail?: string } = {}): void {
    const changed = health !== this.state;
    this.state = health;
    if (health === 'up') this.joined = true;
    this.detail = health === 'up' ? undefined : options.detail;
    if (health !== 'up' && this.limiter.loadReported) this.limiter.forgetLoad();
    if (options.slots !== undefined && options.slots !== this.slots) {
      this.slots = options.slots;
      this.limiter.setCapacity(options.slots);
    }
    if (changed) this.group?.healthChanged();
  }

  snapshot(): UpstreamSnapshot {
    const limiter = this.limiter;
    return {
      name: this.name,
      pool: this.pool,
      health: this.state,
      available: this.available,
      breaker: this.breaker.state,
      ...(this.slots === undefined ? {} : { slots: this.slots }),
      ...(limiter.loadReported ? { slotsBusyElsewhere: limiter.slotsBusyElsewhere } : {}),
      limitMode: limiter.mode,
      limit: limiter.limit,
      inFlight: limiter.inFlight,
      queued: limiter.queued,
      ...(this.detail === undefined ? {} : { detail: this.detail }),
      ...(this.drain === undefined ? {} : { draining: true as const }),
    };
  }
}

/** How long a call waits for an upstream of its pool to come into rotation, and how many may wait at once. */
export interface UpstreamHold {
  /** Longest wait, in ms; 0 refuses at once. */
  ms: number;
  /** Calls waiting at once; more are refused at once (memory stays bounded). Default 1000. */
  maxHeld?: number;
}

/**
 * The upstreams that serve one API, interchangeable: the same request gets
 * the same answer from any of them (so identical requests share one call
 * whichever serves it). Requests go where there is free capacity; see
 * `failoverCall` for what happens when one fails.
 *
 * A dynamic pool's members change at run time (`add`, `remove`): a member
 * added waits out of rotation for its first good health check; a member
 * removed gets no new calls, finishes those under way (streams are not cut),
 * and leaves the pool once they have ended.
 */
export class UpstreamPool<Target = unknown> {
  private readonly listeners = new Set<() => void>();
  private holding = 0;
  private list: readonly Upstream<Target>[];

  constructor(
    readonly name: string,
    members: readonly Upstream<Target>[],
    /** Whether an error before the first byte sends the call to the next upstream. */
    readonly shouldFailover: (error: unknown) => boolean = defaultShouldFailover,
    /**
     * What a call does while no member is in rotation by its health (all down or loading): without a hold it is
     * sent to one anyway (its refusal or connection error is the answer); with one it waits for a member to come
     * back, then goes on, or is refused with `no_upstream_available` (see `failoverCall`).
     */
    readonly hold?: UpstreamHold,
    /**
     * Whether members may be added and removed at run time: policies over it then always choose the member per
     * call (see `Orchestrator.policy`), even while it has one.
     */
    readonly dynamic = false,
  ) {
    this.list = members;
    for (const member of members) member.group = this;
  }

  /** Its members, those still draining included (a new array after each change: one being read is never changed). */
  get members(): readonly Upstream<Target>[] {
    return this.list;
  }

  /** The member of that name (not the one draining, when one of that name is being replaced). */
  member(name: string): Upstream<Target> | undefined {
    return this.list.find((m) => m.name === name && !m.draining) ?? this.list.find((m) => m.name === name);
  }

  /** Whether any upstream is in rotation (what readiness reports). */
  get available(): boolean {
    return this.list.some((m) => m.available);
  }

  /**
   * Adds a member (a dynamic pool only). It waits out of rotation (`pending`) until a health check says it is
   * `up` (`setHealth`). Throws when a member of that name is already in the pool and not draining.
   */
  add(member: Upstream<Target>): void {
    if (!this.dynamic) throw new Error(`upstream pool "${this.name}" is not dynamic: its members are fixed`);
    if (member.pool !== this.name)
      throw new Error(`upstream "${member.name}" belongs to pool "${member.pool}", not "${this.name}"`);
    if (this.list.some((m) => m.name === member.name && !m.draining))
      throw new Error(`upstream pool "${this.name}" already has a member "${member.name}"`);
    member.awaitFirstCheck();
    member.group = this;
    this.list = [...this.list, member];
  }

  /**
   * Takes a member out (a dynamic pool only): no new call goes to it from now on; resolves once the calls under
   * way there have ended, when it leaves `members`. Undefined when the pool has no such member (or it is already
   * draining).
   */
  remove(name: string): Promise<void> | undefined {
    if (!this.dynamic) throw new Error(`upstream pool "${this.name}" is not dynamic: its members are fixed`);
    const member = this.list.find((m) => m.name === name && !m.draining);
    if (!member) return undefined;
    return member.startDraining().then(() => {
      this.list = this.list.filter((m) => m !== member);
    });
  }

  /** Whether any upstream's health check says it serves, whatever its breaker says (an open breaker refuses at once). */
  get inRotation(): boolean {
    // A loop, not `some`: read on every call of a pool with a hold.
    for (const member of this.list) if (member.health === 'up' && member.routable) return true;
    return false;
  }

  /** Calls waiting now for an upstream of this pool to come into rotation. */
  get held(): number {
    return this.holding;
  }

  /** Calls `listener` whenever a member's health changes; returns the function that stops it. @internal */
  watchHealth(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Counts a call into the hold; false when as many as the hold allows already wait. @internal */
  enterHold(): boolean {
    if (this.holding >= (this.hold?.maxHeld ?? 1_000)) return false;
    this.holding++;
    return true;
  }

  /** @internal */
  leaveHold(): void {
    this.holding--;
  }

  /** A member's health changed. @internal */
  healthChanged(): void {
    // A copy: a listener that goes on with its call stops listening meanwhile.
    for (const listener of [...this.listeners]) listener();
  }

  /**
   * The members in the order a call should try them: in rotation before out of
   * it; among those in rotation, one with a free slot before one without, and
   * the least loaded (in flight and queued, for its limit) first; ties go to
   * the order of preference. Out-of-rotation members come last, so that when
   * every upstream is out the call still gets an upstream's own answer (a
   * refusal, a connection error) rather than none. Members draining, and
   * members added that no health check has let in yet, are not offered at all.
   */
  order(): Upstream<Target>[] {
    const scored: Array<{ member: Upstream<Target>; rank: number; load: number }> = [];
    for (const member of this.list) {
      if (!member.routable) continue;
      const { limiter } = member;
      const free = limiter.limit - limiter.inFlight;
      scored.push({
        member,
        rank: member.available ? (free > 0 ? 0 : 1) : 2,
        // A limit of 0 (every slot busy with others' work): as loaded as can be.
        load: limiter.limit > 0 ? (limiter.inFlight + limiter.queued) / limiter.limit : Infinity,
      });
    }
    scored.sort(
      (a, b) => a.rank - b.rank || (a.load === b.load ? 0 : a.load - b.load) || a.member.index - b.member.index,
    );
    return scored.map((s) => s.member);
  }

  snapshot(): UpstreamSnapshot[] {
    return this.list.map((m) => m.snapshot());
  }
}

/**
 * The default failover test: what another upstream may answer where this one
 * could not. Its breaker open or its queue full (a refusal that never reached
 * it), a connection error, a 5xx but 501, a 429. Not the caller's own 4xx (any
 * upstream would say the same), nor the caller hanging up, nor a timeout: the
 * request's time budget is spent, and a generation longer than it would only
 * run out of time on the next upstream too.
 */
export function defaultShouldFailover(error: unknown): boolean {
  if (isOrchestratorError(error)) return error.code === 'circuit_open' || error.code === 'overloaded';
  const status = (error as { status?: unknown } | null)?.status;
  if (status === 429) return true;
  return isUpstreamFailure(error);
}
