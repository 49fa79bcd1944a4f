import { RedisHealthMetrics } from './shared-state/redis-health-metrics.js';
import {
  Global,
  Logger as NestLogger,
  Module,
  type DynamicModule,
  type MiddlewareConsumer,
  type NestModule,
} from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import type { Logger } from 'pino';
import {
  OrchestratorModule,
  OrchestratorObservabilityModule,
  type OrchestratorModuleOptions,
} from 'nest-prompt-orchestrator';
import type { GatewayConfig } from './config/gateway-config.js';
import { GatewayService } from './gateway.service.js';
import { GATEWAY_CONFIG, GATEWAY_LOGGER } from './common/gateway.tokens.js';
import { GatewayTelemetry } from './observability/gateway-telemetry.js';
import { GatewayTracing } from './observability/gateway-tracing.js';
import { createLogger } from './observability/logger.js';
import { UsageLedger } from './observability/usage-ledger.js';
import { StatusBoard } from './status/status-board.js';
import { SessionSecret } from './status/session-secret.js';
import { FleetHeartbeat } from './status/fleet-heartbeat.js';
import { statusController } from './status/status.controller.js';
import { SharedState } from './shared-state/shared-state.js';
import { REDIS_LINK, openRedisLink } from './shared-state/redis-connection.js';
import { WorkerCoordination, metricsRegistry } from './cluster/worker-coordination.js';
import { Budgets } from './budgets/budgets.service.js';
import { GatewayGuard } from './http/gateway.guard.js';
import { Lifecycle } from './common/lifecycle.js';
import { RequestContextMiddleware } from './http/request-context.middleware.js';
import {
  UPSTREAM_POOL,
  everyMember,
  fallbackGroups,
  gatewayFailover,
  memberSettings,
  upstreamMembers,
} from './upstreams/upstream-set.js';
import { UpstreamRotation } from './upstream-rotation.js';
import { HealthController } from './health.controller.js';

/** The gateway's configuration and its upstream client, visible to the orchestrator's options factory. */
@Global()
@Module({})
class GatewayCoreModule {
  static forRoot(config: GatewayConfig, logger: Logger): DynamicModule {
    return {
      module: GatewayCoreModule,
      providers: [
        { provide: GATEWAY_CONFIG, useValue: config },
        { provide: GATEWAY_LOGGER, useValue: logger },
        GatewayService,
        Lifecycle,
        // Opened (and its topology found) before anything that shares through it is made.
        {
          provide: REDIS_LINK,
          useFactory: () =>
            config.redisUrl
              ? openRedisLink({ url: config.redisUrl, tls: config.redisTls }, new NestLogger('Gateway'))
              : null,
        },
        SharedState,
        WorkerCoordination,
        UsageLedger,
        Budgets,
        SessionSecret,
        // The SDK is loaded only when traces are exported.
        { provide: GatewayTracing, useFactory: () => GatewayTracing.create(config, logger) },
      ],
      exports: [
        GATEWAY_CONFIG,
        GATEWAY_LOGGER,
        GatewayService,
        Lifecycle,
        SharedState,
        WorkerCoordination,
        UsageLedger,
        Budgets,
        SessionSecret,
        GatewayTracing,
      ],
    };
  }
}

/** The CLI's settings as the plugin's module options: the gateway is an ordinary user of the plugin. */
export function orchestratorOptions(
  config: GatewayConfig,
  gateway: GatewayService,
  shared: SharedState,
  workers?: WorkerCoordination,
  tracing?: GatewayTracing,
): OrchestratorModuleOptions {
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

@Module({})
export class GatewayModule implements NestModule {
  static forRoot(config: GatewayConfig, logger: Logger = createLogger(config.observability)): DynamicModule {
    const o = config.observability;
    return {
      module: GatewayModule,
      imports: [
        GatewayCoreModule.forRoot(config, logger),
        OrchestratorModule.forRootAsync({
          inject: [GATEWAY_CONFIG, GatewayService, SharedState, WorkerCoordination, GatewayTracing],
          useFactory: orchestratorOptions,
          // Clients of the gateway are OpenAI SDKs (the exception filter renders each route's own API on top).
          errorShape: 'openai',
        }),
        // Metrics (not at /metrics: llama-server's own, relayed; with --workers, every worker's added up), breaker and
        // store lines. /health/live and /health/ready are the HealthController's: probes answer without a key.
        OrchestratorObservabilityModule.forRoot({
          metrics: o.metricsPath === undefined ? false : { path: o.metricsPath, registry: metricsRegistry(config) },
          logger,
          health: false,
        }),
      ],
      // The proxied routes are served by the data plane, ahead of these (see gateway.factory.ts).
      controllers: [HealthController, ...(o.statusPath === undefined ? [] : [statusController(o.statusPath)])],
      providers: [
        { provide: APP_GUARD, useClass: GatewayGuard },
        StatusBoard,
        GatewayTelemetry,
        UpstreamRotation,
        FleetHeartbeat,
        RedisHealthMetrics,
      ],
    };
  }

  configure(consumer: MiddlewareConsumer): void {
    consumer.apply(RequestContextMiddleware).forRoutes('*');
  }
}
