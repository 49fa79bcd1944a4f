import { readFileSync } from 'node:fs';
import { parseSentinelUrl } from '../shared-state/redis-connection.js';
import { parseArgs } from 'node:util';
import { ConfigError } from '../common/config-error.js';
import { BUDGET_FLAGS, parseBudgetConfig, type BudgetConfig } from '../budgets/budget-config.js';
import { UpstreamsFileError, readUpstreamsFile, type UpstreamsFile } from '../upstreams/upstreams-file.js';
import { parseHost, type AllowedHost } from './allowed-hosts.js';

import type { ProviderKind } from '../common/apis.js';
export type { ProviderKind };
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
  redisTls?: { ca?: Buffer; cert?: Buffer; key?: Buffer };
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
  /** Virtual keys, limits, spend caps and the request log (see budgets/budget-config.ts). */
  budgets: BudgetConfig;
  /** Observability: metrics, logs, readiness and the status page (see docs/operations.md). */
  observability: ObservabilityConfig;
}

export type LogFormat = 'json' | 'pretty';

export type LimitsWithoutRedis = 'open' | 'closed' | 'share';

export interface ObservabilityConfig {
  /** Route of the Prometheus metrics; undefined with --no-metrics. */
  metricsPath?: string;
  /** Token counters carry a hashed tenant label too. */
  metricsTenants: boolean;
  logLevel: string;
  logFormat: LogFormat;
  /** One log line per request (on unless --no-request-log). */
  requestLog: boolean;
  /** Request bodies (prompts) in the request lines: off unless asked for. */
  logPrompts: boolean;
  /** Route of the live status page; undefined with --no-status-page. */
  statusPath?: string;
  /** The status page needs no sign-in even beyond loopback. */
  statusPublic: boolean;
  /** A degraded Redis makes /health/ready fail. */
  readyRequiresStore: boolean;
  /** Where OpenTelemetry traces go (an OTLP/HTTP traces URL); undefined: no tracing. */
  otlpTracesUrl?: string;
  /** `service.name` of the spans (OTEL_SERVICE_NAME). */
  serviceName: string;
}

interface FlagSpec {
  env?: string | ((provider: ProviderKind) => string);
  help: string;
  value?: string;
  boolean?: boolean;
  /** May be given more than once (the environment variable then holds a comma list). */
  multiple?: boolean;
}

const UPSTREAM_ENV: Record<ProviderKind, string> = {
  openai: 'OPENAI_BASE_URL',
  llama: 'LLAMA_CPP_URL',
  anthropic: 'ANTHROPIC_BASE_URL',
};
const DEFAULT_UPSTREAM: Record<ProviderKind, string> = {
  openai: 'https://api.openai.com/v1',
  llama: 'http://127.0.0.1:8080',
  anthropic: 'https://api.anthropic.com',
};
const PROVIDER_KEY_ENV: Record<ProviderKind, string> = {
  openai: 'OPENAI_API_KEY',
  llama: 'LLAMA_API_KEY',
  anthropic: 'ANTHROPIC_API_KEY',
};

/** Shortest `--session-secret` accepted: a short one could be guessed offline from one cookie. */
export const MIN_SESSION_SECRET = 32;

const FLAGS: Record<string, FlagSpec> = {
  provider: { env: 'ORCHESTRATOR_PROVIDER', value: 'NAME', help: 'openai | llama | anthropic (default openai)' },
  upstream: {
    env: (p) => UPSTREAM_ENV[p],
    value: 'URL',
    multiple: true,
    help: 'provider base URL (env OPENAI_BASE_URL / LLAMA_CPP_URL / ANTHROPIC_BASE_URL by provider); repeat it (or give the variable a comma list) for several upstreams of one API, with failover between them (docs/upstreams.md)',
  },
  'upstreams-file': {
    env: 'ORCHESTRATOR_UPSTREAMS_FILE',
    value: 'PATH',
    help: 'every upstream in one JSON file, each with its own name, key (apiKeyEnv or apiKey) and concurrency ceiling, and for --provider openai fallback chains across groups of upstreams and models; replaces --upstream; reloaded on change and SIGHUP (docs/upstreams.md)',
  },
  host: { env: 'ORCHESTRATOR_HOST', value: 'HOST', help: 'address to listen on (default 127.0.0.1)' },
  port: { env: 'ORCHESTRATOR_PORT', value: 'PORT', help: 'port to listen on (default 18080; llama-server uses 8080)' },
  'allowed-hosts': {
    env: 'ORCHESTRATOR_ALLOWED_HOSTS',
    value: 'HOSTS',
    help: "Host names (optional :port) the gateway answers, a comma list; any other Host gets 421, so a DNS-rebinding page cannot use it. Default on loopback: localhost, 127.0.0.1, [::1]; beyond loopback: those, IP addresses, the bind address, and (without a list) the machine's host name and names no public DNS has (single-label, .svc, .cluster.local, .internal, .local). * answers any Host: unsafe (docs/security.md)",
  },
  'trust-proxy': {
    env: 'ORCHESTRATOR_TRUST_PROXY',
    boolean: true,
    help: 'believe X-Forwarded-Host (checked instead of Host), X-Forwarded-Proto (a status session cookie is then Secure when it says https) and X-Forwarded-For (the last address: the client as the proxy saw it) from a proxy in front; off by default, turn on only behind a proxy that overwrites them',
  },
  workers: {
    env: 'ORCHESTRATOR_WORKERS',
    value: 'N',
    help: 'gateway processes on this port (node:cluster), one gateway: one upstream call per key and one breaker across them, through their primary or --redis (default 1)',
  },
  platform: {
    env: 'ORCHESTRATOR_PLATFORM',
    value: 'NAME',
    help: 'fastify | express (default fastify: less CPU per request)',
  },
  concurrency: {
    env: 'ORCHESTRATOR_CONCURRENCY',
    value: 'N',
    help: "most calls in flight at once per upstream (default 512); below it the limit is learnt from latency, or is a llama.cpp server's slots",
  },
  'no-adaptive-concurrency': {
    env: 'ORCHESTRATOR_NO_ADAPTIVE_CONCURRENCY',
    boolean: true,
    help: 'a fixed limit of --concurrency per upstream instead of one learnt from latency, 429s and 503s (slots still apply)',
  },
  'keep-abandoned': {
    env: 'ORCHESTRATOR_KEEP_ABANDONED',
    boolean: true,
    help: 'a call every caller left keeps running so that its answer lands in the window (default: it is aborted, freeing the slot); on a llama.cpp server it keeps its slot, and is kept only while a slot is left for live callers',
  },
  'health-interval': {
    env: 'ORCHESTRATOR_HEALTH_INTERVAL_SECS',
    value: 'SECS',
    help: "how often each llama.cpp server's /health and slots (total, and busy from /slots or /metrics) are read, to take it out of rotation and back and leave slots busy with others' work alone and an upstream added by a reload is checked until it first answers (default 1; 0.1 while requests wait on such slots)",
  },
  'hold-unavailable': {
    env: 'ORCHESTRATOR_HOLD_UNAVAILABLE_SECS',
    value: 'SECS',
    help: 'while no upstream is in rotation (llama.cpp servers down or loading their model), how long a request waits for one before a 503 no_upstream_available; 0 refuses at once; an open breaker still refuses at once (default 5)',
  },
  'tenant-concurrency': {
    env: 'ORCHESTRATOR_TENANT_CONCURRENCY',
    value: 'N',
    help: 'upstream calls one key may have in flight at once (default: no cap of its own; the queue is shared fairly either way)',
  },
  'no-fair-queue': {
    env: 'ORCHESTRATOR_NO_FAIR_QUEUE',
    boolean: true,
    help: 'serve the wait queue first come, first served instead of in turn across keys',
  },
  'queue-size': {
    env: 'ORCHESTRATOR_QUEUE_SIZE',
    value: 'N',
    help: 'requests allowed to wait for a slot (default 1000)',
  },
  'queue-timeout': {
    env: 'ORCHESTRATOR_QUEUE_TIMEOUT_SECS',
    value: 'SECS',
    help: 'longest wait for a slot (default 60)',
  },
  timeout: {
    env: 'ORCHESTRATOR_TIMEOUT_SECS',
    value: 'SECS',
    help: 'total time of a plain answer; time to first byte and longest gap of a stream (default 60; fractions allowed)',
  },
  'dedup-window': {
    env: 'ORCHESTRATOR_DEDUP_SECS',
    value: 'SECS',
    help: 'how long finished answers are reused (default 300)',
  },
  'no-dedup': { env: 'ORCHESTRATOR_NO_DEDUP', boolean: true, help: 'turn request deduplication off' },
  'no-window-for-sampled': {
    env: 'ORCHESTRATOR_NO_WINDOW_FOR_SAMPLED',
    boolean: true,
    help: 'never replay answers meant to vary (temperature > 0 or unset, no seed; or n > 1); identical ones in flight are still shared',
  },
  'breaker-failures': {
    env: 'ORCHESTRATOR_BREAKER_FAILURES',
    value: 'N',
    help: 'consecutive upstream failures that open the breaker (default 5)',
  },
  'breaker-open': {
    env: 'ORCHESTRATOR_BREAKER_OPEN_SECS',
    value: 'SECS',
    help: 'first open period, doubled per failed probe up to 64x (default 30)',
  },
  'probe-interval': {
    env: 'ORCHESTRATOR_PROBE_INTERVAL_SECS',
    value: 'SECS',
    help: "how often the provider's health is checked while the breaker is open (default 0.5)",
  },
  retries: {
    env: 'ORCHESTRATOR_RETRIES',
    value: 'N',
    help: 'gateway retries of 502/503/504 and connection errors (default 1)',
  },
  'max-body': {
    env: 'ORCHESTRATOR_MAX_BODY_BYTES',
    value: 'BYTES',
    help: 'largest request body accepted (default 10485760)',
  },
  'request-timeout': {
    env: 'ORCHESTRATOR_REQUEST_TIMEOUT_SECS',
    value: 'SECS',
    help: 'longest time to receive one request, headers and body; slower clients are cut (default 30)',
  },
  'max-connections': {
    env: 'ORCHESTRATOR_MAX_CONNECTIONS',
    value: 'N',
    help: `client connections open at once; more are closed at once (default ${defaultMaxConnections()}: 16384, or the open-files limit less 512 when lower)`,
  },
  'max-connections-per-address': {
    env: 'ORCHESTRATOR_MAX_CONNECTIONS_PER_ADDRESS',
    value: 'N',
    help: 'client connections one address may hold at once; more from it are closed at once (default half of --max-connections, not applied to loopback clients unless given; 0: no limit). Behind a proxy this limits the proxy',
  },
  'body-timeout': {
    env: 'ORCHESTRATOR_BODY_TIMEOUT_SECS',
    value: 'SECS',
    help: 'longest time to receive a request body once its headers are in; a slower body gets 408 and its connection is closed (default 10; 0: only --request-timeout)',
  },
  'keep-alive-timeout': {
    env: 'ORCHESTRATOR_KEEP_ALIVE_TIMEOUT_SECS',
    value: 'SECS',
    help: "how long an idle client connection is kept open (default 65: longer than a load balancer's 60 s idle timeout)",
  },
  'shutdown-grace': {
    env: 'ORCHESTRATOR_SHUTDOWN_GRACE_SECS',
    value: 'SECS',
    help: 'after SIGTERM, how long requests and streams in flight may take to finish (default 30)',
  },
  'window-max-bytes': {
    env: 'ORCHESTRATOR_WINDOW_MAX_BYTES',
    value: 'BYTES',
    help: 'bytes the in-memory answer window keeps at most (default 268435456, 256 MiB)',
  },
  'in-flight-max-bytes': {
    env: 'ORCHESTRATOR_IN_FLIGHT_MAX_BYTES',
    value: 'BYTES',
    help: 'bytes the streams in flight on this replica keep of their start together, for late joiners here and the window; past it the stream that grows lets its copy go: every caller already on it (here, and followers on other replicas or workers) still gets it to the end, but a later identical request here is not joined to that copy (it follows the call through Redis or the primary while they hold its start, else gets a 503 to retry, or calls alone) and the answer is not kept (default 4194304, 4 MiB: some 40 streams of 100 KB)',
  },
  redis: {
    env: 'ORCHESTRATOR_REDIS_URL',
    value: 'URL',
    help: 'share calls in flight, breakers, the answer window, rate limits and spend with other replicas through Redis: redis:// or rediss:// (TLS) to a single node or any node of a Redis Cluster (found by itself), or redis+sentinel://host:26379[,host:port...]/master-name for Sentinel (docs/scaling.md)',
  },
  'redis-ca': {
    env: 'ORCHESTRATOR_REDIS_CA',
    value: 'FILE',
    help: "PEM file of the certificate authorities that sign Redis's TLS certificate (turns TLS on; default: the system's)",
  },
  'redis-cert': {
    env: 'ORCHESTRATOR_REDIS_CERT',
    value: 'FILE',
    help: 'PEM file of the client certificate shown to Redis over TLS (with --redis-key)',
  },
  'redis-key': {
    env: 'ORCHESTRATOR_REDIS_KEY',
    value: 'FILE',
    help: 'PEM file of the private key of --redis-cert',
  },
  'redis-prefix': {
    env: 'ORCHESTRATOR_REDIS_PREFIX',
    value: 'NAME',
    help: 'namespace of every Redis key and channel (default npo); replicas that share calls share it',
  },
  'redis-timeout': {
    env: 'ORCHESTRATOR_REDIS_TIMEOUT_SECS',
    value: 'SECS',
    help: 'longest one Redis operation may take; slower is a miss, and Redis is skipped until it answers; Redis is also probed this often (default 0.5)',
  },
  'limits-without-redis': {
    env: 'ORCHESTRATOR_LIMITS_WITHOUT_REDIS',
    value: 'MODE',
    help: 'with --redis, while Redis is unusable, rate limits and spend caps are: share (each replica enforces its share: limit / processes seen in the last minute), closed (requests they apply to are refused with 503 limits_unavailable and Retry-After), or open (each replica applies the whole limit alone: the fleet may admit replicas x limit) (default share; docs/scaling.md)',
  },
  'gateway-keys': {
    env: 'ORCHESTRATOR_GATEWAY_KEYS',
    value: 'K1,K2',
    help: 'keys clients must present; the provider key then comes from the environment',
  },
  'session-secret': {
    env: 'ORCHESTRATOR_SESSION_SECRET',
    value: 'SECRET',
    help: `signs status page sessions; at least ${MIN_SESSION_SECRET} characters, the same on every replica (default: random per start, shared through --redis when given); nothing in the keys file is used`,
  },
  cors: {
    env: 'ORCHESTRATOR_CORS_ORIGINS',
    value: 'ORIGINS',
    help: 'let browser apps from these origins call the gateway: a comma list, or * for any (default: off)',
  },
  ...BUDGET_FLAGS,
  'metrics-path': {
    env: 'ORCHESTRATOR_METRICS_PATH',
    value: 'PATH',
    help: "route of the Prometheus metrics (default /orchestrator/metrics; /metrics is llama-server's own, relayed)",
  },
  'no-metrics': { env: 'ORCHESTRATOR_NO_METRICS', boolean: true, help: 'serve no Prometheus metrics' },
  'metrics-tenants': {
    env: 'ORCHESTRATOR_METRICS_TENANTS',
    boolean: true,
    help: 'label token and money counters with a hashed tenant too (at most 50 tenants per port, then "other")',
  },
  'log-level': {
    env: 'ORCHESTRATOR_LOG_LEVEL',
    value: 'LEVEL',
    help: 'fatal | error | warn | info | debug | trace | silent (default info)',
  },
  'log-format': {
    env: 'ORCHESTRATOR_LOG_FORMAT',
    value: 'FORMAT',
    help: 'json | pretty (default: pretty when stdout is a terminal, else json)',
  },
  'no-request-log': { env: 'ORCHESTRATOR_NO_REQUEST_LOG', boolean: true, help: 'no log line per request' },
  'log-prompts': {
    env: 'ORCHESTRATOR_LOG_PROMPTS',
    boolean: true,
    help: 'put request bodies (prompts) in the request lines; off by default, they may hold private data',
  },
  'status-path': {
    env: 'ORCHESTRATOR_STATUS_PATH',
    value: 'PATH',
    help: 'route of the live status page (default /orchestrator)',
  },
  'no-status-page': { env: 'ORCHESTRATOR_NO_STATUS_PAGE', boolean: true, help: 'serve no status page' },
  'status-public': {
    env: 'ORCHESTRATOR_STATUS_PUBLIC',
    boolean: true,
    help: 'show the status page without a sign-in even when listening beyond loopback (default: beyond loopback it needs a gateway key or an admin key)',
  },
  'ready-requires-store': {
    env: 'ORCHESTRATOR_READY_REQUIRES_STORE',
    boolean: true,
    help: 'with --redis: /health/ready fails while Redis is unusable, whatever the cause (unreachable, frozen, auth, TLS, cross-slot or topology errors, out of memory) (default: ready, answering from memory)',
  },
  'otlp-endpoint': {
    env: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    value: 'URL',
    help: 'send OpenTelemetry traces (OTLP/HTTP JSON) to this collector, e.g. http://127.0.0.1:4318 (/v1/traces is added); OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is taken as it is; OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off (default off)',
  },
  help: { boolean: true, help: 'show this help' },
};

export function helpText(): string {
  const lines = [
    'nest-prompt-orchestrator gateway: an OpenAI / Anthropic / llama.cpp proxy with request deduplication,',
    'circuit breaking, concurrency limits and timeouts. Clients change only their base URL.',
    '',
    'Usage: npm start -- [options]',
    '       e.g. npm start -- --provider llama --upstream http://127.0.0.1:8080 --port 18080',
    '',
    'Options (each also read from the environment variable shown):',
  ];
  for (const [name, spec] of Object.entries(FLAGS)) {
    const flag = `--${name}${spec.value ? ` ${spec.value}` : ''}`;
    const env = typeof spec.env === 'string' ? ` [${spec.env}]` : '';
    lines.push(`  ${flag.padEnd(26)} ${spec.help}${env}`);
  }
  lines.push(
    '',
    'Provider keys come from OPENAI_API_KEY, ANTHROPIC_API_KEY or LLAMA_API_KEY; without one, the',
    "client's own key is passed through. --upstreams-file may give each upstream a key of its own",
    '(apiKeyEnv: the variable that holds it). Keys are never logged.',
    '',
    'Virtual keys (--keys-file or ORCHESTRATOR_KEYS), rate limits, spend caps, the request log and',
    '`npm run audit`: see docs/operations.md, "Budgets and keys".',
    '',
    'CORS is off unless --cors is given (llama-server itself allows any origin by default; the gateway',
    'may hold a paid provider key, so browsers are let in only when asked). With --cors, preflights are',
    'answered before any key check, and x-orchestrator-dedup, Retry-After and x-request-id are exposed.',
  );
  return lines.join('\n');
}

export { ConfigError } from '../common/config-error.js';

/** Parses flags and environment; throws `ConfigError` naming the first bad value. Returns `undefined` for --help. */
export function parseGatewayConfig(argv: string[], env: NodeJS.ProcessEnv): GatewayConfig | undefined {
  let values: Record<string, string | string[] | boolean | undefined>;
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
  if (redisUrl !== undefined) {
    // A Sentinel URL lists several hosts, which URL cannot parse; nothing of it is echoed (it may hold a password).
    try {
      if (!parseSentinelUrl(redisUrl)) parseRedisUrl(redisUrl);
    } catch (error) {
      throw new ConfigError((error as Error).message);
    }
  }
  const redisTls = readRedisTls(raw, redisUrl);
  const redisPrefixRaw = raw('redis-prefix');
  if (redisPrefixRaw !== undefined && /[{}]/.test(redisPrefixRaw)) {
    throw new ConfigError(
      '--redis-prefix must not hold { or }: they would decide which Redis Cluster slot a key is in',
    );
  }
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

function parseObservability(
  raw: (name: string) => string | undefined,
  flag: (name: string) => boolean,
  env: NodeJS.ProcessEnv,
): ObservabilityConfig {
  const logLevel = raw('log-level') ?? 'info';
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(logLevel)) {
    throw new ConfigError(`--log-level must be fatal, error, warn, info, debug, trace or silent, got "${logLevel}"`);
  }
  const format = raw('log-format') ?? (process.stdout.isTTY ? 'pretty' : 'json');
  if (format !== 'json' && format !== 'pretty')
    throw new ConfigError(`--log-format must be json or pretty, got "${format}"`);
  const metricsPath = flag('no-metrics')
    ? undefined
    : parseRoutePath('metrics-path', raw('metrics-path') ?? '/orchestrator/metrics');
  const statusPath = flag('no-status-page')
    ? undefined
    : parseRoutePath('status-path', raw('status-path') ?? '/orchestrator');
  if (
    metricsPath !== undefined &&
    statusPath !== undefined &&
    [statusPath, `${statusPath}/events`, `${statusPath}/login`].includes(metricsPath)
  ) {
    throw new ConfigError(`--metrics-path ${metricsPath} is a route of the status page; choose another`);
  }
  return {
    metricsPath,
    metricsTenants: flag('metrics-tenants'),
    logLevel,
    logFormat: format,
    requestLog: !flag('no-request-log'),
    logPrompts: flag('log-prompts'),
    statusPath,
    statusPublic: flag('status-public'),
    readyRequiresStore: flag('ready-requires-store'),
    otlpTracesUrl: parseOtlpTraces(raw('otlp-endpoint'), env),
    serviceName: env.OTEL_SERVICE_NAME || 'nest-prompt-orchestrator-gateway',
  };
}

/**
 * The OTLP/HTTP traces URL, as the OpenTelemetry specification reads its
 * variables: the flag (or OTEL_EXPORTER_OTLP_ENDPOINT) is a base URL that
 * gets `/v1/traces`, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is the whole URL (it
 * wins over the base variable, not over the flag).
 */
function parseOtlpTraces(base: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  if (isTrue(env.OTEL_SDK_DISABLED) || env.OTEL_TRACES_EXPORTER?.trim() === 'none') return undefined;
  const fromFlag = base !== undefined && base !== env.OTEL_EXPORTER_OTLP_ENDPOINT;
  const trimmed = base?.replace(/\/+$/, '');
  const withPath = trimmed && (trimmed.endsWith('/v1/traces') ? trimmed : `${trimmed}/v1/traces`);
  const url = fromFlag || !env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ? withPath : env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  if (url === undefined || url === '') return undefined;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError(`--otlp-endpoint must be an http(s) URL, got "${url.slice(0, 200)}"`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
    throw new ConfigError(`--otlp-endpoint must be an http(s) URL, got "${url.slice(0, 200)}"`);
  return parsed.href;
}

/** A route of the gateway's own: `/` and letters, digits, `-`, `_`, `.` only; no trailing slash. */
function parseRoutePath(name: string, raw: string): string {
  if (!/^(\/[\w.-]+)+$/.test(raw))
    throw new ConfigError(`--${name} must look like /orchestrator/metrics, got "${raw}"`);
  if (/^\/(v1|health)(\/|$)/.test(raw))
    throw new ConfigError(`--${name} must not be under /v1 or /health (the gateway's own routes), got "${raw}"`);
  return raw;
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

/** A flag given any number of times, else its environment variable as a comma list. */
function readList(
  values: Record<string, string | string[] | boolean | undefined>,
  env: NodeJS.ProcessEnv,
  name: string,
  provider: ProviderKind,
): string[] {
  const flag = values[name];
  if (Array.isArray(flag)) return flag;
  const fromEnv = readString({}, env, name, provider);
  return (fromEnv ?? '')
    .split(',')
    .map((url) => url.trim())
    .filter(Boolean);
}

function readString(
  values: Record<string, string | string[] | boolean | undefined>,
  env: NodeJS.ProcessEnv,
  name: string,
  provider: ProviderKind = 'openai',
): string | undefined {
  const flag = values[name];
  if (typeof flag === 'string') return flag;
  const spec = FLAGS[name].env;
  const envName = typeof spec === 'function' ? spec(provider) : spec;
  const fromEnv = envName ? env[envName] : undefined;
  return fromEnv === '' ? undefined : fromEnv;
}

function parseNumber(name: string, raw: string | undefined, fallback: number, min: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n)) throw new ConfigError(`--${name} must be a number, got "${raw}"`);
  if (n < min) throw new ConfigError(`--${name} must be at least ${min}, got ${raw}`);
  return n;
}

/** A redis:// or rediss:// URL; the message never repeats it (it may hold a password). */
function parseRedisUrl(raw: string): void {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error('--redis must be a redis://, rediss:// or redis+sentinel:// URL');
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    throw new Error(`--redis must use redis:, rediss: or redis+sentinel:, got "${url.protocol}"`);
  }
}

/** `--redis-ca`, `--redis-cert`, `--redis-key`, read now: a missing or unreadable file stops the start, naming its flag. */
function readRedisTls(
  raw: (name: string) => string | undefined,
  redisUrl: string | undefined,
): GatewayConfig['redisTls'] {
  const read = (flag: 'redis-ca' | 'redis-cert' | 'redis-key') => {
    const path = raw(flag);
    if (path === undefined) return undefined;
    if (redisUrl === undefined) throw new ConfigError(`--${flag} needs --redis`);
    try {
      return readFileSync(path);
    } catch (error) {
      throw new ConfigError(`--${flag} ${path}: cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
    }
  };
  const tls = { ca: read('redis-ca'), cert: read('redis-cert'), key: read('redis-key') };
  if ((tls.cert === undefined) !== (tls.key === undefined))
    throw new ConfigError('--redis-cert and --redis-key go together');
  return tls.ca || tls.cert ? tls : undefined;
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

function isTrue(value: string | undefined): boolean {
  return value !== undefined && ['1', 'true', 'yes', 'on'].includes(value.toLowerCase());
}

/**
 * Client connections the gateway keeps open by default: enough for a herd of 10,000 callers at once (each on its
 * own connection), and never more than the process may open files (the upstream's connections and the logs need
 * some too): past that, accept would fail instead of closing the extra connections cleanly.
 */
export function defaultMaxConnections(): number {
  const wanted = 16_384;
  try {
    const soft = /^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'))?.[1];
    return soft === undefined ? wanted : Math.max(256, Math.min(wanted, Number(soft) - 512));
  } catch {
    return wanted;
  }
}

function parseLimitsWithoutRedis(value: string | undefined): LimitsWithoutRedis {
  if (value === undefined) return 'share';
  if (value === 'open' || value === 'closed' || value === 'share') return value;
  throw new ConfigError(`--limits-without-redis must be share, closed or open, got "${value}"`);
}
