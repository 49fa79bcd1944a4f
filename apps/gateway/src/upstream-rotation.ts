import type { Orchestrator, UpstreamPool } from 'nest-prompt-orchestrator/core';
import type { GatewayConfig } from './config/gateway-config.js';
import type { GatewayService } from './gateway.service.js';
import type { ContextLog } from './common/context-log.js';
import type { GatewayTracing } from './observability/gateway-tracing.js';
import { FirstCheck, HealthPoller, type MemberChecks } from './upstreams/health-poller.js';
import { LiveUpstreams } from './upstreams/live-upstreams.js';
import {
  UPSTREAM_POOL,
  gatewayFailover,
  memberSettings,
  urlFor,
  type UpstreamTarget,
} from './upstreams/upstream-set.js';
import type { UpstreamsFile } from './config/upstreams-file.js';

/**
 * The gateway's pool of upstreams, kept in rotation by health checks where the
 * provider has them worth polling (a llama.cpp server: loading, dead, its
 * slots). Other providers are taken out by their breakers alone: polling a
 * paid API's model list every second would cost its rate limit; an upstream the
 * upstreams file adds while the gateway runs is checked until it first answers
 * (see `FirstCheck`). With `--upstreams-file`, the file is reloaded when it
 * changes and on SIGHUP (see `LiveUpstreams`).
 */
export class UpstreamRotation {
  readonly pool: UpstreamPool;
  /** The upstreams file in force, reloaded while the gateway runs (absent without `--upstreams-file`). */
  readonly live?: LiveUpstreams;
  private readonly checks?: MemberChecks;
  private poller?: HealthPoller;

  constructor(
    orchestrator: Orchestrator,
    private readonly gateway: GatewayService,
    private readonly config: GatewayConfig,
    tracing: GatewayTracing,
    private readonly logger: ContextLog,
  ) {
    this.pool = orchestrator.upstreams.get(UPSTREAM_POOL)!;
    const headers = (target: UpstreamTarget) => gateway.provider.authHeaders({ headers: {}, upstream: target });
    if (config.provider === 'llama') {
      this.poller = new HealthPoller(this.pool, { intervalMs: config.healthIntervalMs, headers });
      this.checks = this.poller;
    }
    const file = config.upstreamsFile;
    if (!file) return;
    this.checks ??= new FirstCheck({
      intervalMs: config.healthIntervalMs,
      headers,
      url: (target) => urlFor(gateway.provider.healthUrl(), config, target.url),
    });
    this.live = new LiveUpstreams(file, {
      registry: orchestrator.upstreams,
      settingsOf: (member) => memberSettings(config, gateway, member),
      shouldFailover: gatewayFailover(config, gateway.provider),
      checks: this.checks,
      // A refused reload is a warning (shown by default); a reload that took is news.
      log: (line, problem) => (problem ? this.logger.warn(line) : this.logger.log(line)),
    });
    this.live.onChange((next) => tracing.noteUpstreams(next));
  }

  /** The upstreams file in force (the one read at start until a reload takes). */
  get file(): UpstreamsFile | undefined {
    return this.live?.current ?? this.config.upstreamsFile;
  }

  start(): void {
    this.live?.watch();
    // In the background: start-up never waits on the upstreams.
    if (this.poller) void this.poller.start();
  }

  async close(): Promise<void> {
    this.live?.close();
    await this.checks?.stop();
  }
}
