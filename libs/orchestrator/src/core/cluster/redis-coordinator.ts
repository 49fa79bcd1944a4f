import { randomUUID } from 'node:crypto';
import { describeError, withTimeout } from '../bounded.js';
import { Observable, type Subscription } from 'rxjs';
import type { CallEvent } from '../events.js';
import { FlightOutgrownError } from '../dedup/single-flight.js';
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
  /**
   * Bytes of a call's newest events its Redis stream keeps, for followers that read behind and for replicas that
   * join it late: older events are trimmed, so a long stream costs Redis this much, not its whole length. A follower
   * that falls further behind, or a late joiner once the start is trimmed, cannot follow it (see `follow`). It also
   * bounds what a leader holds for Redis while Redis is slow. Default 1 048 576 (1 MiB).
   */
  maxBacklogBytes?: number;
  /** After a failure, coordination is skipped (replicas act alone) for this long. Default 1 000 ms. */
  retryMs?: number;
  /** How errors cross the wire (an app can carry its own error types). */
  errorCodec?: ErrorCodec;
  /** The store failed (once per outage) or is back. */
  onState?: (state: 'ok' | 'degraded', error?: unknown) => void;
}

// XADDs then PUBLISH, atomically: a follower that subscribed and then read the stream misses nothing. Each event
// carries its number (`n`), so a follower tells a gap (events trimmed or evicted) from the next event; the oldest
// events are trimmed (`MINID`) to keep the stream within its backlog. Events that waited are appended together.
const APPEND = `local ids = {}
for i = 3, #ARGV, 2 do ids[#ids + 1] = redis.call('XADD', KEYS[1], '*', 'e', ARGV[i], 'n', ARGV[i + 1]) end
if ARGV[2] ~= '' then redis.call('XTRIM', KEYS[1], 'MINID', ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PUBLISH', KEYS[2], ids[#ids])
return ids`;
/** Most bytes of events one append carries (events that waited for Redis go together, up to this or a quarter of the backlog). */
const APPEND_BATCH_BYTES = 64 * 1024;
// Renew or release a lease only while it is still ours.
const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`;
// A leader renews its lease, and takes it again if Redis evicted it (never from another holder).
const REASSERT = `local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not held then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end
return 0`;
/** Events a follower reads at once: a late joiner of a long stream reads it in parts, none of them long for Redis. */
const READ_BATCH = 200;
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;
// Count a failure: the run expires on its own if nobody fails for a minute.
const COUNT = `local n = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], 60000) redis.call('PUBLISH', KEYS[2], 'fail') return n`;

/** `gone`: the leader's callers all left (a follower takes over); `hb`: the leader lives (sent while its call is silent). */
type Wire = WireEvent | { k: 'gone' } | { k: 'hb' };

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
  private readonly maxBacklogBytes: number;
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
    this.maxBacklogBytes = options.maxBacklogBytes ?? 1_048_576;
    this.retryMs = options.retryMs ?? 1_000;
    this.codec = options.errorCodec ?? DEFAULT_ERROR_CODEC;
  }

  /** `ok`, or `degraded` (replicas act alone) since the last failure. */
  health(): { state: 'ok' | 'degraded'; error?: string } {
    return this.degraded ? { state: 'degraded', error: this.lastError } : { state: 'ok' };
  }

  // ---- one call per key, fleet-wide ----

  async claim<T>(
    key: string,
    lead: () => Observable<CallEvent<T>>,
    options?: ClaimOptions,
  ): Promise<LeadClaim | FollowClaim<T> | undefined> {
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

  /**
   * The leader's events, passed on as they come, and appended in order to the call's stream, numbered. An append
   * that fails is tried again (a follower skips an event it already has) until Redis has failed for a whole lease or
   * the events waiting for it outgrow the backlog: only then does the leader stop publishing, and stop renewing its
   * lease, so that its followers learn within a lease that it is lost to them. While the call is silent, a heartbeat
   * tells the followers it lives, whatever happens to the lease's key.
   */
  private publishing<T>(key: string, holder: string, events: Observable<CallEvent<T>>): Observable<CallEvent<T>> {
    const lease = this.key('lease', key);
    const stream = this.flightKey(flightOf(holder), 'stream');
    const channel = this.flightKey(flightOf(holder), 'events');
    return new Observable<CallEvent<T>>((subscriber) => {
      const backlog = new Backlog(this.maxBacklogBytes);
      const waiting: Array<{ text: string; n: number }> = [];
      let waitingBytes = 0;
      let sequence = 0;
      let sending = false;
      let broken = false;
      let ended = false;
      let failingSince: number | undefined;
      let queuedAt = Date.now();
      const ttl = String(this.streamTtlMs);
      // A part of the backlog at most: a follower reading behind has the time of a few appends before its events go.
      const batchBytes = Math.min(APPEND_BATCH_BYTES, Math.floor(this.maxBacklogBytes / 4));
      const renew = setInterval(() => {
        void this.eval(REASSERT, [lease], [holder, String(this.leaseMs)]).catch(() => undefined);
        if (!ended && Date.now() - queuedAt >= this.leaseMs / 6) append({ k: 'hb' });
      }, this.leaseMs / 3);
      renew.unref?.();
      const giveUp = (error: unknown) => {
        // Followers notice within a lease (nothing renews it) and take over, or fail; this call goes on for its own callers.
        broken = true;
        clearInterval(renew);
        waiting.length = 0;
        waitingBytes = 0;
        this.degrade(error);
      };
      const pump = async () => {
        if (sending) return;
        sending = true;
        while (waiting.length > 0 && !broken) {
          let count = 0;
          let bytes = 0;
          const args: string[] = [];
          for (; count < waiting.length && (count === 0 || bytes + waiting[count].text.length <= batchBytes); count++) {
            bytes += waiting[count].text.length;
            args.push(waiting[count].text, String(waiting[count].n));
          }
          try {
            const trimTo = backlog.trimFor(bytes);
            const ids = (await this.eval(APPEND, [stream, channel], [ttl, trimTo, ...args])) as unknown[];
            for (let i = 0; i < count; i++) backlog.add(String(ids[i]), waiting[i].text.length);
            failingSince = undefined;
            waiting.splice(0, count);
            waitingBytes -= bytes;
          } catch (error) {
            failingSince ??= Date.now();
            if (Date.now() - failingSince >= this.leaseMs || waitingBytes > this.maxBacklogBytes) giveUp(error);
            else await delay(Math.min(this.pollMs, 100));
          }
        }
        sending = false;
        if (ended && waiting.length === 0) release();
      };
      // Renewed until the end is in Redis (however long Redis takes): followers must not take over meanwhile.
      const release = () => {
        clearInterval(renew);
        void this.eval(RELEASE, [lease], [holder]).catch(() => undefined);
      };
      const append = (wire: Wire) => {
        if (broken) return;
        const text = JSON.stringify(wire);
        waiting.push({ text, n: sequence++ });
        waitingBytes += text.length;
        queuedAt = Date.now();
        void pump();
      };
      let formatError: ((error: unknown) => string) | undefined;
      const end = (wire: Wire) => {
        ended = true;
        if (broken) release();
        else append(wire);
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
   * Another replica's call, from its first event: read from the stream (in parts), then on each announcement and
   * every `pollMs`. The leader lives while it holds its lease or its events (heartbeats included) keep coming: a
   * lease Redis evicted, or another replica took meanwhile, does not cut its followers. Once it is gone (lease lost
   * and silent for a lease), this replica takes the call over, or fails if its callers already have part of the
   * answer. A follower never passes on events of two calls: events it cannot read in order (trimmed from the
   * backlog, or evicted) end its answer with `leader_lost` once part of it was delivered; before that, its callers
   * are refused (`FlightOutgrownError`), never given a part of the answer or a second call's.
   */
  private follow<T>(
    key: string,
    initialHolder: string,
    lead: () => Observable<CallEvent<T>>,
  ): Observable<CallEvent<T>> {
    return new Observable<CallEvent<T>>((subscriber) => {
      let holder = initialHolder;
      let lastId = '-';
      /** The number of the next event (events of a leader of an earlier version carry none). */
      let expected = 0;
      let delivered = false;
      let finished = false;
      let reading: Promise<void> | undefined;
      let again = false;
      let takeover: Subscription | undefined;
      let channel = '';
      /** When the leader was last heard from (an event read), and since when Redis fails us. */
      let heardAt = Date.now();
      let failingSince: number | undefined;
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
          case 'hb':
            return false;
          default:
            if (wire.k === 'c' || wire.k === 'v' || wire.k === 'b') delivered = true;
            subscriber.next(wires.event<T>(wire));
            return false;
        }
      };
      // Events missing before the next one this follower can read: never skipped, never taken from another call.
      // A joiner that has nothing yet is refused as a local late joiner is (503, try again: the answer is then
      // likely in the window), rather than given a second call's answer while its herd gets the first.
      const missed = () => {
        finish();
        if (delivered)
          subscriber.error(
            leaderLost(
              'This replica fell behind the call it followed: the events it still needed were no longer kept.',
            ),
          );
        else subscriber.error(new FlightOutgrownError());
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
            for (;;) {
              const stream = this.flightKey(flightOf(holder), 'stream');
              const entries = (await this.command([
                'XRANGE',
                stream,
                lastId === '-' ? '-' : `(${lastId}`,
                '+',
                'COUNT',
                String(READ_BATCH),
              ])) as Array<[string, string[]]> | null;
              failingSince = undefined;
              for (const [id, fields] of entries ?? []) {
                lastId = id;
                heardAt = Date.now();
                const n = fields[2] === 'n' ? Number(fields[3]) : undefined;
                if (n !== undefined) {
                  // An append the leader tried again after a timeout that had in fact landed.
                  if (n < expected) continue;
                  if (n > expected) return missed();
                  expected = n + 1;
                }
                if (apply(JSON.parse(fields[1]) as Wire) || finished) return;
              }
              if (!entries || entries.length < READ_BATCH || finished) break;
            }
          } while (again && !finished);
        })()
          .catch((error: unknown) => failed(error))
          .finally(() => (reading = undefined));
        return reading;
      };
      const watch = async (next: string) => {
        if (channel) await this.options.subscriber.unsubscribe(channel, listener).catch(() => undefined);
        holder = next;
        lastId = '-';
        channel = this.flightKey(flightOf(holder), 'events');
        // Subscribed before reading: whatever is appended after the read is announced to us (and polled for anyway).
        await this.timed(this.options.subscriber.subscribe(channel, listener)).catch(() => undefined);
        await read();
      };
      // The leader is gone (its lease expired or changed hands, and it fell silent): take over, or fail.
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
      // Redis failed a read: tried again at the next poll; failing for a whole lease, coordination is lost.
      const failed = (error: unknown) => {
        failingSince ??= Date.now();
        if (Date.now() - failingSince >= this.leaseMs) fallBack(error);
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
          let current: unknown;
          try {
            current = await this.command(['GET', this.key('lease', key)]);
          } catch (error) {
            return failed(error);
          }
          // Its lease, or its events still coming: the leader lives, whoever holds the lease's key now.
          if (finished || current === holder || Date.now() - heardAt < this.leaseMs) return;
          // Read once more: the leader may have ended between our read and the check.
          await read();
          if (!finished) await takeOver();
        });
      }, this.pollMs);
      poll.unref?.();
      void watch(holder).catch((error: unknown) => failed(error));
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
        await this.command([
          'SET',
          this.breakerKey(name, 'state'),
          message,
          'PX',
          String(Math.max(1, state.openMs ?? 60_000) + this.leaseMs),
        ]);
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

  private async subscribeBreaker(
    name: string,
    watcher: { onChange: (state: SharedBreakerState) => void; subscribed: boolean },
  ): Promise<void> {
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

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref?.());
}

/**
 * What a call's Redis stream keeps, as its leader counts it: the ids and sizes of its newest events, within
 * `maxBytes`. `trimFor` says from which id on the stream is kept once the next event is added (`MINID`), or
 * `''` when nothing has to go.
 */
class Backlog {
  private readonly ids: string[] = [];
  private readonly sizes: number[] = [];
  private head = 0;
  private bytes = 0;

  constructor(private readonly maxBytes: number) {}

  trimFor(size: number): string {
    let last: string | undefined;
    while (this.head < this.ids.length && this.bytes + size > this.maxBytes) {
      last = this.ids[this.head];
      this.bytes -= this.sizes[this.head++];
    }
    if (this.head > 1024 && this.head * 2 > this.ids.length) {
      this.ids.splice(0, this.head);
      this.sizes.splice(0, this.head);
      this.head = 0;
    }
    if (last === undefined) return '';
    return this.head < this.ids.length ? this.ids[this.head] : following(last);
  }

  add(id: string, size: number): void {
    this.ids.push(id);
    this.sizes.push(size);
    this.bytes += size;
  }
}

/** The stream id right after `id` (`ms-seq`): `MINID` of it trims `id` and everything before. */
function following(id: string): string {
  const dash = id.indexOf('-');
  return `${id.slice(0, dash)}-${BigInt(id.slice(dash + 1)) + 1n}`;
}
