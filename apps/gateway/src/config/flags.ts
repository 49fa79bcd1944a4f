import { readFileSync } from 'node:fs';
import type { ProviderKind } from '../common/apis.js';
import { BUDGET_FLAGS } from './budget-flags.js';
import type { FlagSpec, FlagValues } from './flag-values.js';

/**
 * The gateway's command line: every flag with its environment variable and its `--help` line, declared once, and how
 * a flag's text is found (the flag, else its variable).
 */

const UPSTREAM_ENV: Record<ProviderKind, string> = {
  openai: 'OPENAI_BASE_URL',
  llama: 'LLAMA_CPP_URL',
  anthropic: 'ANTHROPIC_BASE_URL',
};
export const DEFAULT_UPSTREAM: Record<ProviderKind, string> = {
  openai: 'https://api.openai.com/v1',
  llama: 'http://127.0.0.1:8080',
  anthropic: 'https://api.anthropic.com',
};
export const PROVIDER_KEY_ENV: Record<ProviderKind, string> = {
  openai: 'OPENAI_API_KEY',
  llama: 'LLAMA_API_KEY',
  anthropic: 'ANTHROPIC_API_KEY',
};

/** Shortest `--session-secret` accepted: a short one could be guessed offline from one cookie. */
export const MIN_SESSION_SECRET = 32;

export const FLAGS: Record<string, FlagSpec> = {
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

/** The text of `--help`: every flag with its variable, in the table's order, then notes. */
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

/** A flag given any number of times, else its environment variable as a comma list. */
export function readList(values: FlagValues, env: NodeJS.ProcessEnv, name: string, provider: ProviderKind): string[] {
  const flag = values[name];
  if (Array.isArray(flag)) return flag;
  const fromEnv = readString({}, env, name, provider);
  return (fromEnv ?? '')
    .split(',')
    .map((url) => url.trim())
    .filter(Boolean);
}

/** A flag's text: the flag, else its environment variable (set but empty: not given). */
export function readString(
  values: FlagValues,
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
