import type { IncomingMessage, ServerResponse } from 'node:http';
import { LRUCache } from 'lru-cache';
import type { Orchestrator, RoutePolicy, Upstream } from 'nest-prompt-orchestrator/core';
import { lowLevelCalls, type LowLevelCalls } from 'nest-prompt-orchestrator/low-level';
import type { GatewayConfig } from '../config/gateway-config.js';
import type { GatewayService } from '../gateway.service.js';
import { upstreamUrl } from '../upstreams/upstream-replies.js';
import { attemptsNeedUpstream, urlOn } from '../upstreams/upstream-set.js';
import { UpstreamAttempts } from '../upstreams/upstream-attempts.js';
import type { Budgets } from '../budgets/budgets.service.js';
import type { UsageLedger } from '../observability/usage-ledger.js';
import type { GatewayTelemetry } from '../observability/gateway-telemetry.js';
import type { Lifecycle } from '../common/lifecycle.js';
import { ROUTES, gatewayChecksKeys, type GatewayRoute, type UpstreamPlan } from '../providers/provider.js';
import { SHAPING } from '../providers/shaping.js';
import { EXPOSED_HEADERS } from '../http/cors.js';
import { keyDigest } from '../common/credentials.js';
import { ProxyRoutes } from './proxy-routes.js';
import { ByteArena } from './byte-arena.js';
import { ReplyBatch } from './reply-batch.js';
import { ProxiedCall } from './proxied-call.js';

/** What the data plane is made of: the gateway's services, made once by `GatewayCore`, called here directly. */
export interface DataPlaneParts {
  config: GatewayConfig;
  gateway: GatewayService;
  budgets: Budgets;
  usage: UsageLedger;
  telemetry: GatewayTelemetry;
  lifecycle: Lifecycle;
  orchestrator: Orchestrator;
  /** Where the gateway's own warnings go (a request that failed with a 5xx of the gateway's making). */
  warn: (line: string) => void;
}

/** Slabs beyond the window's bytes: streams let go while callers still write them, and each stream's last slab. */
const ARENA_SLACK_BYTES = 64 * 1024 * 1024;

/**
 * The gateway's proxied routes, served straight on Node's request and
 * response, ahead of Nest's router (which keeps the control routes: health,
 * metrics, the status page). One `ProxiedCall` per request carries it from
 * its bytes to its answer through its stages (body, admission, keying, the
 * call, delivery, accounting: see `ProxiedCall.serve`), with nothing read
 * back from response headers. It calls the framework-free
 * `Orchestrator` directly, as any app without Nest would.
 */
export class DataPlane {
  readonly routes = new ProxyRoutes();
  private readonly policies = new Map<GatewayRoute, RoutePolicy>();
  readonly keyDigests: Buffer[];
  readonly checksKeys: boolean;
  readonly corsOrigins?: ReadonlySet<string> | '*';
  readonly exposedHeaders = EXPOSED_HEADERS.join(',');
  readonly dedupOn: boolean;
  /** Several upstreams behind the proxied routes (or fallback chains): each attempt is told which one it goes to. */
  readonly pooled: boolean;
  /** The upstreams file's part in each attempt: fallback chains, the body a fallback is sent, the answer's upstream. */
  readonly attempts: UpstreamAttempts;
  // The same credential arrives again and again: its hash (the caller's tenant) is computed once.
  private readonly tenants = new LRUCache<string, string>({ max: 10_000 });
  private readonly plans = new WeakMap<UpstreamPlan, { origin: string; path: string }>();
  /** Where the window keeps the streams it stores (see `ByteArena`). */
  readonly arena: ByteArena;
  /** The orchestrator's call entry (calls started here, not through `run`), and its key and reuse helpers. */
  readonly calls: LowLevelCalls;
  /** Large bodies sent again and again (a long conversation retried, a shared document): their keys without hashing them again. */
  readonly bodies: ReturnType<LowLevelCalls['repeatedBodies']>;
  /** Whole answers (not streams) are written together at the end of each turn of the event loop (see `ReplyBatch`). */
  readonly replies = new ReplyBatch();

  constructor(readonly parts: DataPlaneParts) {
    const { config } = parts;
    this.calls = lowLevelCalls(parts.orchestrator);
    this.bodies = this.calls.repeatedBodies();
    this.keyDigests = config.gatewayKeys.map(keyDigest);
    this.checksKeys = gatewayChecksKeys(config);
    this.dedupOn = config.dedup;
    // An upstreams file may be reloaded with other members: every attempt is told where it goes.
    this.pooled = config.upstreamsFile !== undefined || attemptsNeedUpstream(config);
    this.attempts = new UpstreamAttempts(config, parts.orchestrator);
    // Room for the window's bytes, and for streams let go while callers still write them.
    this.arena = new ByteArena(config.windowMaxBytes + ARENA_SLACK_BYTES);
    if (this.dedupOn) this.calls.keepWindowBytes(this.arena);
    if (config.corsOrigins) this.corsOrigins = config.corsOrigins === '*' ? '*' : new Set(config.corsOrigins);
  }

  /** A route's policy, resolved on its first request (the breaker and limiter exist once something used them). */
  policyOf(route: GatewayRoute): RoutePolicy {
    let policy = this.policies.get(route);
    if (!policy) {
      policy = this.parts.orchestrator.policy(SHAPING[ROUTES[route].kind], route);
      this.policies.set(route, policy);
    }
    return policy;
  }

  /** Serves the request if it is for a proxied route; false leaves it to Nest. */
  readonly handle = (request: IncomingMessage, response: ServerResponse): boolean => {
    const url = request.url ?? '/';
    const query = url.indexOf('?');
    // HEAD is a GET without its body, as the platforms serve it (Node's response leaves the body out itself).
    const method = request.method === 'HEAD' ? 'GET' : (request.method ?? 'GET');
    const match = this.routes.match(method, query < 0 ? url : url.slice(0, query));
    if (!match) return false;
    new ProxiedCall(this, request, response, match.route, match.params, query < 0 ? '' : url.slice(query)).start();
    return true;
  };

  /** The caller's tenant: a short one-way hash of its identity (cached per identity). */
  tenantOf(identity: string): string {
    let tenant = this.tenants.get(identity);
    if (tenant === undefined) {
      tenant = this.calls.hashIdentity(identity);
      this.tenants.set(identity, tenant);
    }
    return tenant;
  }

  /**
   * The provider's origin and path for a route (its `:param` segments filled in, escaped), plus the client's query,
   * on the pool's `upstream` of this attempt (absent: the one upstream).
   */
  target(
    plan: UpstreamPlan,
    params: Record<string, string>,
    query: string,
    upstream: Upstream | undefined,
  ): { origin: string; path: string } {
    if (upstream !== undefined) {
      const url = new URL(urlOn(upstreamUrl(plan, params, query), this.parts.config, upstream));
      return { origin: url.origin, path: url.pathname + url.search };
    }
    let parsed = this.plans.get(plan);
    if (!parsed) {
      const url = new URL(plan.url);
      parsed = { origin: url.origin, path: url.pathname };
      this.plans.set(plan, parsed);
    }
    if (query === '' && !parsed.path.includes('/:')) return parsed;
    const path = parsed.path.includes('/:')
      ? parsed.path.replace(/:([A-Za-z_]+)/g, (match, name: string) =>
          params[name] === undefined ? match : encodeURIComponent(params[name]),
        )
      : parsed.path;
    return { origin: parsed.origin, path: path + query };
  }

  allowsOrigin(origin: string): boolean {
    return this.corsOrigins === '*' || (this.corsOrigins !== undefined && this.corsOrigins.has(origin));
  }
}
