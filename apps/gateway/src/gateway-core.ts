import type { Server } from 'node:http';
import {
  Orchestrator,
  OrchestratorMetrics,
  logOrchestratorEvents,
  type OrchestratorOptions,
} from 'nest-prompt-orchestrator/core';
import type { Logger } from 'pino';
import type { GatewayConfig } from './config/gateway-config.js';
import { contextLog, type LineSink } from './common/context-log.js';
import { Lifecycle } from './common/lifecycle.js';
import { redactor } from './common/redaction.js';
import { GatewayService } from './gateway.service.js';
import { openRedisLink } from './shared-state/redis-connection.js';
import { SharedState } from './shared-state/shared-state.js';
import { RedisHealthMetrics } from './shared-state/redis-health-metrics.js';
import { WorkerCoordination, metricsRegistry } from './cluster/worker-coordination.js';
import { Budgets } from './budgets/budgets.service.js';
import { SessionSecret } from './status/session-secret.js';
import { FleetHeartbeat } from './status/fleet-heartbeat.js';
import { StatusBoard } from './status/status-board.js';
import { GatewayTracing } from './observability/gateway-tracing.js';
import { GatewayTelemetry } from './observability/gateway-telemetry.js';
import { UsageLedger } from './observability/usage-ledger.js';
import { createLogger, nestLoggerOf } from './observability/logger.js';
import {
  UPSTREAM_POOL,
  everyMember,
  fallbackGroups,
  gatewayFailover,
  memberSettings,
  upstreamKeys,
  upstreamMembers,
} from './upstreams/upstream-set.js';
import { UpstreamRotation } from './upstream-rotation.js';
import { DataPlane } from './data-plane/data-plane.js';

/** Where the gateway writes. */
export interface GatewayCoreOptions {
  /** Request lines and the orchestrator's events (default: a logger made from the configuration). */
  log?: Logger;
  /** The services' own warnings and news (default: the same logger, as Nest's lines are written; see `nestLoggerOf`). */
  lines?: LineSink;
}

/**
 * The gateway's services, made without Nest: the proxied routes (the data
 * plane) run on these alone, so a gateway answers its first request before
 * Nest, which serves the control routes, is loaded (see main.ts). The Nest
 * app receives the same instances (see `GatewayModule`).
 */
export class GatewayCore {
  /** The HTTP server the gateway listens on (the fleet's table shows its port). */
  server?: Server;
  readonly lifecycle = new Lifecycle();
  readonly usage: UsageLedger;
  readonly budgets: Budgets;
  readonly sessionSecret: SessionSecret;
  readonly fleet: FleetHeartbeat;
  readonly board: StatusBoard;
  readonly telemetry: GatewayTelemetry;
  readonly rotation: UpstreamRotation;
  readonly plane: DataPlane;
  private readonly stopEventLog: () => void;
  private quiet = false;
  private closed?: Promise<void>;

  /** What the rest is made of, made first (some of it asynchronously: see `create`). */
  private constructor(
    readonly config: GatewayConfig,
    readonly log: Logger,
    lines: LineSink,
    readonly gateway: GatewayService,
    readonly shared: SharedState,
    readonly workers: WorkerCoordination,
    readonly tracing: GatewayTracing,
    readonly orchestrator: Orchestrator,
    readonly metrics: OrchestratorMetrics | undefined,
  ) {
    const said = contextLog(lines, 'Gateway');
    this.usage = new UsageLedger(config);
    this.budgets = new Budgets(config, shared, said);
    this.sessionSecret = new SessionSecret(config, shared, said);
    this.stopEventLog = logOrchestratorEvents(orchestrator, log);
    this.fleet = new FleetHeartbeat(config, shared, orchestrator, this.lifecycle, () => this.server?.address());
    this.board = new StatusBoard(config, orchestrator, this.lifecycle, workers, this.fleet);
    this.telemetry = new GatewayTelemetry(config, log, orchestrator, this.budgets, this.board, metrics, tracing);
    this.rotation = new UpstreamRotation(orchestrator, gateway, config, tracing, contextLog(lines, 'Upstreams'));
    new RedisHealthMetrics(shared, metrics);
    this.plane = new DataPlane({
      config,
      gateway,
      budgets: this.budgets,
      usage: this.usage,
      telemetry: this.telemetry,
      lifecycle: this.lifecycle,
      orchestrator,
      warn: (line) => said.warn(line),
    });
    // A reloaded upstreams file brings other fallback chains (and groups) to the attempts.
    this.rotation.live?.onChange((file) => this.plane.attempts.update(file));
  }

  /**
   * Makes and starts every service, in the order they depend on each other: Redis (connected, or a second passed)
   * before what shares through it, the orchestrator before what observes it.
   */
  static async create(config: GatewayConfig, options: GatewayCoreOptions = {}): Promise<GatewayCore> {
    const log = options.log ?? createLogger(config.observability);
    const lines: LineSink = options.lines ?? nestLoggerOf(log);
    redactor.add(config.gatewayKeys);
    // Provider keys are also looked for in a stream's ordinary events (a provider quoting one outside an error).
    redactor.watch([config.providerKey, ...upstreamKeys(config)]);
    if (config.allowedHosts === '*') {
      log.warn(
        { context: 'Gateway' },
        '--allowed-hosts * answers any Host: a DNS-rebinding web page can reach this gateway and spend its provider key (docs/security.md)',
      );
    }
    const said = contextLog(lines, 'Gateway');
    const gateway = new GatewayService(config);
    const link = config.redisUrl ? await openRedisLink({ url: config.redisUrl, tls: config.redisTls }, said) : null;
    const shared = new SharedState(config, link, said);
    const workers = new WorkerCoordination(config);
    const tracing = await GatewayTracing.create(config, log);
    const orchestrator = new Orchestrator(orchestratorOptions(config, gateway, shared, workers, tracing), {
      // Once per outage and once on recovery: a dead store must not flood the log.
      onStoreState: (state, error) => {
        if (state === 'degraded')
          lines.warn(
            `answer window store unavailable (${describe(error)}); answering from memory until it is back`,
            'Orchestrator',
          );
        else lines.log('answer window store reachable again; sharing answers resumes', 'Orchestrator');
      },
    });
    // Metrics (not at /metrics: llama-server's own, relayed; with --workers, every worker's added up).
    const metricsPath = config.observability.metricsPath;
    const metrics =
      metricsPath === undefined
        ? undefined
        : await OrchestratorMetrics.create(orchestrator, { path: metricsPath, registry: metricsRegistry(config) });
    const core = new GatewayCore(config, log, lines, gateway, shared, workers, tracing, orchestrator, metrics);
    gateway.start();
    await shared.start();
    await core.sessionSecret.start();
    core.fleet.start();
    core.board.start();
    core.rotation.start();
    return core;
  }

  /**
   * The first half of a stop, before the HTTP server closes: requests that still arrive are refused with a retryable
   * 503 while the calls in flight finish, and what only observes stops.
   */
  quiesce(): void {
    if (this.quiet) return;
    this.quiet = true;
    this.board.close();
    this.stopEventLog();
    this.orchestrator.drain();
    // The calls still finishing are not an outage to report.
    this.shared.stopSharing();
  }

  /** Stops every service once the HTTP server is closed (see `Lifecycle.drain`); then Redis and the upstream pools close. */
  close(): Promise<void> {
    return (this.closed ??= this.stop());
  }

  private async stop(): Promise<void> {
    this.quiesce();
    await this.rotation.close();
    await this.fleet.close();
    await this.orchestrator.close();
    this.metrics?.close();
    await this.gateway.close();
    await this.budgets.close();
    await this.tracing.close();
    this.workers.close();
    await this.shared.close();
  }
}

/** The CLI's settings as the orchestrator's options (the plugin's core, as any app without Nest would use it). */
export function orchestratorOptions(
  config: GatewayConfig,
  gateway: GatewayService,
  shared: SharedState,
  workers?: WorkerCoordination,
  tracing?: GatewayTracing,
): OrchestratorOptions {
  // Every upstream, primary and fallback alike, has its own breaker and limiter.
  const members = everyMember(config);
  const shouldFailover = gatewayFailover(config, gateway.provider);
  const dynamic = config.upstreamsFile !== undefined;
  return {
    // The data plane makes each request's key (its bytes, its caller, who answers upstream) and says whether its
    // answer may be kept (see `DataPlane`); these are the window's bounds.
    dedup: {
      windowMs: config.dedupWindowMs,
      maxBytes: config.windowMaxBytes,
      maxInFlightBytes: config.inFlightMaxBytes,
      storeTimeoutMs: config.redisTimeoutMs,
      // Work nobody waits for stops (a llama.cpp slot is freed, a paid stream stops generating), unless kept.
      cancelWhenAbandoned: !config.keepAbandoned,
    },
    timeout: { ms: config.timeoutMs },
    // A provider's answer about one request (llama.cpp answers some client mistakes with a 500) is not retried.
    retry: { retries: config.retries, shouldRetry: (error) => gateway.provider.shouldRetry(error) },
    // Each upstream has its own limiter and breaker (one upstream: both keep the name `upstream`).
    limits: Object.fromEntries(members.map((m) => [m.name, memberSettings(config, gateway, m).concurrency])),
    breakers: Object.fromEntries(members.map((m) => [m.name, memberSettings(config, gateway, m).breaker])),
    // With an upstreams file, members come and go as it is reloaded (see LiveUpstreams).
    upstreams: {
      // While no upstream is in rotation (a llama.cpp server restarting, loading its model), a request waits for one,
      // as many at once as may wait for a slot.
      [UPSTREAM_POOL]: {
        members: upstreamMembers(config),
        shouldFailover,
        dynamic,
        hold: { ms: config.holdUnavailableMs, maxHeld: config.queueSize },
      },
      ...Object.fromEntries(
        [...fallbackGroups(config)].map(([group, groupMembers]) => [
          group,
          { members: groupMembers, shouldFailover, dynamic },
        ]),
      ),
    },
    windowStores: shared.windowStore ? [shared.windowStore] : undefined,
    // Redis coordinates whoever shares it (replicas and workers alike); without it, the workers of --workers
    // coordinate through their primary.
    coordinator: shared.coordinator ?? workers?.coordinator,
    tracing: tracing?.tracing,
  };
}

function describe(error: unknown): string {
  return ((error as Error | undefined)?.message ?? String(error)).slice(0, 200);
}
