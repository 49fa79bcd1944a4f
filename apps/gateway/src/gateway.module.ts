import {
  Controller,
  Get,
  Header,
  Module,
  type DynamicModule,
  type MiddlewareConsumer,
  type NestModule,
  type Provider,
  type Type,
} from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { Orchestrator } from 'nest-prompt-orchestrator/core';
import { GatewayCore } from './gateway-core.js';
import { GatewayService } from './gateway.service.js';
import { GATEWAY_CONFIG, GATEWAY_LOGGER } from './common/gateway.tokens.js';
import { Lifecycle } from './common/lifecycle.js';
import { GatewayTelemetry } from './observability/gateway-telemetry.js';
import { GatewayTracing } from './observability/gateway-tracing.js';
import { UsageLedger } from './observability/usage-ledger.js';
import { StatusBoard } from './status/status-board.js';
import { SessionSecret } from './status/session-secret.js';
import { FleetHeartbeat } from './status/fleet-heartbeat.js';
import { statusController } from './status/status.controller.js';
import { SharedState } from './shared-state/shared-state.js';
import { WorkerCoordination } from './cluster/worker-coordination.js';
import { Budgets } from './budgets/budgets.service.js';
import { GatewayGuard } from './http/gateway.guard.js';
import { RequestContextMiddleware } from './http/request-context.middleware.js';
import { UpstreamRotation } from './upstream-rotation.js';
import { HealthController } from './health.controller.js';

const PROMETHEUS_TEXT = 'text/plain; version=0.0.4; charset=utf-8';

/** The metrics the core counts (llama-server has its own at /metrics, relayed; with --workers, every worker's added up). */
function metricsController(path: string, core: GatewayCore): Type<unknown> {
  @Controller()
  class GatewayMetricsController {
    @Get(path)
    @Header('content-type', PROMETHEUS_TEXT)
    @Header('cache-control', 'no-store')
    scrape(): Promise<string> {
      return core.metrics!.text();
    }
  }
  return GatewayMetricsController;
}

/**
 * The control routes (health, metrics, the status page and its sign-in), served by Nest over the services of a
 * `GatewayCore`: the proxied routes run on its data plane, ahead of Nest's router. `owned`: the app's close stops the
 * core too (an app made by `createGateway`); otherwise whoever made the core stops it (main.ts).
 */
@Module({})
export class GatewayModule implements NestModule {
  static forRoot(core: GatewayCore, owned: boolean): DynamicModule {
    const o = core.config.observability;
    const services: Provider[] = [
      { provide: GATEWAY_CONFIG, useValue: core.config },
      { provide: GATEWAY_LOGGER, useValue: core.log },
      { provide: GatewayCore, useValue: core },
      { provide: Orchestrator, useValue: core.orchestrator },
      { provide: GatewayService, useValue: core.gateway },
      { provide: Lifecycle, useValue: core.lifecycle },
      { provide: SharedState, useValue: core.shared },
      { provide: WorkerCoordination, useValue: core.workers },
      { provide: UsageLedger, useValue: core.usage },
      { provide: Budgets, useValue: core.budgets },
      { provide: SessionSecret, useValue: core.sessionSecret },
      { provide: GatewayTracing, useValue: core.tracing },
      { provide: GatewayTelemetry, useValue: core.telemetry },
      { provide: StatusBoard, useValue: core.board },
      { provide: FleetHeartbeat, useValue: core.fleet },
      { provide: UpstreamRotation, useValue: core.rotation },
    ];
    const controllers: Type<unknown>[] = [HealthController];
    if (o.statusPath !== undefined) controllers.push(statusController(o.statusPath));
    if (o.metricsPath !== undefined) controllers.push(metricsController(o.metricsPath, core));
    return {
      module: GatewayModule,
      controllers,
      providers: [
        ...services,
        { provide: APP_GUARD, useClass: GatewayGuard },
        ...(owned ? [{ provide: CORE_OWNER, useValue: coreOwner(core) }] : []),
      ],
    };
  }

  configure(consumer: MiddlewareConsumer): void {
    consumer.apply(RequestContextMiddleware).forRoutes('*');
  }
}

const CORE_OWNER = Symbol('GATEWAY_CORE_OWNER');

/** Nest's shutdown hooks, for an app that owns its core: refuse new calls before the server closes, stop after. */
function coreOwner(core: GatewayCore): { beforeApplicationShutdown(): void; onApplicationShutdown(): Promise<void> } {
  return {
    beforeApplicationShutdown: () => core.quiesce(),
    onApplicationShutdown: () => core.close(),
  };
}
