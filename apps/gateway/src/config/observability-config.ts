import { ConfigError } from '../common/config-error.js';
import { isTrue } from './flag-values.js';

export type LogFormat = 'json' | 'pretty';

/** Metrics, logs, readiness, the status page and tracing. */
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

/** Observability settings from their flags (`raw`: a flag's text; `flag`: whether a boolean flag is on). */
export function parseObservability(
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
