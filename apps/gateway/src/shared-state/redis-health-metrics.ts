import type { OrchestratorMetrics } from 'nest-prompt-orchestrator/core';
import * as promClient from 'prom-client';
import type { Registry } from 'prom-client';
import type { SharedState } from './shared-state.js';

/**
 * Whether the fleet is one fleet, for Prometheus (with --redis and metrics on):
 * `gateway_redis_coordination_up` is 1 while coordination through Redis works,
 * 0 while each replica acts alone (any cause); `gateway_redis_keys_evictable`
 * is 1 when Redis's `maxmemory-policy` may evict the fleet's keys (absent when
 * unknown). Read at scrape time from `RedisHealth`.
 */
export class RedisHealthMetrics {
  constructor(shared: SharedState, metrics: OrchestratorMetrics | undefined) {
    const health = shared.health;
    if (!health || !metrics) return;
    const registers = [metrics.registry as Registry];
    new promClient.Gauge({
      name: 'gateway_redis_coordination_up',
      help: '1 while coordination of the replicas through Redis works (calls, breakers, window, limits and caps shared); 0 while each replica acts alone (Redis down, frozen, refusing auth or TLS, cross-slot or topology errors). See /health redis.cause.',
      registers,
      collect() {
        this.set(health.state === 'up' ? 1 : 0);
      },
    });
    new promClient.Gauge({
      name: 'gateway_redis_keys_evictable',
      help: "1 when Redis's maxmemory-policy may evict the fleet's keys (any policy but noeviction: every key has a TTL), 0 with noeviction; absent when CONFIG GET is refused.",
      registers,
      collect() {
        const evictable = health.view().eviction.keysMayBeEvicted;
        if (evictable === null) this.reset();
        else this.set(evictable ? 1 : 0);
      },
    });
  }
}
