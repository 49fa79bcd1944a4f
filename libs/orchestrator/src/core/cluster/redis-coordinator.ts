import { randomUUID } from 'node:crypto';
import { describeError, withTimeout } from '../bounded.js';
import { Observable, type Subscription } from 'rxjs';
import type { CallEvent } from '../events.js';
import {
  DEFAULT_ERROR_CODEC,
  WireReader,
  errorToWire,
  leaderLost,
  toWire,
  type BreakerCoordinator,
  type ClaimOptions,
  type ErrorCodec,
  type FlightCoordinator,
  type FollowClaim,
  type LeadClaim,
  type SharedBreakerState,
  type WireEvent,
} from './coordination.js';

/** What the coordinator needs of a Redis client: commands (node-redis's `sendCommand` has this shape). */
export interface RedisCommands {
  sendCommand(args: string[]): Promise<unknown>;
}

/** A second connection for pub/sub (node-redis: `client.duplicate()`, connected). */
export interface RedisSubscriber {
  subscribe(channel: string, listener: (message: string) => void): Promise<unknown>;
  unsubscribe(channel: string, listener?: (message: string) => void): Promise<unknown>;
}

export interface RedisCoordinatorOptions {
  client: RedisCommands;
  subscriber: RedisSubscriber;
  /** Namespace of every key and channel. Default `npo`. */
  prefix?: string;
  /** Longest one Redis operation may take; slower is a failure. Default 200 ms. */
  opTimeoutMs?: number;
  /** How long a leader's claim lasts without renewal (renewed every third of it while the call runs). Default 5 000 ms. */
  leaseMs?: number;
  /** How often a follower re-reads the call's events and checks its leader is alive (besides notifications). Default 250 ms. */
  pollMs?: number;
  /** How long a finished call's events stay readable. Default 60 000 ms. */
  streamTtlMs?: number;
  /** After a failure, coordination is skipped (replicas act alone) for this long. Default 1 000 ms. */
  retryMs?: number;
  /** How errors cross the wire (an app can carry its own error types). */
  errorCodec?: ErrorCodec;
  /** The store failed (once per outage) or is back. */
  onState?: (state: 'ok' | 'degraded', error?: unknown) => void;
}

// XADD then PUBLISH, atomically: a follower that subscribed and then read the stream misses nothing.
const APPEND = `local id = redis.call('XADD', KEYS[1], '*', 'e', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PUBLISH', KEYS[2], id)
return id`;
// Renew or release a lease only while it is still ours.
const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`;
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;
// Count a failure: the run expires on its own if nobody fails for a minute.
const COUNT = `local n = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], 60000) redis.call('PUBLISH', KEYS[2], 'fail') return n`;

type Wire = WireEvent | { k: 'gone' };

/**
 * Coordination of replicas through one Redis: for each key, the replica that
 * wins a lease (`SET NX PX`, renewed while its call runs) makes the one
 * upstream call and appends each event to a Redis stream, announcing it on a
 * channel; the others read the stream from its start, then follow the
 * announcements, with a poll every `pollMs` so that a lost message costs
 * latency, never correctness. A leader that dies stops renewing: its lease
 * expires, one follower wins it and makes the call (if nothing reached its
 * callers yet; otherwise they get an error, never a wrong answer).
 *
 * Breakers: a fleet-wide count of consecutive failures, open/close announced
 * to every replica, and one prober for the fleet.
 *
 * Every operation is bounded in time; a failure makes the replicas act alone
 * for `retryMs`, reported once, and coordination resumes by itself.
 */
export class RedisCoordinator implements FlightCoordinator, BreakerCoordinator {
  readonly replicaId = randomUUID();
  private readonly prefix: string;
  private readonly opTimeoutMs: number;
  private readonly leaseMs: number;
  private readonly pollMs: number;
  private readonly streamTtlMs: number;
  private readonly retryMs: number;
  private readonly codec: ErrorCodec;
  private degradedUntil = 0;
  private degraded = false;
  private closed = false;
  private check?: ReturnType<typeof setTimeout>;
  private lastError?: string;
  /** Breakers whose fleet-wide run of failures may be running (a success must then end it). */
  private readonly failing = new Set<string>();
  /** Breakers watched, and whether their channel is subscribed (a failed subscription is retried on recovery). */
  private readonly watchers = new Map<string, { onChange: (state: SharedBreakerState) => void; subscribed: boolean }>();

  constructor(private readonly options: RedisCoordinatorOptions) {
    this.prefix = options.prefix ?? 'npo';
    this.opTimeoutMs = options.opTimeoutMs ?? 200;
    this.leaseMs = options.leaseMs ?? 5_000;
    this.pollMs = options.pollMs ?? 250;
    this.streamTtlMs = options.streamTtlMs ?? 60_000;
    this.retryMs = options.retryMs ?? 1_000;
    this.codec = options.errorCodec ?? DEFAULT_ERROR_CODEC;
  }

  /** `ok`, or `degraded` (replicas act alone) since the last failure. */
  health(): { state: 'ok' | 'degraded'; error?: string } {
    return this.degraded ? { state: 'degraded', error: this.lastError } : { state: 'ok' };
  }

  // ---- one call per key, fleet-wide ----

  async claim<T>(key: string, lead: () => Observable<CallEvent<T>>, options?: ClaimOptions): Promise<LeadClaim | FollowClaim<T> | undefined> {
    if (!this.available()) return undefined;
    // The leader's span rides in the lease's value: a follower learns it with the same reply that makes it follow.
    const trace = options?.trace;
    const holder = `${this.replicaId}:${randomUUID()}${trace && TRACEPARENT.test(trace) ? `;${trace}` : ''}`;
    let previous: unknown;
    try {
      previous = await this.command(['SET', this.key('lease', key), holder, 'NX', 'PX', String(this.leaseMs), 'GET']);
    } catch (error) {
      this.degrade(error);
      return undefined;
    }
    if (previous === null) return this.leadClaim(key, holder);
    const leader = String(previous);
    const mark = leader.indexOf(';');
    const events = this.follow<T>(key, leader, lead);
    return mark < 0 ? { role: 'follow', events } : { role: 'follow', events, leader: leader.slice(mark + 1) };
  }

  private leadClaim(key: string, holder: string): LeadClaim {
    return { role: 'lead', publish: (events) => this.publishing(key, holder, events) };
  }

  /** The leader's events, passed on as they come, and appended in order to the call's stream. */
  private publishing<T>(key: string, holder: string, events: Observable<CallEvent<T>>): Observable<CallEvent<T>> {
    const lease = this.key('lease', key);
    const stream = this.flightKey(flightOf(holder), 'stream');
    const channel = this.flightKey(flightOf(holder), 'events');
    return new Observable<CallEvent<T>>((subscriber) => {
      // Appends run one after another, so followers read the events in their order.
      let queue: Promise<unknown> = Promise.resolve();
      let broken = false;
      const append = (wire: Wire) => {
        queue = queue.then(() => {
          if (broken) return undefined;
          return this.eval(APPEND, [stream, channel], [JSON.stringify(wire), String(this.streamTtlMs)]).catch((error: unknown) => {
            // Followers notice the lease expiring and take over; this call goes on for its own callers.
            broken = true;
            this.degrade(error);
          });
        });
      };
      const renew = setInterval(() => void this.eval(RENEW, [lease], [holder, String(this.leaseMs)]).catch(() => undefined), this.leaseMs / 3);
      renew.unref?.();
      let ended = false;
      let formatError: ((error: unknown) => string) | undefined;
      const end = (wire: Wire) => {
        ended = true;
        clearInterval(renew);
        append(wire);
        queue = queue.then(() => this.eval(RELEASE, [lease], [holder]).catch(() => undefined));
      };
      const subscription = events.subscribe({
        next: (event) => {
          if (event.kind === 'head') formatError = event.formatError;
          append(toWire(event));
          subscriber.next(event);
        },
        error: (error: unknown) => {
          end(errorToWire(this.codec, error, formatError));
          subscriber.error(error);
        },
        complete: () => {
          end({ k: 'end' });
          subscriber.complete();
        },
      });
      return () => {
        subscription.unsubscribe();
        // Cancelled here (every caller of this replica left): followers elsewhere take the call over.
        if (!ended) end({ k: 'gone' });
      };
    });
  }

  /**
   * Another replica's call, from its first event: read from the stream, then
   * on each announcement and every `pollMs`. If its leader goes away before
   * the end, this replica takes the call over (or fails if its callers
   * already have part of the answer).
   */
  private follow<T>(key: string, initialHolder: string, lead: () => Observable<CallEvent<T>>): Observable<CallEvent<T>> {
    return new Observable<CallEvent<T>>((subscriber) => {
      let holder = initialHolder;
      let lastId = '-';
      let delivered = false;
      let finished = false;
      let reading: Promise<void> | undefined;
      let again = false;
      let takeover: Subscription | undefined;
      let channel = '';
      const listener = () => void read();
      const wires = new WireReader(this.codec);

      const finish = () => {
        finished = true;
        clearInterval(poll);
        if (channel) void this.options.subscriber.unsubscribe(channel, listener).catch(() => undefined);
      };
      const apply = (wire: Wire): boolean => {
        switch (wire.k) {
          case 'end':
            finish();
            subscriber.complete();
            return true;
          case 'err':
            finish();
            subscriber.error(wires.error(wire));
            return true;
          case 'gone':
            void takeOver();
            return true;
          default:
            if (wire.k === 'c' || wire.k === 'v' || wire.k === 'b') delivered = true;
            subscriber.next(wires.event<T>(wire));
            return false;
        }
      };
      // One read at a time; a notification during a read asks for one more.
      const read = async (): Promise<void> => {
        if (finished) return;
        if (reading) {
          again = true;
          return reading;
        }
        reading = (async () => {
          do {
            again = false;
            const entries = (await this.command(['XRANGE', this.flightKey(flightOf(holder), 'stream'), lastId === '-' ? '-' : `(${lastId}`, '+'])) as Array<
              [string, string[]]
            >;
            for (const [id, fields] of entries ?? []) {
              lastId = id;
              if (apply(JSON.parse(fields[1]) as Wire) || finished) return;
            }
          } while (again && !finished);
        })()
          .catch((error: unknown) => fallBack(error))
          .finally(() => (reading = undefined));
        return reading;
      };
      const watch = async (next: string) => {
        if (channel) await this.options.subscriber.unsubscribe(channel, listener).catch(() => undefined);
        holder = next;
        lastId = '-';
        channel = this.flightKey(flightOf(holder), 'events');
        // Subscribed before reading: whatever is appended after the read is announced to us.
        await this.timed(this.options.subscriber.subscribe(channel, listener));
        await read();
      };
      // The leader is gone (its lease expired or changed hands without an end): take over, or fail.
      const takeOver = async () => {
        if (finished) return;
        if (delivered) {
          finish();
          subscriber.error(leaderLost());
          return;
        }
        const claim = await this.claim<T>(key, lead);
        if (finished) return;
        if (!claim || claim.role === 'lead') {
          // This replica makes the call now (and, with a lease, for the others still following).
          finish();
          const events = lead();
          takeover = (claim ? claim.publish(events) : events).subscribe(subscriber);
          return;
        }
        // Another follower won it: follow that one instead.
        finish();
        takeover = claim.events.subscribe(subscriber);
      };
      // Coordination failed under us: the call is made here if nothing was delivered yet.
      const fallBack = (error: unknown) => {
        this.degrade(error);
        if (finished) return;
        finish();
        if (delivered) subscriber.error(leaderLost('Lost the replica making this call in the middle of its answer.'));
        else takeover = lead().subscribe(subscriber);
      };
      const poll = setInterval(() => {
        void read().then(async () => {
          if (finished) return;
          const current = await this.command(['GET', this.key('lease', key)]).catch((error: unknown) => fallBack(error));
          if (finished || current === holder) return;
          // Read once more: the leader may have ended between our read and the check.
          await read();
          if (!finished) await takeOver();
        });
      }, this.pollMs);
      poll.unref?.();
      void watch(holder).catch((error: unknown) => fallBack(error));
      return () => {
        finish();
        takeover?.unsubscribe();
      };
    });
  }

  // ---- breakers ----

  async countFailure(name: string): Promise<number | undefined> {
    if (!this.available()) return undefined;
    try {
      this.failing.add(name);
      return Number(await this.eval(COUNT, [this.breakerKey(name, 'failures'), this.breakerKey(name, 'events')], []));
    } catch (error) {
      this.degrade(error);
      return undefined;
    }
  }

  async resetFailures(name: string): Promise<void> {
    if (!this.failing.has(name) || !this.available()) return;
    this.failing.delete(name);
    await this.command(['DEL', this.breakerKey(name, 'failures')]).catch((error: unknown) => this.degrade(error));
  }

  async announce(name: string, state: SharedBreakerState): Promise<void> {
    if (!this.available()) return;
    const message = JSON.stringify({ ...state, by: this.replicaId });
    try {
      if (state.state === 'open') {
        await this.command(['SET', this.breakerKey(name, 'state'), message, 'PX', String(Math.max(1, state.openMs ?? 60_000) + this.leaseMs)]);
      } else await this.command(['DEL', this.breakerKey(name, 'state'), this.breakerKey(name, 'failures')]);
      await this.command(['PUBLISH', this.breakerKey(name, 'events'), message]);
    } catch (error) {
      this.degrade(error);
    }
  }

  async watch(name: string, onChange: (state: SharedBreakerState) => void): Promise<SharedBreakerState | undefined> {
    const watcher = { onChange, subscribed: false };
    this.watchers.set(name, watcher);
    try {
      await this.subscribeBreaker(name, watcher);
      const current = await this.command(['GET', this.breakerKey(name, 'state')]);
      if (typeof current !== 'string') return undefined;
      const parsed = JSON.parse(current) as SharedBreakerState;
      return sharedState(parsed);
    } catch (error) {
      this.degrade(error);
      return undefined;
    }
  }

  private async subscribeBreaker(name: string, watcher: { onChange: (state: SharedBreakerState) => void; subscribed: boolean }): Promise<void> {
    await this.timed(
      this.options.subscriber.subscribe(this.breakerKey(name, 'events'), (message) => {
        // Another replica counted a failure: a success here must end the fleet's run.
        if (message === 'fail') return void this.failing.add(name);
        const parsed = JSON.parse(message) as SharedBreakerState & { by: string };
        if (parsed.by !== this.replicaId) watcher.onChange(sharedState(parsed));
      }),
    );
    watcher.subscribed = true;
  }

  async isProber(name: string): Promise<boolean> {
    if (!this.available()) return true; // alone: every replica probes for itself
    const key = this.breakerKey(name, 'prober');
    const ttl = String(this.leaseMs);
    try {
      const taken = await this.command(['SET', key, this.replicaId, 'NX', 'PX', ttl]);
      if (taken !== null) return true;
      return Number(await this.eval(RENEW, [key], [this.replicaId, ttl])) === 1;
    } catch (error) {
      this.degrade(error);
      return true;
    }
  }

  // ---- plumbing ----

  private key(kind: string, id: string): string {
    return `${this.prefix}:${kind}:${id}`;
  }

  // A flight's stream and channel, and a breaker's keys and channel, share a hash tag: in a Redis Cluster each script
  // and multi-key command then touches one slot (`{f:...}`/`{b:...}` are never empty, so the tag always applies).
  private flightKey(flight: string, what: 'stream' | 'events'): string {
    return `${this.prefix}:{f:${flight}}:${what}`;
  }

  private breakerKey(name: string, what: 'state' | 'failures' | 'events' | 'prober'): string {
    return `${this.prefix}:{b:${name}}:${what}`;
  }

  private available(): boolean {
    if (!this.degraded) return true;
    if (Date.now() < this.degradedUntil) return false;
    // Time to try again: the next operation tells (and reports the recovery when it succeeds).
    return true;
  }

  private command(args: string[]): Promise<unknown> {
    return this.timed(this.options.client.sendCommand(args)).then((result) => {
      this.recovered();
      return result;
    });
  }

  private eval(script: string, keys: string[], args: string[]): Promise<unknown> {
    return this.command(['EVAL', script, String(keys.length), ...keys, ...args]);
  }

  private timed<T>(promise: Promise<T>): Promise<T> {
    return withTimeout(promise, this.opTimeoutMs, 'no answer from Redis');
  }


  private degrade(error: unknown): void {
    // The app is closing and its clients with it: what fails now is no outage.
    if (this.closed) return;
    this.degradedUntil = Date.now() + this.retryMs;
    this.lastError = describeError(error);
    if (!this.degraded) {
      this.degraded = true;
      this.options.onState?.('degraded', error);
    }
    // Tried again on its own, not only when a request comes: health says when sharing is back.
    if (!this.check) {
      this.check = setTimeout(() => {
        this.check = undefined;
        this.command(['PING']).catch((failure: unknown) => this.degrade(failure));
      }, this.retryMs);
      this.check.unref?.();
    }
  }

  /** Stops trying Redis again, and reporting failures (the app is closing: its clients close too). */
  close(): void {
    this.closed = true;
    clearTimeout(this.check);
    this.check = undefined;
  }

  private recovered(): void {
    if (!this.degraded) return;
    this.degraded = false;
    this.lastError = undefined;
    this.options.onState?.('ok');
    // Breakers first watched while Redis was away: subscribe them now.
    for (const [name, watcher] of this.watchers) {
      if (!watcher.subscribed) void this.subscribeBreaker(name, watcher).catch((error: unknown) => this.degrade(error));
    }
  }
}

/** The flight id in a lease holder's value (`replica:flight`, then `;traceparent` when the leader is traced). */
function flightOf(holder: string): string {
  const mark = holder.indexOf(';');
  return holder.slice(holder.indexOf(':') + 1, mark < 0 ? undefined : mark);
}

// Only a plain traceparent goes into a lease's value (it must never hold a `;` or `:` of its own).
const TRACEPARENT = /^[\da-f]{2}-[\da-f]{32}-[\da-f]{16}-[\da-f]{2}$/;

/** A breaker's state as another replica announced it, without the wire's own fields. */
function sharedState(parsed: SharedBreakerState): SharedBreakerState {
  return { state: parsed.state, openMs: parsed.openMs, ...(parsed.probeBlind === true ? { probeBlind: true } : {}) };
}
