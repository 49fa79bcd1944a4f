import { Controller, Get, Header, Inject, Req, Res, SetMetadata } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { IncomingMessage } from 'node:http';
import { Orchestrator } from 'nest-prompt-orchestrator/core';
import {
  livenessReport,
  readinessReport,
  type DedupOutcome,
  type HealthReport,
  type LimiterSnapshot,
} from 'nest-prompt-orchestrator';
import type { GatewayConfig } from './config/gateway-config.js';
import { GATEWAY_CONFIG } from './common/gateway.tokens.js';
import { Budgets } from './budgets/budgets.service.js';
import { WorkerCoordination } from './cluster/worker-coordination.js';
import { ControlKeys, KEYLESS_PROBE } from './http/gateway.guard.js';
import { Lifecycle } from './common/lifecycle.js';
import { UPSTREAM } from './providers/shaping.js';
import { FleetHeartbeat } from './status/fleet-heartbeat.js';
import { SharedState } from './shared-state/shared-state.js';
import { UPSTREAM_POOL, poolState } from './upstreams/upstream-set.js';
import { UpstreamRotation } from './upstream-rotation.js';

/** One worker's share of /health under `--workers` (what the primary gathers from each). */
interface WorkerPart {
  /** Deduplicated calls in flight (each may have many callers), and the callers waiting on them. */
  inFlight: number;
  callersWaiting: number;
  /** Upstream calls holding a concurrency slot, and calls waiting for one. */
  upstreamInFlight: number;
  queued: number;
  dedup: Record<DedupOutcome, number>;
  breaker: string;
  draining: boolean;
  /** This worker's coordination of calls (Redis's, or the primary's); each worker has its own connection. */
  coordination: 'ok' | 'degraded' | null;
  inFlightBytes: number;
  limiters: LimiterSnapshot[];
  window: { entries: number; bytes: number; maxBytes: number };
}

/** What a probe tells a caller without a key, when keys are on: whether it passes, and nothing of what is behind. */
interface ProbeStatus {
  status: HealthReport['status'];
}

/**
 * Liveness of the gateway itself, answered at once (it never waits on the
 * provider), with the upstream's state as the breaker sees it. Under
 * `--workers`, whichever worker answers describes the whole port: counts are
 * the workers' sums, and `workers` lists each one.
 *
 * `/health/live` and `/health/ready` are what load balancers and Kubernetes
 * probe: they answer without a key (a probe has none to send). With keys on,
 * a caller without one gets the status code and `{ status }` only; the
 * details (upstreams, breakers, store) are for key holders, as `/health` is.
 */
@Controller()
export class HealthController {
  private readonly keys: ControlKeys;

  constructor(
    private readonly orchestrator: Orchestrator,
    @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
    private readonly budgets: Budgets,
    private readonly workers: WorkerCoordination,
    private readonly lifecycle: Lifecycle,
    private readonly fleet: FleetHeartbeat,
    private readonly adapterHost: HttpAdapterHost,
    private readonly rotation: UpstreamRotation,
    private readonly shared: SharedState,
  ) {
    this.keys = new ControlKeys(config, budgets);
    workers.channel?.provide('health', () => this.part());
  }

  /** Liveness: the process answers. Nothing outside it is consulted: a restart would not fix the provider. */
  @Get('health/live')
  @SetMetadata(KEYLESS_PROBE, true)
  @Header('cache-control', 'no-store')
  live(@Req() request: IncomingMessage): HealthReport | ProbeStatus {
    return this.shown(request, livenessReport());
  }

  /** Readiness: 503 while shutting down, or (`--ready-requires-store`) while Redis is unreachable, or with no upstream in rotation. */
  @Get('health/ready')
  @SetMetadata(KEYLESS_PROBE, true)
  @Header('cache-control', 'no-store')
  ready(@Req() request: IncomingMessage, @Res({ passthrough: true }) response: unknown): HealthReport | ProbeStatus {
    const requireStore = this.config.observability.readyRequiresStore;
    const redis = this.shared.health;
    // Every way coordination fails (down, frozen, auth, TLS, cross-slot, topology), not only the window's store.
    const indicators = redis
      ? {
          redis: () => {
            const problem = redis.problem;
            return {
              status: redis.state === 'up' || !requireStore ? ('up' as const) : ('down' as const),
              state: redis.state,
              ...(problem ? { cause: problem.cause, error: problem.error } : {}),
            };
          },
        }
      : undefined;
    const report = readinessReport(this.orchestrator, { requireStore, indicators });
    if (report.status !== 'ok') this.adapterHost.httpAdapter.status(response, 503);
    return this.shown(request, report);
  }

  private shown(request: IncomingMessage, report: HealthReport): HealthReport | ProbeStatus {
    return this.keys.admits(request.headers) ? report : { status: report.status };
  }

  @Get(['health', 'v1/health'])
  async health() {
    const health = this.orchestrator.health();
    // The primary pool's: fallback groups serve some models only, and are listed under `upstreams` with their pool.
    const primary = health.upstreams.filter((u) => u.pool === UPSTREAM_POOL);
    const breaker = health.breakers.find((b) => b.name === (primary.length === 1 ? primary[0].name : UPSTREAM));
    const state = poolState(health).breaker;
    // Before any call (or probe) has had an outcome, nobody knows whether the provider is up.
    const known = breaker !== undefined && (breaker.observed || state !== 'closed');
    const store = health.window.store;
    // The upstreams file in force (reloaded while the gateway runs).
    const fallbacks = this.rotation.file?.fallbacks;
    // Redis's, or the workers' own through their primary.
    const coordination = health.coordination;
    // Whether coordination through Redis works, and why not (null without --redis).
    const redis = this.shared.health
      ? { ...this.shared.health.view(), limitsWithoutRedis: this.config.limitsWithoutRedis }
      : null;
    const report = {
      // Degraded: answers keep coming, but from memory only and per replica (Redis is unusable).
      status:
        store?.state === 'degraded' || coordination?.state === 'degraded' || redis?.state === 'down'
          ? 'degraded'
          : 'ok',
      upstream: {
        provider: this.config.provider,
        // Several upstreams: available while any of them is in rotation.
        state:
          primary.length > 1
            ? primary.some((u) => u.available)
              ? 'available'
              : 'unavailable'
            : !known
              ? 'unknown'
              : state === 'closed' && primary[0]?.health !== 'down'
                ? 'available'
                : state === 'half_open'
                  ? 'recovering'
                  : 'unavailable',
        breaker: state,
      },
      // Each upstream: its pool (`upstream`, or a fallback group), health check, breaker, slots or adaptive limit, in flight, queued.
      upstreams: health.upstreams,
      // The upstreams file's chains: requested model -> the groups tried in turn (and the model each is asked for).
      ...(fallbacks?.size ? { fallbacks: Object.fromEntries(fallbacks) } : {}),
      breakers: health.breakers,
      limiters: health.limiters,
      dedup: {
        inFlight: health.inFlight,
        callersWaiting: health.callersWaiting,
        inFlightBytes: health.inFlightBytes,
        ...health.dedup,
      },
      window: { entries: health.window.entries, bytes: health.window.bytes, maxBytes: health.window.maxBytes },
      store: store ?? null,
      coordination: coordination ?? null,
      redis,
      budgets: this.budgets.health(),
      // Every process sharing the Redis prefix (replicas, and each worker), as their heartbeats say.
      ...(this.fleet.enabled ? { fleet: this.fleet.view().map(fleetLine) } : {}),
    };
    const port = await this.workers.gather<WorkerPart>('health');
    if (!port) return report;
    const parts = port.parts.map((p) => p.data);
    const sum = (read: (part: WorkerPart) => number) => parts.reduce((n, part) => n + read(part), 0);
    // The port coordinates its calls only while every worker does: one degraded worker leads calls of its own.
    const degraded = parts.some((p) => p.coordination === 'degraded');
    return {
      ...report,
      status: degraded ? 'degraded' : report.status,
      coordination:
        degraded && report.coordination?.state !== 'degraded'
          ? { state: 'degraded' as const, error: 'another worker is not coordinated' }
          : report.coordination,
      limiters: sumLimiters(parts.map((p) => p.limiters)),
      dedup: {
        inFlight: sum((p) => p.inFlight),
        callersWaiting: sum((p) => p.callersWaiting),
        inFlightBytes: sum((p) => p.inFlightBytes),
        miss: sum((p) => p.dedup.miss),
        joined: sum((p) => p.dedup.joined),
        cached: sum((p) => p.dedup.cached),
      },
      window: {
        entries: sum((p) => p.window.entries),
        bytes: sum((p) => p.window.bytes),
        maxBytes: sum((p) => p.window.maxBytes),
      },
      workers: {
        configured: this.config.workers,
        count: port.parts.length + port.silent.length,
        reporting: port.parts.length,
        answeredBy: process.pid,
        list: [
          ...port.parts.map(({ pid, data }) => ({
            pid,
            state: 'ok' as const,
            inFlight: data.inFlight,
            upstreamInFlight: data.upstreamInFlight,
            queued: data.queued,
            dedup: data.dedup,
            breaker: data.breaker,
            draining: data.draining,
            coordination: data.coordination,
          })),
          // Alive but too busy to answer within the gathering's bound.
          ...port.silent.map((pid) => ({ pid, state: 'silent' as const })),
        ].sort((a, b) => a.pid - b.pid),
      },
    };
  }

  /** This worker's figures, for whichever worker answers /health. */
  private part(): WorkerPart {
    const health = this.orchestrator.health();
    const pool = poolState(health);
    return {
      inFlight: health.inFlight,
      callersWaiting: health.callersWaiting,
      upstreamInFlight: pool.inFlight,
      queued: pool.queued,
      dedup: { ...health.dedup },
      breaker: pool.breaker,
      draining: this.lifecycle.isDraining,
      coordination: health.coordination?.state ?? null,
      inFlightBytes: health.inFlightBytes,
      limiters: health.limiters,
      window: { entries: health.window.entries, bytes: health.window.bytes, maxBytes: health.window.maxBytes },
    };
  }
}

/** One member of the fleet in /health: who it is and its load (its board's figures stay on the status page). */
function fleetLine(m: ReturnType<FleetHeartbeat['view']>[number]) {
  return {
    id: m.id,
    host: m.host,
    pid: m.pid,
    port: m.port ?? null,
    self: m.self,
    state: m.state,
    lastSeenMs: Math.max(0, Date.now() - m.at),
    draining: m.draining,
    breaker: m.breaker,
    inFlight: m.inFlight,
    callersWaiting: m.callersWaiting,
    upstreamInFlight: m.upstreamInFlight,
    queued: m.queued,
  };
}

/** The port's limiters: each worker's are its own, so the port's capacity and load are their sums. */
function sumLimiters(lists: LimiterSnapshot[][]): LimiterSnapshot[] {
  const byName = new Map<string, LimiterSnapshot>();
  for (const limiter of lists.flat()) {
    const seen = byName.get(limiter.name);
    byName.set(
      limiter.name,
      !seen
        ? { ...limiter }
        : {
            name: limiter.name,
            limit: seen.limit + limiter.limit,
            mode: seen.mode,
            ceiling: seen.ceiling + limiter.ceiling,
            inFlight: seen.inFlight + limiter.inFlight,
            queued: seen.queued + limiter.queued,
            queueSize: seen.queueSize + limiter.queueSize,
            detached: seen.detached + limiter.detached,
          },
    );
  }
  return [...byName.values()];
}
