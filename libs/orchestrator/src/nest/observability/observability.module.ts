import {
  Controller,
  Get,
  Header,
  Inject,
  Module,
  Res,
  type DynamicModule,
  type OnModuleDestroy,
  type Provider,
  type Type,
} from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { OrchestratorService } from '../orchestrator.service.js';
import { logOrchestratorEvents, type StructuredLogger } from '../../core/metrics/orchestrator-event-log.js';
import { livenessReport, readinessReport, type HealthReport, type ReadinessOptions } from './orchestrator-health.js';
import { OrchestratorMetrics, type OrchestratorMetricsOptions } from '../../core/metrics/orchestrator-metrics.js';
import { loadOptional } from '../../core/optional-dependency.js';

export interface OrchestratorHealthOptions extends ReadinessOptions {
  /** Base route: `<path>/live` and `<path>/ready`. Default `/health`. */
  path?: string;
}

/** What `OrchestratorObservabilityModule.forRoot` turns on. */
export interface OrchestratorObservabilityOptions {
  /** Prometheus metrics (needs prom-client). Default on, at `/metrics`; `false` turns them off. */
  metrics?: OrchestratorMetricsOptions | false;
  /**
   * Log breaker transitions and store outages as structured lines: a pino
   * logger (or anything with its `info`/`warn(fields, message)` shape), or
   * `true` for a new pino logger (needs pino). Default off.
   */
  logger?: StructuredLogger | true | false;
  /** Liveness and readiness routes in @nestjs/terminus's format. Default on, at `/health/live` and `/health/ready`. */
  health?: OrchestratorHealthOptions | false;
}

const OBSERVABILITY = Symbol.for('nest-prompt-orchestrator.observability');

/** What the module holds while the app runs: the metrics (if on) and the event log's subscription. */
class Observability implements OnModuleDestroy {
  constructor(
    readonly metrics: OrchestratorMetrics | undefined,
    private readonly stopLogging: (() => void) | undefined,
  ) {}

  onModuleDestroy(): void {
    this.metrics?.close();
    this.stopLogging?.();
  }
}

const PROMETHEUS_TEXT = 'text/plain; version=0.0.4; charset=utf-8';

function metricsController(path: string): Type<unknown> {
  @Controller()
  class OrchestratorMetricsController {
    constructor(@Inject(OBSERVABILITY) private readonly observability: Observability) {}

    @Get(path)
    @Header('content-type', PROMETHEUS_TEXT)
    @Header('cache-control', 'no-store')
    scrape(): Promise<string> {
      return this.observability.metrics!.text();
    }
  }
  return OrchestratorMetricsController;
}

function healthController(path: string, options: ReadinessOptions): Type<unknown> {
  @Controller()
  class OrchestratorHealthController {
    constructor(
      private readonly orchestrator: OrchestratorService,
      private readonly adapterHost: HttpAdapterHost,
    ) {}

    @Get(`${path}/live`)
    @Header('cache-control', 'no-store')
    live(): HealthReport {
      return livenessReport();
    }

    @Get(`${path}/ready`)
    @Header('cache-control', 'no-store')
    ready(@Res({ passthrough: true }) response: unknown): HealthReport {
      const report = readinessReport(this.orchestrator, options);
      if (report.status !== 'ok') this.adapterHost.httpAdapter.status(response, 503);
      return report;
    }
  }
  return OrchestratorHealthController;
}

/**
 * Metrics, event logs and health for the orchestrator of `OrchestratorModule`
 * (import both). prom-client and pino are optional peer dependencies, loaded
 * only for the features turned on here.
 *
 * @example
 * ```ts
 * imports: [
 *   OrchestratorModule.forRoot(),
 *   OrchestratorObservabilityModule.forRoot({ metrics: { path: '/internal/metrics' }, logger: pino() }),
 * ]
 * ```
 */
@Module({})
export class OrchestratorObservabilityModule {
  static forRoot(options: OrchestratorObservabilityOptions = {}): DynamicModule {
    const metrics = options.metrics === false ? undefined : (options.metrics ?? {});
    const health = options.health === false ? undefined : (options.health ?? {});
    const provider: Provider = {
      provide: OBSERVABILITY,
      inject: [OrchestratorService],
      useFactory: async (orchestrator: OrchestratorService) => {
        const created = metrics ? await OrchestratorMetrics.create(orchestrator, metrics) : undefined;
        let logger = options.logger;
        if (logger === true) {
          const pino = await loadOptional<{ default?: () => StructuredLogger; pino?: () => StructuredLogger }>(
            'pino',
            'logger: true',
          );
          logger = (pino.pino ?? pino.default!)();
        }
        return new Observability(created, logger ? logOrchestratorEvents(orchestrator, logger) : undefined);
      },
    };
    const controllers: Type<unknown>[] = [];
    if (metrics) controllers.push(metricsController(metrics.path ?? '/metrics'));
    if (health) controllers.push(healthController((health.path ?? '/health').replace(/\/+$/, ''), health));
    return {
      module: OrchestratorObservabilityModule,
      controllers,
      providers: [
        provider,
        { provide: OrchestratorMetrics, inject: [OBSERVABILITY], useFactory: (o: Observability) => o.metrics ?? null },
      ],
      exports: [OrchestratorMetrics],
    };
  }
}
