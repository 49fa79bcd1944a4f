import { Controller, Get, Inject } from '@nestjs/common';
import { OrchestratorService } from 'nest-prompt-orchestrator';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_CONFIG } from '../gateway.tokens.js';
import { SharedState } from '../shared-state/shared-state.js';
import { Budgets } from '../budgets/budgets.service.js';
import { UPSTREAM } from './gateway-route.decorator.js';

/**
 * Liveness of the gateway itself, answered at once (it never waits on the
 * provider), with the upstream's state as the breaker sees it.
 */
@Controller()
export class HealthController {
  constructor(
    private readonly orchestrator: OrchestratorService,
    @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
    private readonly shared: SharedState,
    private readonly budgets: Budgets,
  ) {}

  @Get(['health', 'v1/health'])
  health() {
    const health = this.orchestrator.health();
    const breaker = health.breakers.find((b) => b.name === UPSTREAM);
    const state = breaker?.state ?? 'closed';
    // Before any call (or probe) has had an outcome, nobody knows whether the provider is up.
    const known = breaker !== undefined && (breaker.observed || state !== 'closed');
    const store = health.window.store;
    const coordination = this.shared.coordinator?.health();
    return {
      // Degraded: answers keep coming, but from memory only and per replica (Redis is unreachable).
      status: store?.state === 'degraded' || coordination?.state === 'degraded' ? 'degraded' : 'ok',
      upstream: {
        provider: this.config.provider,
        state: !known ? 'unknown' : state === 'closed' ? 'available' : state === 'half_open' ? 'recovering' : 'unavailable',
        breaker: state,
      },
      breakers: health.breakers,
      limiters: health.limiters,
      dedup: { inFlight: health.inFlight, ...health.dedup },
      window: { entries: health.window.entries, bytes: health.window.bytes, maxBytes: health.window.maxBytes },
      store: store ?? null,
      coordination: coordination ?? null,
      budgets: this.budgets.health(),
    };
  }
}
