import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import { RequestTracing, TRACE_ATTRIBUTES, type RequestSpan, type SpanAttributes } from 'nest-prompt-orchestrator/core';
import type { Usage } from '../budgets/prices.js';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import * as promClient from 'prom-client';
import type { Registry } from 'prom-client';
import type { GatewayConfig, ProviderKind } from '../config/gateway-config.js';
import type { GatewayRoute } from '../providers/provider.js';
import { everyMember } from '../upstreams/upstream-set.js';
import type { UpstreamsFile } from '../config/upstreams-file.js';

/** `gen_ai.provider.name` of each provider kind (the OpenTelemetry GenAI conventions' names where they have one). */
const GEN_AI_PROVIDER: Record<ProviderKind, string> = { openai: 'openai', anthropic: 'anthropic', llama: 'llama.cpp' };

/** `gen_ai.operation.name` of the routes that call a model. */
const OPERATION: Partial<Record<GatewayRoute, string>> = {
  chat: 'chat',
  responses: 'chat',
  messages: 'chat',
  completions: 'text_completion',
  completion: 'text_completion',
  infill: 'text_completion',
  embeddings: 'embeddings',
  embedding: 'embeddings',
};

/**
 * The gateway's OpenTelemetry export: with `--otlp-endpoint` (or the standard
 * OTEL_EXPORTER_OTLP_* variables) an SDK tracer provider batching spans to an
 * OTLP/HTTP collector, and the plugin's `RequestTracing` on it. Off by default:
 * then the SDK is never loaded and `tracing` is undefined.
 */
export class GatewayTracing {
  private constructor(
    /** What request paths start their spans with (undefined: tracing off). */
    readonly tracing: RequestTracing | undefined,
    private readonly provider?: { forceFlush(): Promise<void>; shutdown(): Promise<void> },
    /** Each upstream's address, by name (what its attempts' spans say). */
    private readonly addresses = new Map<string, URL>(),
    /** How the exports to the collector fare (absent: tracing off). */
    readonly exports?: ExportWatch,
  ) {}

  /** `gateway_trace_export_failures_total` in the gateway's metrics (with tracing on). */
  registerMetrics(registry: Registry): void {
    const exports = this.exports;
    if (!exports) return;
    new promClient.Counter({
      name: 'gateway_trace_export_failures_total',
      help: 'Exports of spans to the OTLP collector that failed (the spans of a failed export are lost).',
      registers: [registry],
      collect() {
        this.reset();
        this.inc(exports.failures);
      },
    });
  }

  /** The upstreams file was reloaded: the addresses of its upstreams from now on. */
  noteUpstreams(file: UpstreamsFile): void {
    if (!this.tracing) return;
    this.addresses.clear();
    for (const m of everyMember({ upstreams: [], upstreamsFile: file }))
      this.addresses.set(m.name, new URL(m.target.url));
  }

  static async create(config: GatewayConfig, logger?: Logger): Promise<GatewayTracing> {
    const url = config.observability.otlpTracesUrl;
    if (!url) return new GatewayTracing(undefined);
    const [api, sdk, exporter, resources] = await Promise.all([
      import('@opentelemetry/api'),
      import('@opentelemetry/sdk-trace-base'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
    ]);
    // The gateway's own defaults, then what the environment says (OTEL_RESOURCE_ATTRIBUTES, then OTEL_SERVICE_NAME)
    // over them; a fresh `service.instance.id` per gateway tells replicas (and cluster workers) apart.
    const resource = resources
      .resourceFromAttributes({
        'service.name': config.observability.serviceName,
        'service.version': gatewayVersion(),
        'service.instance.id': randomUUID(),
      })
      .merge(resources.detectResources({ detectors: [resources.envDetector] }));
    const exports = new ExportWatch(url, logger);
    const provider = new sdk.BasicTracerProvider({
      resource,
      // Batched off the request path; the exporter's own OTEL_EXPORTER_OTLP_HEADERS / _TIMEOUT still apply.
      spanProcessors: [new sdk.BatchSpanProcessor(exports.wrap(new exporter.OTLPTraceExporter({ url })))],
    });
    // Attempts are named by the pool member they go to (its breaker's name): each has its own address.
    const addresses = new Map(everyMember(config).map((m) => [m.name, new URL(m.target.url)]));
    const first = new URL(config.upstream);
    const tracing = new RequestTracing(api, {
      tracerProvider: provider,
      tracerName: 'nest-prompt-orchestrator-gateway',
      upstreamAttributes: (name) => {
        const upstream = addresses.get(name) ?? first;
        return {
          [TRACE_ATTRIBUTES.genAiProviderName]: GEN_AI_PROVIDER[config.provider],
          'server.address': upstream.hostname,
          'server.port': Number(upstream.port) || (upstream.protocol === 'https:' ? 443 : 80),
        };
      },
    });
    return new GatewayTracing(tracing, provider, addresses, exports);
  }

  /** The attributes a request's server span starts with: what the route is and which model system answers it. */
  static requestAttributes(
    config: GatewayConfig,
    route: GatewayRoute | undefined,
    method: string,
    path: string,
  ): SpanAttributes {
    const operation = route && OPERATION[route];
    return {
      'http.request.method': method,
      'url.path': path,
      [TRACE_ATTRIBUTES.genAiProviderName]: operation ? GEN_AI_PROVIDER[config.provider] : undefined,
      [TRACE_ATTRIBUTES.genAiOperation]: operation,
    };
  }

  /**
   * What an answer says of itself on the client span of the call that got it: `gen_ai.response.id`, `.model`,
   * `.finish_reasons` (OpenAI's `choices[].finish_reason`, Anthropic's `stop_reason`, llama.cpp's `stop_type`).
   */
  static responseAttributes(answer: unknown): SpanAttributes {
    if (typeof answer !== 'object' || answer === null || Array.isArray(answer)) return {};
    const a = answer as {
      id?: unknown;
      model?: unknown;
      choices?: unknown;
      stop_reason?: unknown;
      stop_type?: unknown;
    };
    const reasons: string[] = [];
    if (Array.isArray(a.choices)) {
      for (const choice of a.choices.slice(0, 16)) {
        const reason = (choice as { finish_reason?: unknown } | null)?.finish_reason;
        if (typeof reason === 'string') reasons.push(reason.slice(0, 64));
      }
    }
    const single =
      typeof a.stop_reason === 'string' ? a.stop_reason : typeof a.stop_type === 'string' ? a.stop_type : undefined;
    if (single !== undefined) reasons.push(single.slice(0, 64));
    return {
      [TRACE_ATTRIBUTES.genAiResponseId]: typeof a.id === 'string' ? a.id.slice(0, 200) : undefined,
      [TRACE_ATTRIBUTES.genAiResponseModel]: typeof a.model === 'string' ? a.model.slice(0, 200) : undefined,
      [TRACE_ATTRIBUTES.genAiResponseFinishReasons]: reasons.length > 0 ? reasons : undefined,
    };
  }

  /** The usage the provider reported, on the client span of the call it billed (never on the server span). */
  static recordUsage(span: RequestSpan, usage: Usage): void {
    span.setUpstreamAttributes({
      [TRACE_ATTRIBUTES.genAiInputTokens]: usage.input,
      [TRACE_ATTRIBUTES.genAiOutputTokens]: usage.output,
    });
  }

  /** Sends the spans still batched (tests, and a stop); a failed export is counted and logged, not thrown. */
  async flush(): Promise<void> {
    await this.provider?.forceFlush().catch(() => undefined);
  }

  /** The spans of the last requests go out before the process ends. */
  async close(): Promise<void> {
    await this.provider?.shutdown().catch(() => undefined);
  }
}

/**
 * Counts the exports that fail and says so in the log once per outage (and
 * once when the collector takes spans again): the SDK itself drops them
 * without a word.
 */
export class ExportWatch {
  /** Exports that failed since the start. */
  failures = 0;
  /** Exports that failed since the last one that went through (0: no outage). */
  private failing = 0;

  constructor(
    private readonly url: string,
    private readonly logger?: Pick<Logger, 'warn' | 'info'>,
  ) {}

  /** The exporter, reporting each export's result here. */
  wrap(exporter: SpanExporter): SpanExporter {
    return {
      export: (spans, done) =>
        exporter.export(spans, (result) => {
          // 0 is ExportResultCode.SUCCESS, from @opentelemetry/core, which this package does not depend on directly.
          // eslint-disable-next-line @typescript-eslint/no-unsafe-enum-comparison
          this.exported(result.code === 0, spans.length, result.error);
          done(result);
        }),
      shutdown: () => exporter.shutdown(),
      forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve(),
    };
  }

  exported(ok: boolean, spans: number, error?: Error): void {
    if (ok) {
      if (this.failing > 0) {
        this.logger?.info({ context: 'Tracing', failedExports: this.failing }, `trace export to ${this.url} is back`);
      }
      this.failing = 0;
      return;
    }
    this.failures++;
    if (this.failing++ === 0) {
      const reason = error?.message?.slice(0, 200) ?? 'unknown error';
      this.logger?.warn(
        { context: 'Tracing', spans },
        `trace export to ${this.url} failed (${reason}): spans are dropped until the collector takes them again`,
      );
    }
  }
}

/** The gateway's version (`service.version`): its package's, read once when tracing starts. */
function gatewayVersion(): string {
  // The package file sits a few folders up from this module, in the sources as in the build and its bundle.
  for (const up of [
    '../../../package.json',
    '../../../../package.json',
    '../../../../../package.json',
    '../../package.json',
  ]) {
    try {
      const manifest = JSON.parse(readFileSync(new URL(up, import.meta.url), 'utf8')) as {
        name?: unknown;
        version?: unknown;
      };
      if (
        typeof manifest.version === 'string' &&
        typeof manifest.name === 'string' &&
        manifest.name.startsWith('nest-prompt-orchestrator')
      )
        return manifest.version;
    } catch {
      // Not there: one folder further up.
    }
  }
  return 'unknown';
}

const STREAM_ID = /"id":\s*"([^"\\]{1,200})"/;
const STREAM_MODEL = /"model":\s*"([^"\\]{1,200})"/;
const STREAM_REASON = /"(?:finish_reason|stop_reason|stop_type)":\s*"([^"\\]{1,64})"/g;
const REASON_MARKS = ['_reason"', '"stop_type"'];
/** The first pieces of a stream are looked at for its id and model; later ones only for its end. */
const HEAD_PIECES = 3;
const MAX_REASONS = 16;

/**
 * What an event stream says of its answer, read as it passes (only for a
 * recorded span): the id and model of its first events, and the finish
 * reasons of its last ones (OpenAI's `finish_reason`, Anthropic's
 * `stop_reason`, llama.cpp's `stop_type`). A piece without a reason in it
 * is searched as bytes, never decoded.
 */
export class StreamFacts {
  private id?: string;
  private model?: string;
  private readonly reasons: string[] = [];
  private pieces = 0;

  read(bytes: Buffer): void {
    if (this.pieces++ < HEAD_PIECES && (this.id === undefined || this.model === undefined)) {
      const head = bytes.toString('utf8', 0, Math.min(bytes.length, 4096));
      this.id ??= STREAM_ID.exec(head)?.[1];
      this.model ??= STREAM_MODEL.exec(head)?.[1];
    }
    if (this.reasons.length >= MAX_REASONS || !REASON_MARKS.some((mark) => bytes.includes(mark))) return;
    for (const match of bytes.toString('utf8').matchAll(STREAM_REASON))
      if (this.reasons.length < MAX_REASONS) this.reasons.push(match[1]);
  }

  attributes(): SpanAttributes {
    return {
      [TRACE_ATTRIBUTES.genAiResponseId]: this.id,
      [TRACE_ATTRIBUTES.genAiResponseModel]: this.model,
      [TRACE_ATTRIBUTES.genAiResponseFinishReasons]: this.reasons.length > 0 ? [...this.reasons] : undefined,
    };
  }
}
