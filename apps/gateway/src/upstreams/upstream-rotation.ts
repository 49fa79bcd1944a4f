import { Inject, Injectable, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { OrchestratorService, type UpstreamPool } from 'nest-prompt-orchestrator';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GatewayService } from '../gateway.service.js';
import { GATEWAY_CONFIG } from '../gateway.tokens.js';
import { HealthPoller } from './health-poller.js';
import { UPSTREAM_POOL } from './upstream-set.js';

/**
 * The gateway's pool of upstreams, kept in rotation by health checks where the
 * provider has them worth polling (a llama.cpp server: loading, dead, its
 * slots). Other providers are taken out by their breakers alone: polling a
 * paid API's model list every second would cost its rate limit.
 */
@Injectable()
export class UpstreamRotation implements OnApplicationBootstrap, OnModuleDestroy {
  readonly pool: UpstreamPool;
  private poller?: HealthPoller;

  constructor(
    orchestrator: OrchestratorService,
    private readonly gateway: GatewayService,
    @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
  ) {
    this.pool = orchestrator.upstreams.get(UPSTREAM_POOL)!;
  }

  onApplicationBootstrap(): void {
    if (this.config.provider !== 'llama') return;
    this.poller = new HealthPoller(this.pool, {
      intervalMs: this.config.healthIntervalMs,
      headers: (target) => this.gateway.provider.authHeaders({ headers: {}, upstream: target }),
    });
    // In the background: start-up never waits on the upstreams.
    void this.poller.start();
  }

  onModuleDestroy(): Promise<void> {
    return this.poller?.stop() ?? Promise.resolve();
  }
}
