import { fleetKey } from './redis-connection.js';
/**
 * Whether the fleet is one fleet: the one place that knows if coordination
 * through Redis (`--redis`) works, and why not when it does not.
 *
 * A probe (one EVAL that writes and reads a key, and reads the fleet's size)
 * is sent every `periodMs`; a probe still unanswered when the next period
 * starts marks Redis down. A frozen Redis is therefore noticed within two
 * periods however late timers fire on a busy machine: no per-operation timer
 * has to expire, and no run of failures has to build up. Every part that
 * uses Redis (coordination, the answer window, rate limits, spend caps) also
 * reports its own failures here, with their cause (an auth, TLS, cross-slot
 * or topology error does not show in a PING).
 *
 * While Redis is down, commands sent through `gate()` fail at once instead of
 * each waiting for its own time bound: a herd's requests are not held up by
 * every Redis operation in turn. Commands sent while the first connection is
 * still being made wait for it (bounded), so a start with Redis up never
 * reports an outage.
 */

/** Why coordination through Redis does not work. */
export type RedisCause =
  'unreachable' | 'timeout' | 'auth' | 'tls' | 'cross-slot' | 'topology' | 'out-of-memory' | 'error';

/** What the gateway shares through Redis, each reporting its own state. */
export type RedisPart = 'coordination' | 'window' | 'rate-limits' | 'spend-caps';

export type RedisState = 'starting' | 'up' | 'down';

export interface RedisProblem {
  cause: RedisCause;
  error: string;
}

/** `maxmemory-policy` and `maxmemory` as Redis reported them at start (`unknown` where CONFIG is disabled). */
export interface EvictionView {
  policy: string;
  maxmemory: number | null;
  /** Whether keys the fleet needs may be evicted (every key has a TTL, so `volatile-*` policies evict them too). */
  keysMayBeEvicted: boolean | null;
}

export interface RedisCommandClient {
  sendCommand(args: string[]): Promise<unknown>;
}

export interface RedisHealthOptions {
  /** The connection probed (commands go to it as they are, not through the gate). */
  client: RedisCommandClient;
  /** Namespace of the probe's key and the fleet's heartbeat hash. */
  prefix: string;
  /** How often Redis is probed; an unanswered probe at the next period is an outage. */
  periodMs: number;
  /** Resolves once the first connection is made (or given up on). */
  connected: Promise<void>;
  /** Lines for the operator: `warn` for an outage, `info` when it is over. */
  log: { warn(line: string): void; info(line: string): void };
  /** Test hook: called on every change of the overall state. */
  onChange?: (state: RedisState) => void;
}

// Writes (a store refusing writes, out of memory or read-only, breaks coordination) and reads the fleet's size.
const PROBE = `redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000) return redis.call('HLEN', KEYS[2])`;

const PART_NAMES: Record<RedisPart, string> = {
  coordination: 'replica coordination',
  window: 'the shared answer window',
  'rate-limits': 'rate limits',
  'spend-caps': 'spend caps',
};

export class RedisHealth {
  private probeState: RedisState = 'starting';
  private probeProblem?: RedisProblem;
  /** Parts reporting a failure, and the last probe sent before it (a later probe answered clears a want of answer). */
  private readonly parts = new Map<RedisPart, RedisProblem & { probeBefore: number }>();
  private since = Date.now();
  private overall: RedisState = 'starting';
  private probing = false;
  private probeSeq = 0;
  private timer?: ReturnType<typeof setInterval>;
  private started = false;
  private closed = false;
  /** The last error the connection itself reported (a refused AUTH, a TLS handshake): a probe's "offline" means this. */
  private connectionError?: unknown;
  private fleetSeen = 1;
  private eviction: EvictionView = { policy: 'unknown', maxmemory: null, keysMayBeEvicted: null };

  constructor(private readonly options: RedisHealthOptions) {}

  /** Starts probing once the first connection is made (or given up on); reads the eviction policy once. */
  start(): void {
    if (this.started) return;
    this.started = true;
    void this.options.connected.then(() => {
      if (this.closed) return;
      void this.readEviction();
      this.tick();
      this.timer = setInterval(() => this.tick(), this.options.periodMs);
      this.timer.unref?.();
    });
  }

  close(): void {
    this.closed = true;
    clearInterval(this.timer);
  }

  /** An error the connection reported (node-redis's `error` event). */
  connectionFailed(error: unknown): void {
    this.connectionError = error;
  }

  /** One probe period: a probe still unanswered is an outage; otherwise another goes out. */
  tick(): void {
    if (this.closed) return;
    if (this.probing) {
      // After this loop turn's I/O is read: an answer already in the socket is not taken for an outage.
      const outstanding = this.probeSeq;
      setTimeout(() => {
        if (this.probing && this.probeSeq === outstanding)
          this.probeFailed(new Error(`no answer to a probe within ${this.options.periodMs} ms`));
      }, 0).unref?.();
      return;
    }
    this.probing = true;
    const seq = ++this.probeSeq;
    const sent = this.options.client.sendCommand([
      'EVAL',
      PROBE,
      '2',
      fleetKey(this.options.prefix, 'probe'),
      fleetKey(this.options.prefix),
      String(Date.now()),
    ]);
    sent.then(
      (fleet) => {
        this.probing = false;
        const size = Number(fleet);
        if (Number.isInteger(size) && size > 0) this.fleetSeen = size;
        this.probeSucceeded(seq);
      },
      (error: unknown) => {
        this.probing = false;
        this.probeFailed(error);
      },
    );
  }

  /** A part's own state, as it changed (each part reports once per outage and once when it is over). */
  report(part: RedisPart, state: 'ok' | 'degraded', error?: unknown): void {
    if (this.closed) return;
    if (state === 'degraded') {
      const problem = this.problemOf(error);
      const first = !this.parts.has(part);
      this.parts.set(part, { ...problem, probeBefore: this.probeSeq });
      if (first)
        this.options.log.warn(
          `${PART_NAMES[part]} through Redis unavailable (${problem.cause}: ${problem.error}); ${consequence(part)} until it is back`,
        );
    } else if (this.parts.delete(part)) {
      this.options.log.info(`${PART_NAMES[part]} through Redis is back`);
    }
    this.settle();
  }

  /** `up` while every probe is answered and no part reports a failure. */
  get state(): RedisState {
    return this.overall;
  }

  /** Processes seen in the fleet's heartbeat within the last minute (at least 1; the last known while Redis is down). */
  get fleetSize(): number {
    return this.fleetSeen;
  }

  /** The first problem in force: the probe's, else a part's. */
  get problem(): RedisProblem | undefined {
    if (this.probeProblem) return this.probeProblem;
    const first = this.parts.values().next().value;
    return first ? { cause: first.cause, error: first.error } : undefined;
  }

  /** For /health. */
  view() {
    const problem = this.problem;
    return {
      state: this.overall,
      since: new Date(this.since).toISOString(),
      // Redis's answer to the probe alone (`parts` say what failed for the parts that use it).
      probe: this.probeState,
      ...(problem ? { cause: problem.cause, error: problem.error } : {}),
      parts: Object.fromEntries(
        [...this.parts].map(([part, p]) => [part, { state: 'degraded', cause: p.cause, error: p.error }]),
      ),
      fleetSize: this.fleetSeen,
      eviction: this.eviction,
    };
  }

  /**
   * `client` as the parts use it: while the first connection is being made a command waits for it; while Redis is
   * down a command fails at once (the parts then act as they do without Redis) instead of waiting for its bound.
   */
  gate<T extends RedisCommandClient>(client: T): RedisCommandClient {
    return {
      sendCommand: async (args: string[]) => {
        if (this.probeState === 'starting') await this.options.connected;
        if (this.probeState === 'down') throw new RedisUnavailableError(this.probeProblem);
        return client.sendCommand(args);
      },
    };
  }

  /** A subscriber whose first subscriptions wait for the first connection (else they fail with "offline" at start). */
  gateSubscriber<
    S extends {
      subscribe(channel: string, listener: (message: string) => void): Promise<unknown>;
      unsubscribe(channel: string, listener?: (message: string) => void): Promise<unknown>;
    },
  >(subscriber: S) {
    return {
      subscribe: async (channel: string, listener: (message: string) => void) => {
        if (this.probeState === 'starting') await this.options.connected;
        return subscriber.subscribe(channel, listener);
      },
      unsubscribe: (channel: string, listener?: (message: string) => void) => subscriber.unsubscribe(channel, listener),
    };
  }

  private probeSucceeded(seq: number): void {
    const was = this.probeState;
    this.probeState = 'up';
    this.probeProblem = undefined;
    if (was === 'down') this.options.log.info('Redis answers again: the replicas coordinate as one fleet again');
    // A part that failed only for want of an answer is back once a probe sent after its failure is answered (it may
    // see no traffic to tell it); one that got an error from Redis (auth, cross-slot, topology, memory) stays down
    // until its own next command succeeds.
    for (const [part, problem] of this.parts) {
      if ((problem.cause === 'timeout' || problem.cause === 'unreachable') && seq > problem.probeBefore)
        this.report(part, 'ok');
    }
    this.settle();
  }

  private probeFailed(error: unknown): void {
    const problem = this.problemOf(error);
    const was = this.probeState;
    this.probeState = 'down';
    this.probeProblem = problem;
    if (was !== 'down') {
      this.options.log.warn(
        `Redis is not usable (${problem.cause}: ${problem.error}): each replica acts alone (calls, breakers, window, limits) until it is back`,
      );
    }
    this.settle();
  }

  private settle(): void {
    const next: RedisState =
      this.probeState === 'starting' ? 'starting' : this.probeState === 'down' || this.parts.size > 0 ? 'down' : 'up';
    if (next === this.overall) return;
    this.overall = next;
    this.since = Date.now();
    this.options.onChange?.(next);
  }

  private problemOf(error: unknown): RedisProblem {
    if (error instanceof RedisUnavailableError && error.problem) return error.problem;
    let cause = causeOf(error);
    let shown = error;
    // A command refused because the connection is down: the connection's own error says why (auth, TLS, refused).
    if ((cause === 'unreachable' || cause === 'error') && this.connectionError !== undefined) {
      const underlying = causeOf(this.connectionError);
      if (underlying !== 'error') {
        cause = underlying;
        shown = this.connectionError;
      }
    }
    return { cause, error: messageOf(shown) };
  }

  private async readEviction(): Promise<void> {
    const read = async (name: string): Promise<string | undefined> => {
      const reply = await this.options.client.sendCommand(['CONFIG', 'GET', name]);
      if (Array.isArray(reply)) return reply.length >= 2 ? String(reply[1]) : undefined;
      if (reply instanceof Map) return reply.has(name) ? String(reply.get(name)) : undefined;
      if (reply && typeof reply === 'object')
        return (reply as Record<string, unknown>)[name] === undefined
          ? undefined
          : String((reply as Record<string, unknown>)[name]);
      return undefined;
    };
    try {
      const [policy, maxmemory] = await bounded(Promise.all([read('maxmemory-policy'), read('maxmemory')]), 2_000);
      if (policy === undefined) throw new Error('no maxmemory-policy in the reply');
      const bytes = Number(maxmemory);
      this.eviction = {
        policy,
        maxmemory: Number.isFinite(bytes) ? bytes : null,
        keysMayBeEvicted: policy !== 'noeviction',
      };
      if (policy !== 'noeviction') {
        this.options.log.warn(
          `Redis maxmemory-policy is ${policy}: keys the fleet needs (leases, spend and rate counts, all with a TTL) may be evicted when it is full, and caps and one-call-per-key break silently; set maxmemory-policy noeviction (docs/scaling.md)`,
        );
      }
    } catch (error) {
      // Managed services often disable CONFIG: the policy is then unknown, said once.
      this.eviction = { policy: 'unknown', maxmemory: null, keysMayBeEvicted: null };
      this.options.log.warn(
        `Redis maxmemory-policy unknown (CONFIG GET refused: ${messageOf(error)}); make sure it is noeviction (docs/scaling.md)`,
      );
    }
  }
}

/** A command not sent: Redis is known to be down. */
export class RedisUnavailableError extends Error {
  constructor(readonly problem?: RedisProblem) {
    super(`Redis unavailable${problem ? ` (${problem.cause}: ${problem.error})` : ''}`);
  }
}

/** What kind of failure an error from node-redis (or a time bound) is. */
export function causeOf(error: unknown): RedisCause {
  const code = String((error as { code?: unknown } | undefined)?.code ?? '');
  const text = `${code} ${messageOf(error)}`;
  if (/NOAUTH|WRONGPASS|NOPERM|invalid password|AUTH.*(failed|required)|invalid username/i.test(text)) return 'auth';
  if (/CROSSSLOT/.test(text)) return 'cross-slot';
  if (/ERR_TLS|ERR_SSL|CERT|certificate|\bSSL\b|\bTLS\b|EPROTO|self[- ]signed/i.test(text)) return 'tls';
  if (/\bMOVED\b|\bASK\b|CLUSTERDOWN|READONLY|TRYAGAIN|MASTERDOWN|cluster support disabled|LOADING/i.test(text))
    return 'topology';
  if (/\bOOM\b|maxmemory/i.test(text)) return 'out-of-memory';
  if (/no answer|within \d+ ms|timed? ?out|timeout/i.test(text)) return 'timeout';
  if (
    /ECONNREFUSED|ECONNRESET|EPIPE|ENOTFOUND|EHOSTUNREACH|ENETUNREACH|EAI_AGAIN|offline|closed|socket|connection/i.test(
      text,
    )
  )
    return 'unreachable';
  return 'error';
}

function messageOf(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return (message || (error as { code?: string } | undefined)?.code || 'unknown error').slice(0, 200);
}

function consequence(part: RedisPart): string {
  switch (part) {
    case 'coordination':
      return 'each replica makes its own calls';
    case 'window':
      return 'answers are kept in memory only';
    default:
      return 'each replica applies them as --limits-without-redis says';
  }
}

function bounded<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    timer.unref?.();
    promise.then(
      (value) => (clearTimeout(timer), resolve(value)),
      (error: unknown) => (clearTimeout(timer), reject(error)),
    );
  });
}
