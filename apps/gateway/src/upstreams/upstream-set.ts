import { defaultShouldFailover, isOrchestratorError, type OrchestratorHealth, type Upstream, type UpstreamMemberOptions } from 'nest-prompt-orchestrator';
import type { GatewayConfig } from '../config/gateway-config.js';
import { ApiError } from '../http/api-error.js';
import type { Provider } from '../providers/provider.js';
import { UpstreamHttpError } from '../upstream/upstream-client.js';

/** The name of the pool every proxied route goes through, and of its breaker and limiter when it has one upstream. */
export const UPSTREAM_POOL = 'upstream';

/** Where one upstream of the pool is: what the call's work is told (`Upstream.target`). */
export interface UpstreamTarget {
  /** Base URL, as `--upstream` gave it (normalised, no trailing slash). */
  url: string;
}

/**
 * The pool's members, one per `--upstream`. With one upstream its breaker and
 * limiter keep the pool's own name (`upstream`), as before there were pools;
 * with several, each is `upstream@host:port` (its path too when two share a host).
 */
export function upstreamMembers(config: Pick<GatewayConfig, 'upstreams'>): Array<UpstreamMemberOptions & { target: UpstreamTarget }> {
  const urls = config.upstreams;
  if (urls.length === 1) return [{ name: UPSTREAM_POOL, target: { url: urls[0] } }];
  const hosts = urls.map((url) => new URL(url).host);
  return urls.map((url, i) => {
    const shared = hosts.filter((h) => h === hosts[i]).length > 1;
    const parsed = new URL(url);
    return { name: `${UPSTREAM_POOL}@${parsed.host}${shared ? parsed.pathname : ''}`, target: { url } };
  });
}

/**
 * A provider URL (built on the first upstream's base) moved to the upstream
 * the attempt goes to. Without a pool member (or on the first upstream) it is
 * the URL unchanged: one string comparison on the one-upstream path.
 */
export function urlOn(url: string, config: Pick<GatewayConfig, 'upstream'>, upstream: Upstream | undefined): string {
  const base = (upstream?.target as UpstreamTarget | undefined)?.url;
  if (base === undefined || base === config.upstream || !url.startsWith(config.upstream)) return url;
  return base + url.slice(config.upstream.length);
}

/**
 * What the gateway fails over on, before the first byte: what another upstream
 * may answer where this one could not (see `defaultShouldFailover`), as the
 * provider judges its own failures (llama.cpp's 500 about one request's
 * mistake is that request's answer anywhere). A 429 fails over when it gives
 * no `Retry-After`, or one beyond the request's time limit; a shorter one is
 * relayed, so that the client's SDK waits it out (retries at one layer only).
 */
export function gatewayFailover(config: Pick<GatewayConfig, 'timeoutMs'>, provider: Provider): (error: unknown) => boolean {
  return (error) => {
    if (error instanceof ApiError) return false;
    if (isOrchestratorError(error)) return defaultShouldFailover(error);
    if (error instanceof UpstreamHttpError && error.status === 429) {
      const seconds = retryAfterSeconds(error.retryAfter);
      return seconds === undefined || seconds * 1000 > config.timeoutMs;
    }
    return provider.isFailure(error);
  };
}

/** `Retry-After` in seconds (a number or an HTTP date), or undefined when absent or unreadable. */
export function retryAfterSeconds(value: string | undefined): number | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, (at - Date.now()) / 1000);
}

/** The pool as a caller sees it: one breaker state, and its members' load added up. */
export interface PoolState {
  /** `closed` while any member's breaker lets calls through, `half_open` while one is trying, `open` when none can. */
  breaker: 'closed' | 'open' | 'half_open';
  inFlight: number;
  queued: number;
  limit: number;
}

/**
 * The pool's state from an orchestrator's health: its members' (one per `--upstream`; the gateway always has the
 * pool, so with one upstream this is that upstream's breaker and limiter, named `upstream`).
 */
export function poolState(health: Pick<OrchestratorHealth, 'upstreams'>): PoolState {
  const members = health.upstreams.filter((u) => u.pool === UPSTREAM_POOL);
  const states = members.map((m) => m.breaker);
  return {
    breaker: states.length === 0 || states.includes('closed') ? 'closed' : states.includes('half_open') ? 'half_open' : 'open',
    inFlight: members.reduce((n, m) => n + m.inFlight, 0),
    queued: members.reduce((n, m) => n + m.queued, 0),
    limit: members.reduce((n, m) => n + (m.limit ?? 0), 0),
  };
}
