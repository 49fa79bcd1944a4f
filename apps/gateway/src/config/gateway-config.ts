import { parseArgs } from 'node:util';
import type { ProviderKind } from '../common/apis.js';
import { ConfigError } from '../common/config-error.js';
import { parseHost, type AllowedHost } from './allowed-hosts.js';
import { parseBudgetConfig, type BudgetConfig } from './budget-flags.js';
import { isTrue, type FlagValues } from './flag-values.js';
import {
  DEFAULT_UPSTREAM,
  FLAGS,
  MIN_SESSION_SECRET,
  PROVIDER_KEY_ENV,
  defaultMaxConnections,
  readList,
  readString,
} from './flags.js';
import { parseObservability, type ObservabilityConfig } from './observability-config.js';
import {
  checkRedisPrefix,
  checkRedisUrl,
  parseLimitsWithoutRedis,
  readRedisTls,
  type LimitsWithoutRedis,
  type RedisTlsFiles,
} from './redis-flags.js';
import { UpstreamsFileError, readUpstreamsFile, type UpstreamsFile } from './upstreams-file.js';

export type { BudgetConfig, LimitsWithoutRedis, ObservabilityConfig, ProviderKind };
export type { LogFormat } from './observability-config.js';
export { ConfigError } from '../common/config-error.js';
export { defaultMaxConnections, helpText } from './flags.js';

export type PlatformKind = 'express' | 'fastify';

/** Everything the gateway is configured with; built from flags, then environment, then defaults. */
export interface GatewayConfig {
  provider: ProviderKind;
  /** Base URL of the provider (the first of `upstreams`); fixed for the process, never taken from a request. */
  upstream: string;
  /** Every upstream serving the provider's API (`--upstream` repeated, or the file's), in order of preference; at least one. */
  upstreams: string[];
  /** `--upstreams-file`: each upstream's name, key and ceiling, and the fallback chains (absent: `--upstream`). */
  upstreamsFile?: UpstreamsFile;
  host: string;
  port: number;
  platform: PlatformKind;
  /** `--allowed-hosts`: the `Host` values served besides the defaults (see config/allowed-hosts.ts); `'*'`: any; undefined: the defaults. */
  allowedHosts?: AllowedHost[] | '*';
  /** `--trust-proxy`: X-Forwarded-Host and X-Forwarded-For are believed (a proxy in front writes them). */
  trustProxy: boolean;
  /** Gateway processes on one port (node:cluster). */
  workers: number;
  /** Most upstream calls in flight at once, per upstream: the ceiling of the adaptive limit (or the fixed limit). */
  concurrency: number;
  /** The limit below `concurrency` is learnt from latency, 429s and 503s (on unless --no-adaptive-concurrency). */
  adaptiveConcurrency: boolean;
  /** A call every caller left keeps running for the window (--keep-abandoned), instead of being aborted. */
  keepAbandoned: boolean;
  /** How often each llama.cpp server's health and slots are read. */
  healthIntervalMs: number;
  /** How long a request waits for an upstream to come into rotation while none is (0: refused at once). */
  holdUnavailableMs: number;
  /** Upstream calls one tenant may have in flight at once (undefined: no cap of its own). */
  tenantConcurrency?: number;
  /** The wait queue is shared in turn across tenants (on unless --no-fair-queue). */
  fairQueue: boolean;
  queueSize: number;
  queueTimeoutMs: number;
  /** Total time of a plain answer; first-byte and idle-gap limit of a stream. */
  timeoutMs: number;
  dedup: boolean;
  dedupWindowMs: number;
  /** Answers to sampled requests (meant to vary) are kept in the window too (on unless --no-window-for-sampled). */
  windowForSampled: boolean;
  breakerFailures: number;
  breakerOpenMs: number;
  probeIntervalMs: number;
  retries: number;
  maxBodyBytes: number;
  /** Longest time to receive one request, headers and body (slow or stalled clients are cut). */
  requestTimeoutMs: number;
  /** Connections open at once; more are closed at once, so file descriptors are never exhausted. */
  maxConnections: number;
  /**
   * Connections one client address may hold at once (0: no limit); more from it are closed at once. Applies to
   * loopback addresses only when given explicitly (`loopbackLimited`): on this host are benchmarks and local proxies.
   */
  maxConnectionsPerAddress: number;
  loopbackLimited: boolean;
  /** Longest time to receive a request's body once its headers are in (0: only --request-timeout applies). */
  bodyTimeoutMs: number;
  /** After SIGTERM, how long requests and streams in flight may take to finish. */
  shutdownGraceMs: number;
  /** How long a client's idle keep-alive connection is kept open. */
  keepAliveTimeoutMs: number;
  /** Bytes the in-memory answer window keeps at most. */
  windowMaxBytes: number;
  /** `--in-flight-max-bytes`: what the streams in flight keep together, for late joiners and the window. */
  inFlightMaxBytes: number;
  /** `--redis`: a node (of a single Redis or any node of a cluster), or `redis+sentinel://` naming a Sentinel set. */
  redisUrl?: string;
  /** `--redis-ca`, `--redis-cert`, `--redis-key`: PEM files for TLS to Redis, read at start. */
  redisTls?: RedisTlsFiles;
  /** Longest one Redis operation may take before it counts as a failure (and a miss). */
  redisTimeoutMs: number;
  /** Namespace of every Redis key and channel. */
  redisPrefix: string;
  /**
   * `--limits-without-redis`: what rate limits and spend caps do while the Redis they are counted in is unusable:
   * `open` (each replica counts alone), `closed` (refused with a 503), `share` (each replica enforces its share).
   */
  limitsWithoutRedis: LimitsWithoutRedis;
  /** Keys clients must present; empty = pass the client's own key through. */
  gatewayKeys: string[];
  /** Key the gateway sends upstream instead of the client's. */
  providerKey?: string;
  /** `--session-secret`: signs status page sessions (absent: a random secret, shared through Redis with `--redis`). */
  sessionSecret?: string;
  /** Browser origins allowed by CORS: a list, `'*'` (any: each request's Origin is echoed), or undefined (off). */
  corsOrigins?: string[] | '*';
  /** Virtual keys, limits, spend caps and the request log (see config/budget-flags.ts). */
  budgets: BudgetConfig;
  /** Observability: metrics, logs, readiness and the status page (see docs/operations.md). */
  observability: ObservabilityConfig;
}

/** Parses flags and environment; throws `ConfigError` naming the first bad value. Returns `undefined` for --help. */
export function parseGatewayConfig(argv: string[], env: NodeJS.ProcessEnv): GatewayConfig | undefined {
  let values: FlagValues;
  try {
    const options = Object.fromEntries(
      Object.entries(FLAGS).map(([name, spec]) => [
        name,
        { type: spec.boolean ? 'boolean' : 'string', multiple: spec.multiple === true } as const,
      ]),
    );
    values = parseArgs({ args: argv, options, strict: true, allowPositionals: false }).values as typeof values;
  } catch (error) {
    throw new ConfigError(`${(error as Error).message}. Run with --help to list the options.`);
  }
  if (values.help) return undefined;

  const provider = (readString(values, env, 'provider') ?? 'openai') as ProviderKind;
  if (!['openai', 'llama', 'anthropic'].includes(provider)) {
    throw new ConfigError(`--provider must be openai, llama or anthropic, got "${provider}"`);
  }
  const raw = (name: string) => readString(values, env, name, provider);
  const upstreamsFile = readUpstreams(raw('upstreams-file'), Array.isArray(values.upstream), env, provider);
  const upstreams = upstreamsFile
    ? upstreamsFile.upstreams.map((u) => u.url)
    : readList(values, env, 'upstream', provider).map((url) => parseUrl('upstream', url));
  if (upstreams.length === 0) upstreams.push(parseUrl('upstream', DEFAULT_UPSTREAM[provider]));
  if (new Set(upstreams).size !== upstreams.length) throw new ConfigError('--upstream names the same URL twice');
  const upstream = upstreams[0];
  const platform = (raw('platform') ?? 'fastify') as PlatformKind;
  if (platform !== 'express' && platform !== 'fastify') {
    throw new ConfigError(`--platform must be express or fastify, got "${String(platform)}"`);
  }
  const seconds = (name: string, fallback: number) => Math.round(parseNumber(name, raw(name), fallback, 0.001) * 1000);
  const integer = (name: string, fallback: number, min: number) => {
    const n = parseNumber(name, raw(name), fallback, min);
    if (!Number.isInteger(n)) throw new ConfigError(`--${name} must be a whole number, got "${raw(name)}"`);
    return n;
  };
  const port = integer('port', 18080, 0);
  if (port > 65535) throw new ConfigError(`--port must be at most 65535, got ${port}`);
  const redisUrl = raw('redis');
  if (redisUrl !== undefined) checkRedisUrl(redisUrl);
  const redisTls = readRedisTls(raw, redisUrl);
  const redisPrefixRaw = raw('redis-prefix');
  checkRedisPrefix(redisPrefixRaw);
  const sessionSecret = raw('session-secret');
  if (sessionSecret !== undefined && sessionSecret.length < MIN_SESSION_SECRET) {
    throw new ConfigError(
      `--session-secret must be at least ${MIN_SESSION_SECRET} characters, got ${sessionSecret.length}`,
    );
  }
  const noDedup = values['no-dedup'] === true || isTrue(env.ORCHESTRATOR_NO_DEDUP);
  const maxBodyBytes = integer('max-body', 10 * 1024 * 1024, 1024);
  const windowMaxBytes = integer('window-max-bytes', 256 * 1024 * 1024, 1024 * 1024);
  // Not below one whole answer of the window's (1 MiB): a stream that may be kept must fit. The default is lower
  // than the plugin's: a gateway relays many long streams at once, and what they keep, V8 frees only after a
  // major collection, so their copies cost about twice their size in RSS (docs/architecture.md, "Streams").
  const inFlightMaxBytes = integer('in-flight-max-bytes', 4 * 1024 * 1024, 1024 * 1024);
  const maxConnections = integer('max-connections', defaultMaxConnections(), 1);
  // By default one address may not take more than half the table; given explicitly, the limit binds loopback too.
  const perAddressGiven = raw('max-connections-per-address') !== undefined;
  const maxConnectionsPerAddress = integer(
    'max-connections-per-address',
    Math.max(1, Math.floor(maxConnections / 2)),
    0,
  );

  return {
    provider,
    upstream,
    upstreams,
    ...(upstreamsFile ? { upstreamsFile } : {}),
    host: raw('host') ?? '127.0.0.1',
    port,
    allowedHosts: parseAllowedHosts(raw('allowed-hosts')),
    trustProxy: values['trust-proxy'] === true || isTrue(env.ORCHESTRATOR_TRUST_PROXY),
    platform,
    workers: integer('workers', 1, 1),
    concurrency: integer('concurrency', 512, 1),
    adaptiveConcurrency: !(
      values['no-adaptive-concurrency'] === true || isTrue(env.ORCHESTRATOR_NO_ADAPTIVE_CONCURRENCY)
    ),
    keepAbandoned: values['keep-abandoned'] === true || isTrue(env.ORCHESTRATOR_KEEP_ABANDONED),
    healthIntervalMs: seconds('health-interval', 1),
    holdUnavailableMs: Math.round(parseNumber('hold-unavailable', raw('hold-unavailable'), 5, 0) * 1000),
    tenantConcurrency: raw('tenant-concurrency') === undefined ? undefined : integer('tenant-concurrency', 1, 1),
    fairQueue: !(values['no-fair-queue'] === true || isTrue(env.ORCHESTRATOR_NO_FAIR_QUEUE)),
    queueSize: integer('queue-size', 1000, 0),
    queueTimeoutMs: seconds('queue-timeout', 60),
    timeoutMs: seconds('timeout', 60),
    dedup: !noDedup,
    windowForSampled: !(values['no-window-for-sampled'] === true || isTrue(env.ORCHESTRATOR_NO_WINDOW_FOR_SAMPLED)),
    dedupWindowMs: seconds('dedup-window', 300),
    breakerFailures: integer('breaker-failures', 5, 1),
    breakerOpenMs: seconds('breaker-open', 30),
    probeIntervalMs: seconds('probe-interval', 0.5),
    retries: integer('retries', 1, 0),
    maxBodyBytes,
    requestTimeoutMs: seconds('request-timeout', 30),
    maxConnections,
    maxConnectionsPerAddress,
    loopbackLimited: perAddressGiven,
    bodyTimeoutMs: Math.round(parseNumber('body-timeout', raw('body-timeout'), 10, 0) * 1000),
    shutdownGraceMs: seconds('shutdown-grace', 30),
    keepAliveTimeoutMs: seconds('keep-alive-timeout', 65),
    windowMaxBytes,
    inFlightMaxBytes,
    redisUrl,
    redisTls,
    redisTimeoutMs: seconds('redis-timeout', 0.5),
    redisPrefix: redisPrefixRaw ?? 'npo',
    limitsWithoutRedis: parseLimitsWithoutRedis(raw('limits-without-redis')),
    gatewayKeys: (raw('gateway-keys') ?? '')
      .split(',')
      .map((k) => k.trim())
      .filter(Boolean),
    providerKey: env[PROVIDER_KEY_ENV[provider]] || undefined,
    ...(sessionSecret !== undefined ? { sessionSecret } : {}),
    corsOrigins: parseOrigins(raw('cors')),
    budgets: parseBudgetConfig(raw, (name) => values[name] === true || isTrue(raw(name)), env),
    observability: parseObservability(
      raw,
      (name) => values[name] === true || isTrue(env[FLAGS[name].env as string]),
      env,
    ),
  };
}

/**
 * `--upstreams-file`, read and checked now, so that a file that cannot be used stops start-up with a line naming
 * the file and the field. It replaces `--upstream`: both at once is refused (which list would be meant?); the
 * provider's URL variable (OPENAI_BASE_URL, often set for the SDKs in the same shell) is left unread.
 */
function readUpstreams(
  path: string | undefined,
  flagsGiven: boolean,
  env: NodeJS.ProcessEnv,
  provider: ProviderKind,
): UpstreamsFile | undefined {
  if (path === undefined) return undefined;
  if (flagsGiven)
    throw new ConfigError(
      '--upstream and --upstreams-file both list upstreams: list every upstream in the file, or use --upstream alone',
    );
  try {
    return readUpstreamsFile(path, env, provider);
  } catch (error) {
    if (error instanceof UpstreamsFileError)
      throw new ConfigError(`--upstreams-file ${JSON.stringify(path.slice(0, 200))}: ${error.message}`);
    throw error;
  }
}

function parseNumber(name: string, raw: string | undefined, fallback: number, min: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n)) throw new ConfigError(`--${name} must be a number, got "${raw}"`);
  if (n < min) throw new ConfigError(`--${name} must be at least ${min}, got ${raw}`);
  return n;
}

function parseUrl(name: string, raw: string, protocols = ['http:', 'https:']): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`--${name} must be a URL, got "${raw}"`);
  }
  if (!protocols.includes(url.protocol)) {
    throw new ConfigError(`--${name} must use ${protocols.join(' or ')}, got "${url.protocol}"`);
  }
  return url.toString().replace(/\/+$/, '');
}

/** A flag that is `*` alone or a comma list of `what` (its items trimmed); undefined when not given. */
function starOrList(flag: string, raw: string | undefined, what: string): string[] | '*' | undefined {
  if (raw === undefined) return undefined;
  const items = raw
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean);
  if (items.length === 0) throw new ConfigError(`--${flag} must be * or a comma list of ${what}, got nothing`);
  if (!items.includes('*')) return items;
  if (items.length > 1) throw new ConfigError(`--${flag} takes * alone, or a list of ${what}, not both`);
  return '*';
}

/** `*`, or a comma list of `name[:port]` (IPv6 addresses in brackets); undefined when not given. */
function parseAllowedHosts(raw: string | undefined): AllowedHost[] | '*' | undefined {
  const items = starOrList('allowed-hosts', raw, 'host names');
  if (items === undefined || items === '*') return items;
  return items.map((item) => {
    const host = parseHost(item);
    if (host === undefined || (host.name.includes(':') && !host.name.startsWith('['))) {
      throw new ConfigError(
        `--allowed-hosts entries look like gateway.example.com, gateway.example.com:8443 or [fd00::1] (a host name, not a URL; port 1-65535), got "${item.slice(0, 200)}"`,
      );
    }
    return host;
  });
}

/** `*`, or a comma list of origins (`scheme://host[:port]`, as a browser sends them). */
function parseOrigins(raw: string | undefined): string[] | '*' | undefined {
  const items = starOrList('cors', raw, 'origins');
  if (items === undefined || items === '*') return items;
  for (const origin of items) {
    let url: URL | undefined;
    try {
      url = new URL(origin);
    } catch {
      url = undefined;
    }
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.origin !== origin.replace(/\/$/, '')) {
      throw new ConfigError(
        `--cors origins look like https://app.example.com (scheme, host, optional port), got "${origin}"`,
      );
    }
  }
  return items.map((o) => o.replace(/\/$/, ''));
}
