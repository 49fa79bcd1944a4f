import {
  type Orchestrator,
  type BreakerState,
  type RefusalReason,
  type RequestOutcome,
  type UpstreamResult,
} from 'nest-prompt-orchestrator/core';
import type { ServerResponse } from 'node:http';
import type { GatewayConfig } from '../config/gateway-config.js';
import type { Lifecycle } from '../common/lifecycle.js';
import type { WorkerCoordination } from '../cluster/worker-coordination.js';
import { ErrorCauses } from './error-causes.js';
import type { FleetHeartbeat } from './fleet-heartbeat.js';
import { HourHistory } from './hour-history.js';
import { MAX_ERRORS, OUTCOMES, TOP_ROWS, mergeSnapshots } from './snapshot-merge.js';
import { SpendTable } from './spend-table.js';
import { StatusWatchers } from './status-watchers.js';

const HISTORY_SECONDS = 60;
const MAX_TRANSITIONS = 50;
const MAX_TENANTS = 500;
const MAX_MODELS = 50;
const MAX_KEYS = 200;
/** The route of a request no model API route served: probes, scrapes, this page and its streams, unknown paths. */
const CONTROL_PLANE = 'unrouted';

/** What one finished request tells the board. */
export interface FinishedRequest {
  outcome: RequestOutcome | undefined;
  status: number;
  route: string;
  requestId: string;
  tenant?: string;
  errorCode?: string;
  /** Tokens and dollars a joined or cached request did not spend. */
  savedTokens?: number;
  savedDollars?: number;
  /** Tokens and dollars the request's own call spent. */
  spentTokens?: number;
  spentDollars?: number;
  /** From arrival to the end of the response. */
  latencyMs?: number;
  /** The model the request asked for (spend and savings per model). */
  model?: string;
  /** Whose request it is: the virtual key's name, else the caller's hash (as in the request log). */
  key?: string;
  /** The failure is the provider's own answer (relayed), not a refusal of the gateway. */
  fromUpstream?: boolean;
}

/** Queue waits of one upstream in one second. */
interface WaitSecond {
  count: number;
  sumMs: number;
  maxMs: number;
}

/** What the status page shows; under `--workers`, the whole port's (see `portSnapshot`). */
export type StatusSnapshot = ReturnType<StatusBoard['snapshot']> & {
  workers?: Array<{ pid: number; state: 'ok' | 'silent' }>;
};

/**
 * The live status page's data: counts kept as requests finish and as the
 * orchestrator reports, folded into per-second history as each second ends
 * (when next read or counted: nothing ticks while nobody looks), and sent to
 * every open page (SSE) once a second and at once on a breaker transition.
 * Everything is bounded: 60 s of history, the last transitions and errors,
 * and at most 500 tenants (hashed; later ones are counted as "other").
 * Under `--workers`, a page is sent the sum of every worker's board.
 */
export class StatusBoard {
  readonly enabled: boolean;
  private readonly startedAt = Date.now();
  private readonly totals: Record<(typeof OUTCOMES)[number], number> = { miss: 0, joined: 0, cached: 0, none: 0 };
  private second: Record<(typeof OUTCOMES)[number], number> = { miss: 0, joined: 0, cached: 0, none: 0 };
  private readonly history: Array<{ at: number; miss: number; joined: number; cached: number; none: number }> = [];
  private readonly upstreamCalls: Record<UpstreamResult, number> = { ok: 0, error: 0, timeout: 0 };
  private readonly refusals: Record<RefusalReason, number> = {
    circuit_open: 0,
    overloaded: 0,
    queue_timeout: 0,
    shutting_down: 0,
    no_upstream_available: 0,
  };
  private readonly transitions: Array<{ at: number; name: string; from: BreakerState; to: BreakerState }> = [];
  private readonly errors: Array<{ at: number; requestId: string; route: string; status: number; code?: string }> = [];
  private readonly tenants = new Map<string, number>();
  private readonly saved = { calls: 0, tokens: 0, dollars: 0, priced: false };
  private readonly spent = { tokens: 0, dollars: 0 };
  private readonly hour = new HourHistory();
  private readonly causes = new ErrorCauses();
  private readonly byModel = new SpendTable(MAX_MODELS);
  private readonly byKey = new SpendTable(MAX_KEYS);
  /** Per upstream: the last 60 seconds of queue waits, and the second being counted. */
  private readonly waits = new Map<string, { seconds: WaitSecond[]; current: WaitSecond }>();
  /** The open pages: sent a snapshot once a second while any is open (the seconds are otherwise folded when next read). */
  private readonly watchers = new StatusWatchers({
    snapshotText: () =>
      this.workers.channel ? this.portSnapshot().then((s) => JSON.stringify(s)) : JSON.stringify(this.snapshot()),
    untilNextSecond: () => {
      this.catchUp();
      return this.origin + (this.folded + 1) * 1000 - performance.now();
    },
    draining: () => this.lifecycle.isDraining,
  });
  private stopObserving?: () => void;
  /** When the seconds are counted from (monotonic and wall clock), and how many of them are folded into history. */
  private origin = performance.now();
  private originWall = Date.now();
  private folded = 0;

  constructor(
    private readonly config: GatewayConfig,
    private readonly orchestrator: Orchestrator,
    private readonly lifecycle: Lifecycle,
    private readonly workers: WorkerCoordination,
    private readonly fleet: FleetHeartbeat,
  ) {
    this.enabled = config.observability.statusPath !== undefined;
  }

  start(): void {
    if (!this.enabled) return;
    this.workers.channel?.provide('status', () => this.snapshot());
    this.fleet.provideFigures(() => {
      this.catchUp();
      const last = this.history[this.history.length - 1];
      return {
        requestsPerSecond: last ? last.miss + last.joined + last.cached + last.none : 0,
        totals: { ...this.totals },
        savedCalls: this.saved.calls,
        savedDollars: this.saved.dollars,
        spentDollars: this.spent.dollars,
        errors: this.upstreamCalls.error + this.upstreamCalls.timeout,
      };
    });
    this.stopObserving = this.orchestrator.observe({
      queueWait: (upstream: string, ms: number) => {
        this.catchUp();
        let waits = this.waits.get(upstream);
        // Upstream names are the gateway's own (a few), never a client's.
        if (!waits) this.waits.set(upstream, (waits = { seconds: [], current: { count: 0, sumMs: 0, maxMs: 0 } }));
        waits.current.count++;
        waits.current.sumMs += ms;
        if (ms > waits.current.maxMs) waits.current.maxMs = ms;
      },
      upstreamCall: (_upstream: string, _ms: number, result: UpstreamResult) => void this.upstreamCalls[result]++,
      refused: (_upstream: string, reason: RefusalReason) => void this.refusals[reason]++,
      breakerTransition: (name: string, from: BreakerState, to: BreakerState, at: number) => {
        this.transitions.push({ at, name, from, to });
        if (this.transitions.length > MAX_TRANSITIONS) this.transitions.shift();
        this.watchers.broadcast();
      },
    });
    this.origin = performance.now();
    this.originWall = Date.now();
    this.folded = 0;
  }

  close(): void {
    this.stopObserving?.();
    this.watchers.close();
  }

  record(request: FinishedRequest): void {
    // Only the model API is the gateway's traffic: scrapes, probes, this page and its streams are not counted.
    if (request.route === CONTROL_PLANE) return;
    this.catchUp();
    if (request.outcome) {
      this.totals[request.outcome]++;
      this.second[request.outcome]++;
      if (request.outcome === 'joined' || request.outcome === 'cached') this.saved.calls++;
    }
    if (request.tenant !== undefined) {
      const known = this.tenants.has(request.tenant) || this.tenants.size < MAX_TENANTS;
      const tenant = known ? request.tenant : 'other';
      this.tenants.set(tenant, (this.tenants.get(tenant) ?? 0) + 1);
    }
    if (request.savedTokens) this.saved.tokens += request.savedTokens;
    if (request.savedDollars !== undefined) {
      this.saved.dollars += request.savedDollars;
      this.saved.priced = true;
    }
    if (request.spentTokens) this.spent.tokens += request.spentTokens;
    if (request.spentDollars !== undefined) this.spent.dollars += request.spentDollars;
    if (request.latencyMs !== undefined)
      this.hour.record(request.outcome ?? 'unrouted', request.status, request.latencyMs);
    const money = {
      spentTokens: request.spentTokens,
      spentDollars: request.spentDollars,
      savedTokens: request.savedTokens,
      savedDollars: request.savedDollars,
      saved: request.outcome === 'joined' || request.outcome === 'cached',
    };
    if (request.model !== undefined) this.byModel.record(request.model.slice(0, 100), money);
    if (request.key !== undefined) this.byKey.record(request.key, money);
    if (
      request.status >= 500 ||
      request.errorCode === 'circuit_open' ||
      request.errorCode === 'overloaded' ||
      request.errorCode === 'queue_timeout'
    ) {
      const at = Date.now();
      this.errors.push({
        at,
        requestId: request.requestId,
        route: request.route,
        status: request.status,
        code: request.errorCode,
      });
      if (this.errors.length > MAX_ERRORS) this.errors.shift();
      this.causes.record({
        at,
        requestId: request.requestId,
        route: request.route,
        status: request.status,
        code: request.errorCode,
        fromUpstream: request.fromUpstream ?? false,
      });
    }
  }

  /** Why one more event stream may not open for `peer` (see `StatusWatchers`), or undefined. */
  refuseStream(peer: string): string | undefined {
    return this.watchers.refuse(peer);
  }

  /** Keeps `response` (an SSE stream) up to date until it closes, or its time is up (the browser then reconnects). */
  subscribe(response: ServerResponse, peer = 'unknown'): void {
    this.watchers.add(response, peer);
  }

  /** The snapshot of the whole port: this board's alone, or under `--workers` every worker's added up. */
  async portSnapshot(): Promise<StatusSnapshot> {
    const local = this.snapshot();
    const port = await this.workers.gather<ReturnType<StatusBoard['snapshot']>>('status');
    return port ? mergeSnapshots(local, port.parts, port.silent) : local;
  }

  snapshot() {
    this.catchUp();
    const health = this.orchestrator.health();
    const names = new Set([...health.breakers.map((b) => b.name), ...health.limiters.map((l) => l.name)]);
    const upstreams = [...names].map((name) => {
      const breaker = health.breakers.find((b) => b.name === name);
      const limiter = health.limiters.find((l) => l.name === name);
      // A member replaced under its own name is listed once: the newcomer (the old one's calls finish unseen).
      const member =
        health.upstreams.find((u) => u.name === name && !u.draining) ?? health.upstreams.find((u) => u.name === name);
      return {
        name,
        // A member of the pool: its health check, whether it is in rotation (and why not), how its limit is set.
        member: member && {
          health: member.health,
          available: member.available,
          slots: member.slots ?? null,
          limitMode: member.limitMode ?? null,
          detail: member.detail ?? null,
          draining: member.draining === true,
        },
        breaker: breaker && {
          state: breaker.observed || breaker.state !== 'closed' ? breaker.state : 'unknown',
          consecutiveFailures: breaker.consecutiveFailures,
          openedAt: breaker.openedAt ?? null,
        },
        limiter: limiter && {
          inFlight: limiter.inFlight,
          queued: limiter.queued,
          limit: limiter.limit,
          queueSize: limiter.queueSize,
        },
        queueWait: this.waitOf(name),
        timeline: this.transitions.filter((t) => t.name === name),
      };
    });
    const tenants = [...this.tenants.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 10)
      .map(([tenant, requests]) => ({ tenant, requests }));
    return {
      now: Date.now(),
      startedAt: this.startedAt,
      provider: this.config.provider,
      draining: this.lifecycle.isDraining,
      upstreams,
      totals: { ...this.totals },
      history: this.history,
      upstreamCalls: { ...this.upstreamCalls },
      saved: { ...this.saved },
      spent: { ...this.spent },
      refusals: { ...this.refusals },
      tenants,
      errors: [...this.errors].reverse(),
      causes: this.causes.list(),
      window: health.window,
      callersWaiting: health.callersWaiting,
      flights: this.orchestrator.flightsInFlight(TOP_ROWS),
      hour: this.hour.summary(),
      spendByModel: this.byModel.top(TOP_ROWS),
      spendByKey: this.byKey.top(TOP_ROWS),
      fleet: this.fleet.view(undefined, health),
      /** Whether the fleet is read from Redis (else it is this process alone). */
      fleetShared: this.fleet.enabled,
      /** The shared store (Redis) as this process sees it: the fleet's heartbeats, call coordination, the answer window. */
      store: {
        fleet: this.fleet.store(),
        coordination: health.coordination ?? null,
        window: health.window.store ?? null,
      },
    };
  }

  /** Queue waits of an upstream over the last minute: how many got a slot, and after how long. */
  private waitOf(upstream: string): { count: number; avgMs: number; maxMs: number } {
    const waits = this.waits.get(upstream);
    let count = 0;
    let sum = 0;
    let max = 0;
    for (const s of waits ? [...waits.seconds, waits.current] : []) {
      count += s.count;
      sum += s.sumMs;
      max = Math.max(max, s.maxMs);
    }
    const round = (ms: number) => Math.round(ms * 10) / 10;
    return { count, avgMs: count === 0 ? 0 : round(sum / count), maxMs: round(max) };
  }

  /**
   * Folds every second that has ended since the last fold into history (the
   * second being counted, then an empty one for each second nothing
   * happened), as a timer ticking once a second would have: at rest nothing
   * wakes the board, and whoever reads or counts next brings it up to date.
   */
  private catchUp(): void {
    if (!this.enabled) return;
    const due = Math.floor((performance.now() - this.origin) / 1000);
    if (due <= this.folded) return;
    // Seconds older than the history keeps would be shifted out again at once.
    if (due - this.folded > HISTORY_SECONDS) {
      this.second = { miss: 0, joined: 0, cached: 0, none: 0 };
      for (const waits of this.waits.values()) waits.current = { count: 0, sumMs: 0, maxMs: 0 };
      this.folded = due - HISTORY_SECONDS;
    }
    while (this.folded < due) {
      this.folded++;
      this.history.push({ at: this.originWall + this.folded * 1000, ...this.second });
      if (this.history.length > HISTORY_SECONDS) this.history.shift();
      this.second = { miss: 0, joined: 0, cached: 0, none: 0 };
      for (const waits of this.waits.values()) {
        waits.seconds.push(waits.current);
        if (waits.seconds.length > HISTORY_SECONDS) waits.seconds.shift();
        waits.current = { count: 0, sumMs: 0, maxMs: 0 };
      }
    }
  }
}
