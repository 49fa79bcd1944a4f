import { randomUUID } from 'node:crypto';
import { describeError, withTimeout } from '../bounded.js';
import type { Observable } from 'rxjs';
import type { CallEvent } from '../events.js';
import type {
  BreakerCoordinator,
  ClaimOptions,
  ErrorCodec,
  FlightCoordinator,
  FollowClaim,
  LeadClaim,
  SharedBreakerState,
} from './coordination.js';
import { RedisRelay, type RedisRelayStore } from './redis-relay.js';
import { RelayCoordinator } from './relay.js';

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

// Renew a lease only while it is still ours.
const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`;
// Count a failure: the run expires on its own if nobody fails for a minute.
const COUNT = `local n = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], 60000) redis.call('PUBLISH', KEYS[2], 'fail') return n`;

/**
 * Coordination of replicas through one Redis. Calls: the relay protocol
 * (`relay.ts`) over Redis (`redis-relay.ts`): for each key, the replica that
 * wins a lease makes the one upstream call and appends each event to a Redis
 * stream; the others follow it, and take the call over if it dies (if nothing
 * reached their callers yet; otherwise they get an error, never a wrong answer).
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
  private readonly retryMs: number;
  private readonly relay: RelayCoordinator;
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
    this.retryMs = options.retryMs ?? 1_000;
    const store: RedisRelayStore = {
      replicaId: this.replicaId,
      leaseMs: this.leaseMs,
      pollMs: options.pollMs ?? 250,
      streamTtlMs: options.streamTtlMs ?? 60_000,
      maxBacklogBytes: options.maxBacklogBytes ?? 1_048_576,
      available: () => this.available(),
      command: (args) => this.command(args),
      eval: (script, keys, args) => this.eval(script, keys, args),
      subscribe: (channel, listener) => this.timed(options.subscriber.subscribe(channel, listener)),
      unsubscribe: (channel, listener) => options.subscriber.unsubscribe(channel, listener),
      degrade: (error) => this.degrade(error),
      key: (kind, id) => this.key(kind, id),
      flightKey: (flight, what) => this.flightKey(flight, what),
    };
    this.relay = new RelayCoordinator(new RedisRelay(store), { errorCodec: options.errorCodec });
  }

  /** `ok`, or `degraded` (replicas act alone) since the last failure. */
  health(): { state: 'ok' | 'degraded'; error?: string } {
    return this.degraded ? { state: 'degraded', error: this.lastError } : { state: 'ok' };
  }

  // ---- one call per key, fleet-wide ----

  claim<T>(
    key: string,
    lead: () => Observable<CallEvent<T>>,
    options?: ClaimOptions,
  ): Promise<LeadClaim | FollowClaim<T> | undefined> {
    return this.relay.claim(key, lead, options);
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

/** A breaker's state as another replica announced it, without the wire's own fields. */
function sharedState(parsed: SharedBreakerState): SharedBreakerState {
  return { state: parsed.state, openMs: parsed.openMs, ...(parsed.probeBlind === true ? { probeBlind: true } : {}) };
}
