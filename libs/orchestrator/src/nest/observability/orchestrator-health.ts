import type { Orchestrator } from '../../core/orchestrator.js';

/** One indicator of a health report, as @nestjs/terminus writes them: `status` and what it saw. */
export interface HealthIndicatorResult {
  status: 'up' | 'down';
  [detail: string]: unknown;
}

/** A health report in @nestjs/terminus's shape: `ok` (HTTP 200) or `error` (HTTP 503). */
export interface HealthReport {
  status: 'ok' | 'error';
  info: Record<string, HealthIndicatorResult>;
  error: Record<string, HealthIndicatorResult>;
  details: Record<string, HealthIndicatorResult>;
}

export interface ReadinessOptions {
  /** A degraded shared store or replica coordination makes the app not ready (default false: it answers from memory meanwhile). */
  requireStore?: boolean;
  /** More indicators, e.g. `{ database: () => ({ status: 'up' }) }`. */
  indicators?: Record<string, () => HealthIndicatorResult>;
}

function report(details: Record<string, HealthIndicatorResult>): HealthReport {
  const info: Record<string, HealthIndicatorResult> = {};
  const error: Record<string, HealthIndicatorResult> = {};
  for (const [name, result] of Object.entries(details)) (result.status === 'up' ? info : error)[name] = result;
  return { status: Object.keys(error).length === 0 ? 'ok' : 'error', info, error, details };
}

/** Liveness: the process answers. Nothing outside it (upstream, store) is consulted: a restart would not fix those. */
export function livenessReport(): HealthReport {
  return report({ process: { status: 'up', uptimeSeconds: Math.round(process.uptime()) } });
}

/**
 * Readiness: not shutting down, the shared store reachable when it is
 * required, and, for each pool of upstreams, at least one that its health
 * check finds serving. Breakers and limiters are reported but never make the
 * app unready: an open breaker already answers in a millisecond, and every
 * replica shares the same upstream.
 */
export function readinessReport(orchestrator: Orchestrator, options: ReadinessOptions = {}): HealthReport {
  const health = orchestrator.health();
  const details: Record<string, HealthIndicatorResult> = {
    orchestrator: {
      status: orchestrator.isClosing ? 'down' : 'up',
      ...(orchestrator.isClosing ? { reason: 'shutting down' } : {}),
    },
  };
  const store = health.window.store;
  if (store) {
    details.store = {
      status: store.state === 'ok' || !options.requireStore ? 'up' : 'down',
      state: store.state,
      since: new Date(store.since).toISOString(),
      ...(store.error ? { error: store.error } : {}),
    };
  }
  const coordination = health.coordination;
  if (coordination) {
    details.coordination = {
      status: coordination.state === 'ok' || !options.requireStore ? 'up' : 'down',
      state: coordination.state,
      ...(coordination.error ? { error: coordination.error } : {}),
    };
  }
  details.breakers = {
    status: 'up',
    ...Object.fromEntries(
      health.breakers.map((b) => [b.name, b.observed || b.state !== 'closed' ? b.state : 'unknown']),
    ),
  };
  details.limiters = {
    status: 'up',
    ...Object.fromEntries(
      health.limiters.map((l) => [l.name, { inFlight: l.inFlight, queued: l.queued, limit: l.limit }]),
    ),
  };
  if (health.upstreams.length > 0) {
    // A pool whose every upstream a health check took out (dead, loading) cannot answer: unlike an open breaker, that
    // is worth telling a load balancer, which may have another replica whose upstreams are up.
    const pools = new Map<string, boolean>();
    for (const u of health.upstreams) pools.set(u.pool, (pools.get(u.pool) ?? false) || u.health === 'up');
    details.upstreams = {
      status: [...pools.values()].every(Boolean) ? 'up' : 'down',
      ...Object.fromEntries(
        health.upstreams.map((u) => [
          u.name,
          {
            health: u.health,
            breaker: u.breaker,
            available: u.available,
            limit: u.limit,
            inFlight: u.inFlight,
            queued: u.queued,
            ...(u.slots === undefined ? {} : { slots: u.slots }),
          },
        ]),
      ),
    };
  }
  for (const [name, indicator] of Object.entries(options.indicators ?? {})) details[name] = indicator();
  return report(details);
}
