import { type Orchestrator, type FlightSnapshot, type OrchestratorHealth } from 'nest-prompt-orchestrator/core';
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import type { GatewayConfig } from '../config/gateway-config.js';
import type { Lifecycle } from '../common/lifecycle.js';
import { fleetKey } from '../shared-state/redis-connection.js';
import type { SharedState } from '../shared-state/shared-state.js';
import { poolState } from '../upstreams/upstream-set.js';

/** How often each process says it is alive, and when a silent one is shown as such, then dropped. */
const BEAT_MS = 1_000;
const SILENT_AFTER_MS = 3_500;
const FORGET_AFTER_MS = 60_000;
/** A heartbeat is small: at most this many calls in flight ride in it. */
const FLIGHTS_PER_BEAT = 5;

/** The figures a status board adds to a heartbeat (absent without a status page). */
export interface BoardFigures {
  requestsPerSecond: number;
  totals: Record<'miss' | 'joined' | 'cached' | 'none', number>;
  savedCalls: number;
  savedDollars: number;
  spentDollars: number;
  errors: number;
}

/** What one gateway process publishes every second: who it is and its numbers. */
export interface Heartbeat {
  id: string;
  host: string;
  pid: number;
  port?: number;
  startedAt: number;
  at: number;
  draining: boolean;
  breaker: string;
  /** Deduplicated calls in flight, and the callers waiting on them. */
  inFlight: number;
  callersWaiting: number;
  upstreamInFlight: number;
  queued: number;
  limit: number;
  flights: FlightSnapshot[];
  board?: BoardFigures;
}

/** A process of the fleet as the page shows it. */
export interface FleetMember extends Heartbeat {
  /**
   * `silent`: no heartbeat for a few seconds (busy, frozen or gone); `unknown`: the store the heartbeats go
   * through (Redis) does not answer this process, so nothing can be said of the others.
   */
  state: 'ok' | 'silent' | 'unknown';
  /** This process. */
  self: boolean;
}

/** Whether this process reaches the store the fleet's heartbeats go through. */
export interface FleetStore {
  /** `off`: no --redis (no fleet beyond this process); `unreachable`: the last heartbeat could not be written or read. */
  state: 'off' | 'ok' | 'unreachable';
  /** Since when it is in that state (epoch ms; `ok` since the first beat that went through after an outage). */
  since: number;
  /** What the last failed operation said (`unreachable` only). */
  error?: string;
}

/**
 * Every gateway process sharing the Redis prefix (replicas, and each worker of
 * --workers) publishes a small heartbeat with its numbers into one Redis hash
 * every second, and reads everybody's back: the status page and /health then
 * show the whole fleet, not one island. Without --redis there is no fleet to
 * show beyond this process (and its --workers siblings, gathered through the
 * primary). Every Redis operation is bounded; a missing beat shows the member
 * `silent`, never holds a request up.
 */
export class FleetHeartbeat {
  readonly enabled: boolean;
  readonly id = randomUUID();
  private readonly startedAt = Date.now();
  private readonly key: string;
  private members: FleetMember[] = [];
  private timer?: ReturnType<typeof setInterval>;
  private figures?: () => BoardFigures;
  private beating = false;
  private storeState: FleetStore = { state: 'ok', since: Date.now() };

  constructor(
    private readonly config: GatewayConfig,
    private readonly shared: SharedState,
    private readonly orchestrator: Orchestrator,
    private readonly lifecycle: Lifecycle,
    /** Where this process listens (its port in the fleet's table), once it does. */
    private readonly address: () => AddressInfo | string | null | undefined,
  ) {
    this.enabled = shared.redis !== undefined;
    this.key = fleetKey(config.redisPrefix);
  }

  start(): void {
    if (!this.enabled) return;
    this.timer = setInterval(() => void this.beat(), BEAT_MS);
    this.timer.unref();
    void this.beat();
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    // Gone, rather than silent: a stopped process says so on its way out.
    if (this.enabled) await this.command(['HDEL', this.key, this.id]).catch(() => undefined);
  }

  /** The status board's figures, added to every heartbeat from now on. */
  provideFigures(figures: () => BoardFigures): void {
    this.figures = figures;
  }

  /**
   * The fleet as last read (this process first, then by host and pid); without --redis, this process alone. This
   * process is described as it is now (from `health`, the very state the rest of a snapshot shows), never from its
   * last heartbeat. While the store does not answer, the others are `unknown`, not silent.
   */
  view(now = Date.now(), health?: OrchestratorHealth): FleetMember[] {
    const self: FleetMember = { ...this.own(health), state: 'ok', self: true };
    if (!this.enabled) return [self];
    const unreachable = this.storeState.state === 'unreachable';
    const others = this.members.filter((m) => !m.self);
    return [
      self,
      ...others.map((m): FleetMember => ({
        ...m,
        state: unreachable ? 'unknown' : now - m.at < SILENT_AFTER_MS ? 'ok' : 'silent',
      })),
    ];
  }

  /** Whether the fleet's store answers this process (see `FleetStore`). */
  store(): FleetStore {
    return this.enabled ? { ...this.storeState } : { state: 'off', since: this.startedAt };
  }

  /** This process's heartbeat now. */
  own(health: OrchestratorHealth = this.orchestrator.health()): Heartbeat {
    const pool = poolState(health);
    const address = this.address();
    return {
      id: this.id,
      host: hostname(),
      pid: process.pid,
      port: typeof address === 'object' && address !== null ? address.port : undefined,
      startedAt: this.startedAt,
      at: Date.now(),
      draining: this.lifecycle.isDraining,
      breaker: pool.breaker,
      inFlight: health.inFlight,
      callersWaiting: health.callersWaiting,
      upstreamInFlight: pool.inFlight,
      queued: pool.queued,
      limit: pool.limit,
      flights: this.orchestrator.flightsInFlight(FLIGHTS_PER_BEAT),
      board: this.figures?.(),
    };
  }

  private async beat(): Promise<void> {
    if (this.beating) return;
    this.beating = true;
    try {
      const own = this.own();
      await this.command(['HSET', this.key, this.id, JSON.stringify(own)]);
      await this.command(['PEXPIRE', this.key, String(FORGET_AFTER_MS)]);
      const all = await this.command(['HGETALL', this.key]);
      const now = Date.now();
      const members: FleetMember[] = [];
      const stale: string[] = [];
      for (const [id, text] of entries(all)) {
        if (id === this.id) continue;
        const beat = parse(text);
        if (!beat || now - beat.at > FORGET_AFTER_MS) stale.push(id);
        else members.push({ ...beat, state: 'ok', self: false });
      }
      members.sort((a, b) => a.host.localeCompare(b.host) || a.pid - b.pid || (a.port ?? 0) - (b.port ?? 0));
      this.members = [{ ...own, state: 'ok', self: true }, ...members];
      if (this.storeState.state !== 'ok') this.storeState = { state: 'ok', since: now };
      if (stale.length > 0) await this.command(['HDEL', this.key, ...stale]);
    } catch (error) {
      // Redis away: the others are kept as last heard of, shown `unknown` (their silence says nothing now).
      const message = error instanceof Error ? error.message.slice(0, 200) : 'unknown error';
      this.storeState =
        this.storeState.state === 'unreachable'
          ? { ...this.storeState, error: message }
          : { state: 'unreachable', since: Date.now(), error: message };
    } finally {
      this.beating = false;
    }
  }

  private command(args: string[]): Promise<unknown> {
    const redis = this.shared.redis!;
    const bound = Math.max(this.config.redisTimeoutMs, 50);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`Redis did not answer within ${bound} ms`)), bound);
      redis.sendCommand(args).then(
        (value) => (clearTimeout(timer), resolve(value)),
        (error: unknown) => (clearTimeout(timer), reject(error)),
      );
    });
  }
}

/** HGETALL's answer: a flat list (RESP2) or a map (RESP3). */
function entries(reply: unknown): Array<[string, string]> {
  if (Array.isArray(reply)) {
    const out: Array<[string, string]> = [];
    for (let i = 0; i + 1 < reply.length; i += 2) out.push([String(reply[i]), String(reply[i + 1])]);
    return out;
  }
  if (reply instanceof Map) return [...reply.entries()].map(([k, v]) => [String(k), String(v)]);
  if (reply && typeof reply === 'object')
    return Object.entries(reply as Record<string, unknown>).map(([k, v]) => [k, String(v)]);
  return [];
}

/** A heartbeat another process wrote (anything else under the key is ignored). */
function parse(text: string): Heartbeat | undefined {
  try {
    const beat = JSON.parse(text) as Heartbeat;
    return typeof beat?.id === 'string' && typeof beat.at === 'number' && typeof beat.pid === 'number'
      ? beat
      : undefined;
  } catch {
    return undefined;
  }
}
