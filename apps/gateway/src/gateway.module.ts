import { Global, Module, type DynamicModule, type MiddlewareConsumer, type NestModule } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import type { Logger } from 'pino';
import { OrchestratorModule, OrchestratorObservabilityModule, type OrchestratorModuleOptions } from 'nest-prompt-orchestrator';
import type { GatewayConfig } from './config/gateway-config.js';
import { GatewayService } from './gateway.service.js';
import { GATEWAY_CONFIG, GATEWAY_LOGGER } from './gateway.tokens.js';
import { GatewayTelemetry } from './observability/gateway-telemetry.js';
import { GatewayTracing } from './observability/gateway-tracing.js';
import { createLogger } from './observability/logger.js';
import { UsageLedger } from './observability/usage-ledger.js';
import { StatusBoard } from './status/status-board.js';
import { FleetHeartbeat } from './status/fleet-heartbeat.js';
import { statusController } from './status/status.controller.js';
import { SharedState } from './shared-state/shared-state.js';
import { WorkerCoordination, metricsRegistry } from './cluster/worker-coordination.js';
import { Budgets } from './budgets/budgets.service.js';
import { ApiError } from './http/api-error.js';
import { GatewayGuard } from './http/gateway.guard.js';
import { GatewayInterceptor } from './http/gateway.interceptor.js';
import { Lifecycle } from './http/lifecycle.js';
import { contextOf } from './http/request-context.js';
import { RequestContextMiddleware } from './http/request-context.middleware.js';
import { AnthropicController } from './routes/anthropic.controller.js';
import { UPSTREAM } from './routes/gateway-route.decorator.js';
import { HealthController } from './routes/health.controller.js';
import { LlamaController } from './routes/llama.controller.js';
import { OpenAIController } from './routes/openai.controller.js';

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
        SharedState,
        WorkerCoordination,
        UsageLedger,
        Budgets,
        // The SDK is loaded only when traces are exported.
        { provide: GatewayTracing, useFactory: () => GatewayTracing.create(config) },
      ],
      exports: [GATEWAY_CONFIG, GATEWAY_LOGGER, GatewayService, Lifecycle, SharedState, WorkerCoordination, UsageLedger, Budgets, GatewayTracing],
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
  return {
    // The guard computed the key in its one walk over the body (absent with --no-dedup: nothing is deduplicated).
    dedup: {
      windowMs: config.dedupWindowMs,
      maxBytes: config.windowMaxBytes,
      storeTimeoutMs: config.redisTimeoutMs,
      key: (request) => contextOf(request.request).dedupKey,
      // --no-window-for-sampled: answers that are meant to vary are shared while in flight, never replayed.
      store: config.windowForSampled ? undefined : (request) => !isSampled(request.body),
    },
    // The guard derived who the caller is from the credentials it presented: one identity for key, queue and breaker.
    tenant: (request) => contextOf(request.request).identity,
    timeout: { ms: config.timeoutMs },
    // A provider's answer about one request (llama.cpp answers some client mistakes with a 500) is not retried.
    retry: { retries: config.retries, shouldRetry: (error) => gateway.provider.shouldRetry(error) },
    limits: {
      [UPSTREAM]: {
        limit: config.concurrency,
        queueSize: config.queueSize,
        maxWaitMs: config.queueTimeoutMs,
        perTenantLimit: config.tenantConcurrency,
        fairQueue: config.fairQueue,
      },
    },
    breakers: {
      [UPSTREAM]: {
        failureThreshold: config.breakerFailures,
        openMs: config.breakerOpenMs,
        probeIntervalMs: config.probeIntervalMs,
        probeTimeoutMs: Math.min(2_000, config.timeoutMs),
        healthProbe: (signal) => gateway.healthProbe(signal),
        // The gateway's own refusals (a route this provider lacks: 501; a request it cannot translate: 400)
        // never reached the provider, so they say nothing about its health.
        // and neither does the provider's answer about one request (see Provider.isFailure).
        isFailure: (error) => !(error instanceof ApiError) && gateway.provider.isFailure(error),
      },
    },
    windowStores: shared.windowStore ? [shared.windowStore] : undefined,
    // Redis coordinates whoever shares it (replicas and workers alike); without it, the workers of --workers
    // coordinate through their primary.
    coordinator: shared.coordinator ?? workers?.coordinator,
    tracing: tracing?.tracing,
  };
}

/**
 * Whether a generation request asks for an answer that is meant to vary:
 * sampled (a temperature above 0, which is every provider's default when none
 * is given) without a seed, or several choices at once.
 */
export function isSampled(body: unknown): boolean {
  if (typeof body !== 'object' || body === null) return false;
  const { temperature, seed, n } = body as { temperature?: unknown; seed?: unknown; n?: unknown };
  if (typeof n === 'number' && n > 1) return true;
  if (seed !== undefined && seed !== null) return false;
  return temperature === undefined || temperature === null || (typeof temperature === 'number' && temperature > 0);
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
          interceptor: GatewayInterceptor,
        }),
        // Metrics (not at /metrics: llama-server's own, relayed; with --workers, every worker's added up), breaker and
        // store lines, /health/live and /health/ready.
        OrchestratorObservabilityModule.forRoot({
          metrics: o.metricsPath === undefined ? false : { path: o.metricsPath, registry: metricsRegistry(config) },
          logger,
          health: { path: '/health', requireStore: o.readyRequiresStore },
        }),
      ],
      controllers: [
        OpenAIController,
        AnthropicController,
        LlamaController,
        HealthController,
        ...(o.statusPath === undefined ? [] : [statusController(o.statusPath)]),
      ],
      providers: [{ provide: APP_GUARD, useClass: GatewayGuard }, StatusBoard, GatewayTelemetry, FleetHeartbeat],
    };
  }

  configure(consumer: MiddlewareConsumer): void {
    consumer.apply(RequestContextMiddleware).forRoutes('*');
  }
}
