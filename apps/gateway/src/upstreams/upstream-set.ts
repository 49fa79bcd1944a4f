import {
  defaultShouldFailover,
  isOrchestratorError,
  type BreakerOptions,
  type ConcurrencyOptions,
  type OrchestratorHealth,
  type Upstream,
  type UpstreamMemberOptions,
} from 'nest-prompt-orchestrator/core';
import type { GatewayConfig } from '../config/gateway-config.js';
import { ApiError } from '../common/api-error.js';
import { UpstreamHttpError } from '../apis/errors.js';
import { openAIBase } from '../apis/formats.js';
import {
  PRIMARY_POOL,
  type FallbackStep,
  type UpstreamEntry,
  type UpstreamKey,
  type UpstreamsFile,
} from '../config/upstreams-file.js';

/** What the pool asks of the provider (a `Provider`): whether an error is the upstream's failure. */
interface FailureJudge {
  isFailure(error: unknown): boolean;
}

/** The name of the pool every proxied route goes through, and of its breaker and limiter when it has one upstream. */
export const UPSTREAM_POOL = PRIMARY_POOL;

/** Where one upstream of a pool is, and what it is sent: what the call's work is told (`Upstream.target`). */
export interface UpstreamTarget {
  /** Base URL, as `--upstream` or the upstreams file gave it (normalised, no trailing slash). */
  url: string;
  /** Its own key (upstreams file): sent instead of the provider key or the client's own. */
  key?: UpstreamKey;
  /** Without a key of its own, whether it is sent the provider key or the client's (a fallback group's is not). */
  inheritsKey: boolean;
}

export type Member = UpstreamMemberOptions & { name: string; target: UpstreamTarget };

/**
 * The primary pool's members: the upstreams file's `upstreams`, else one per
 * `--upstream`. With one upstream its breaker and limiter keep the pool's own
 * name (`upstream`), as before there were pools; with several, each is
 * `upstream@host:port` (its path too when two share a host), unless the file
 * names it.
 */
export function upstreamMembers(config: Pick<GatewayConfig, 'upstreams' | 'upstreamsFile'>): Member[] {
  if (config.upstreamsFile) return config.upstreamsFile.upstreams.map(memberOf);
  const urls = config.upstreams;
  if (urls.length === 1) return [{ name: UPSTREAM_POOL, target: { url: urls[0], inheritsKey: true } }];
  const hosts = urls.map((url) => new URL(url).host);
  return urls.map((url, i) => {
    const shared = hosts.filter((h) => h === hosts[i]).length > 1;
    const parsed = new URL(url);
    return {
      name: `${UPSTREAM_POOL}@${parsed.host}${shared ? parsed.pathname : ''}`,
      target: { url, inheritsKey: true },
    };
  });
}

/** The upstreams file's fallback groups (pools only a fallback chain sends requests to), by pool name. */
export function fallbackGroups(config: Pick<GatewayConfig, 'upstreamsFile'>): Map<string, Member[]> {
  const groups = new Map<string, Member[]>();
  for (const [name, entries] of config.upstreamsFile?.groups ?? []) groups.set(name, entries.map(memberOf));
  return groups;
}

/** Every upstream the gateway may call, primary and fallback alike: each has a breaker and a limiter. */
export function everyMember(
  config: Pick<GatewayConfig, 'upstreams' | 'upstreamsFile'>,
): Array<Member & { concurrency?: number }> {
  const file = config.upstreamsFile;
  if (!file) return upstreamMembers(config);
  return [...file.upstreams, ...[...file.groups.values()].flat()].map((entry) => ({
    ...memberOf(entry),
    concurrency: entry.concurrency,
  }));
}

/** Whether each attempt must be told its upstream: several, a named one, or fallback chains. */
export function attemptsNeedUpstream(config: Pick<GatewayConfig, 'upstreams' | 'upstreamsFile'>): boolean {
  const members = upstreamMembers(config);
  return members.length > 1 || members[0].name !== UPSTREAM_POOL || fallbackGroups(config).size > 0;
}

/** The upstreams file's keys, to be kept out of everything the gateway says. */
export function upstreamKeys(config: Pick<GatewayConfig, 'upstreams' | 'upstreamsFile'>): string[] {
  return everyMember(config).flatMap((m) => (m.target.key ? [m.target.key.reveal()] : []));
}

// One target per entry, shared by its pool member and its breaker's probe: a key changed by a reload is changed
// in place there (see `diffUpstreams`), and both send the new one from then on.
const targets = new WeakMap<UpstreamEntry, UpstreamTarget>();

/** The member an upstreams file's entry makes. */
export function memberOf(entry: UpstreamEntry): Member {
  let target = targets.get(entry);
  if (!target) {
    target = { url: entry.url, ...(entry.key ? { key: entry.key } : {}), inheritsKey: entry.inheritsKey };
    targets.set(entry, target);
  }
  return { name: entry.name, target };
}

/** A reload gave `entry` (the same upstream) another key: its member's target takes it in place. */
export function rekey(target: UpstreamTarget, entry: UpstreamEntry): void {
  if (entry.key) target.key = entry.key;
  else delete target.key;
  targets.set(entry, target);
}

/**
 * The breaker and limiter settings of one upstream, from the CLI's (its own ceiling when the file gives one). The
 * breaker's probe asks the provider's health route of that upstream, with the key its target holds at the time.
 */
export function memberSettings(
  config: GatewayConfig,
  gateway: { healthProbe(signal: AbortSignal, target?: UpstreamTarget): Promise<boolean>; provider: FailureJudge },
  member: Member & { concurrency?: number },
): { breaker: BreakerOptions; concurrency: ConcurrencyOptions } {
  return {
    concurrency: {
      limit: member.concurrency ?? config.concurrency,
      adaptive: config.adaptiveConcurrency,
      queueSize: config.queueSize,
      maxWaitMs: config.queueTimeoutMs,
      perTenantLimit: config.tenantConcurrency,
      fairQueue: config.fairQueue,
    },
    breaker: {
      failureThreshold: config.breakerFailures,
      openMs: config.breakerOpenMs,
      probeIntervalMs: config.probeIntervalMs,
      probeTimeoutMs: Math.min(2_000, config.timeoutMs),
      healthProbe: (signal: AbortSignal) => gateway.healthProbe(signal, member.target),
      // The gateway's own refusals (a route this provider lacks: 501; a request it cannot translate: 400)
      // never reached the provider, so they say nothing about its health.
      // and neither does the provider's answer about one request (see Provider.isFailure).
      isFailure: (error: unknown) => !(error instanceof ApiError) && gateway.provider.isFailure(error),
    },
  };
}

/** The pools an upstreams file makes: the primary one (`upstream`), then each fallback group, by name. */
export function poolsOf(file: UpstreamsFile): Map<string, UpstreamEntry[]> {
  return new Map([[UPSTREAM_POOL, file.upstreams], ...file.groups]);
}

/** What a reload of the upstreams file changes, by pool and name. */
export interface UpstreamChanges {
  /** New members, and members whose settings changed (added again, after their old self was removed). */
  added: Array<{ pool: string; entry: UpstreamEntry; index: number }>;
  /** Members gone, and the old self of members whose settings changed. */
  removed: Array<{ pool: string; name: string }>;
  /** Members whose settings changed but for their key: removed and added again (also in `removed` and `added`). */
  changed: string[];
  /** The same upstream with another key: its target takes the new key in place, nothing else changes. */
  rekeyed: Array<{ pool: string; name: string; entry: UpstreamEntry }>;
  /** Whether the fallback chains differ. */
  chains: boolean;
}

/**
 * How `next` differs from `previous`. A member is its pool and name: with the same URL and ceiling but another
 * key it is the same server with rotated credentials (its breaker, limit and health stay); another URL, ceiling
 * or pool makes it another upstream, which must earn its place by a health check as a new one does.
 */
export function diffUpstreams(previous: UpstreamsFile, next: UpstreamsFile): UpstreamChanges {
  const before = poolsOf(previous);
  const after = poolsOf(next);
  const changes: UpstreamChanges = {
    added: [],
    removed: [],
    changed: [],
    rekeyed: [],
    chains: !sameChains(previous.fallbacks, next.fallbacks),
  };
  for (const [pool, entries] of before) {
    const kept = new Set((after.get(pool) ?? []).map((e) => e.name));
    for (const entry of entries) if (!kept.has(entry.name)) changes.removed.push({ pool, name: entry.name });
  }
  const moved = new Set(changes.removed.map((r) => r.name));
  for (const [pool, entries] of after) {
    const old = new Map((before.get(pool) ?? []).map((e) => [e.name, e]));
    entries.forEach((entry, index) => {
      const was = old.get(entry.name);
      if (!was) {
        changes.added.push({ pool, entry, index });
        if (moved.has(entry.name)) changes.changed.push(entry.name);
      } else if (
        was.url !== entry.url ||
        was.concurrency !== entry.concurrency ||
        was.inheritsKey !== entry.inheritsKey
      ) {
        changes.removed.push({ pool, name: entry.name });
        changes.added.push({ pool, entry, index });
        changes.changed.push(entry.name);
      } else if (was.key?.reveal() !== entry.key?.reveal()) {
        changes.rekeyed.push({ pool, name: entry.name, entry });
      }
    });
  }
  return changes;
}

function sameChains(a: ReadonlyMap<string, FallbackStep[]>, b: ReadonlyMap<string, FallbackStep[]>): boolean {
  const text = (chains: ReadonlyMap<string, FallbackStep[]>) =>
    JSON.stringify([...chains].sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0)));
  return text(a) === text(b);
}

/**
 * A provider URL (built on the first upstream's base) moved to the upstream
 * the attempt goes to. Without a pool member (or on the first upstream) it is
 * the URL unchanged: one string comparison on the one-upstream path. For
 * `--provider openai` both bases are taken as the provider takes its own
 * (`/v1` added when missing), so that `http://a:1` and `http://b:2/v1` serve
 * the same paths.
 */
export function urlOn(
  url: string,
  config: Pick<GatewayConfig, 'upstream' | 'provider'>,
  upstream: Upstream | undefined,
): string {
  return urlFor(url, config, (upstream?.target as UpstreamTarget | undefined)?.url);
}

/** `urlOn` for a target's base URL (a health probe's). */
export function urlFor(
  url: string,
  config: Pick<GatewayConfig, 'upstream' | 'provider'>,
  base: string | undefined,
): string {
  if (base === undefined || base === config.upstream) return url;
  const from = config.provider === 'openai' ? openAIBase(config.upstream) : config.upstream;
  if (!url.startsWith(from)) return url;
  return (config.provider === 'openai' ? openAIBase(base) : base) + url.slice(from.length);
}

/**
 * What the gateway fails over on, before the first byte: what another upstream
 * may answer where this one could not (see `defaultShouldFailover`), as the
 * provider judges its own failures (llama.cpp's 500 about one request's
 * mistake is that request's answer anywhere). A 429 fails over when it gives
 * no `Retry-After`, or one beyond the request's time limit; a shorter one is
 * relayed, so that the client's SDK waits it out (retries at one layer only).
 */
export function gatewayFailover(
  config: Pick<GatewayConfig, 'timeoutMs'>,
  provider: FailureJudge,
): (error: unknown) => boolean {
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
    breaker:
      states.length === 0 || states.includes('closed') ? 'closed' : states.includes('half_open') ? 'half_open' : 'open',
    inFlight: members.reduce((n, m) => n + m.inFlight, 0),
    queued: members.reduce((n, m) => n + m.queued, 0),
    limit: members.reduce((n, m) => n + (m.limit ?? 0), 0),
  };
}
