import type { CircuitBreaker } from '../breaker/circuit-breaker.js';
import type { ConcurrencyLimiter } from '../concurrency/concurrency-limiter.js';
import { isUpstreamFailure } from '../breaker/failure-classifier.js';
import { isOrchestratorError } from '../errors.js';

/**
 * What a health check says of an upstream: serving (`up`), starting (`loading`:
 * e.g. a llama.cpp server reading its model answers 503), or unreachable or
 * failing (`down`). Only `up` upstreams are in rotation.
 */
export type UpstreamHealth = 'up' | 'loading' | 'down';

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

  /** In rotation: healthy, and its breaker lets a call through. */
  get available(): boolean {
    return this.state === 'up' && this.breaker.isCallable();
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
 */
export class UpstreamPool<Target = unknown> {
  private readonly listeners = new Set<() => void>();
  private holding = 0;

  constructor(
    readonly name: string,
    readonly members: readonly Upstream<Target>[],
    /** Whether an error before the first byte sends the call to the next upstream. */
    readonly shouldFailover: (error: unknown) => boolean = defaultShouldFailover,
    /**
     * What a call does while no member is in rotation by its health (all down or loading): without a hold it is
     * sent to one anyway (its refusal or connection error is the answer); with one it waits for a member to come
     * back, then goes on, or is refused with `no_upstream_available` (see `failoverCall`).
     */
    readonly hold?: UpstreamHold,
  ) {
    for (const member of members) member.group = this;
  }

  /** The member of that name. */
  member(name: string): Upstream<Target> | undefined {
    return this.members.find((m) => m.name === name);
  }

  /** Whether any upstream is in rotation (what readiness reports). */
  get available(): boolean {
    return this.members.some((m) => m.available);
  }

  /** Whether any upstream's health check says it serves, whatever its breaker says (an open breaker refuses at once). */
  get inRotation(): boolean {
    // A loop, not `some`: read on every call of a pool with a hold.
    for (const member of this.members) if (member.health === 'up') return true;
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
   * refusal, a connection error) rather than none.
   */
  order(): Upstream<Target>[] {
    const scored = this.members.map((member) => {
      const { limiter } = member;
      const free = limiter.limit - limiter.inFlight;
      return {
        member,
        rank: member.available ? (free > 0 ? 0 : 1) : 2,
        // A limit of 0 (every slot busy with others' work): as loaded as can be.
        load: limiter.limit > 0 ? (limiter.inFlight + limiter.queued) / limiter.limit : Infinity,
      };
    });
    scored.sort((a, b) => a.rank - b.rank || (a.load === b.load ? 0 : a.load - b.load) || a.member.index - b.member.index);
    return scored.map((s) => s.member);
  }

  snapshot(): UpstreamSnapshot[] {
    return this.members.map((m) => m.snapshot());
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
