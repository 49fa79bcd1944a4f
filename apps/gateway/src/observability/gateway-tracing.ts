import type { OnApplicationShutdown } from '@nestjs/common';
import { RequestTracing, TRACE_ATTRIBUTES, type SpanAttributes } from 'nest-prompt-orchestrator';
import type { GatewayConfig, ProviderKind } from '../config/gateway-config.js';
import type { GatewayRoute } from '../providers/provider.js';
import { everyMember } from '../upstreams/upstream-set.js';
import type { UpstreamsFile } from '../upstreams/upstreams-file.js';

/** `gen_ai.system` of each provider kind (the OpenTelemetry GenAI conventions' names where they have one). */
const GEN_AI_SYSTEM: Record<ProviderKind, string> = { openai: 'openai', anthropic: 'anthropic', llama: 'llama.cpp' };

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
export class GatewayTracing implements OnApplicationShutdown {
  private constructor(
    /** What request paths start their spans with (undefined: tracing off). */
    readonly tracing: RequestTracing | undefined,
    private readonly provider?: { forceFlush(): Promise<void>; shutdown(): Promise<void> },
    /** Each upstream's address, by name (what its attempts' spans say). */
    private readonly addresses = new Map<string, URL>(),
  ) {}

  /** The upstreams file was reloaded: the addresses of its upstreams from now on. */
  noteUpstreams(file: UpstreamsFile): void {
    if (!this.tracing) return;
    this.addresses.clear();
    for (const m of everyMember({ upstreams: [], upstreamsFile: file })) this.addresses.set(m.name, new URL(m.target.url));
  }

  static async create(config: GatewayConfig): Promise<GatewayTracing> {
    const url = config.observability.otlpTracesUrl;
    if (!url) return new GatewayTracing(undefined);
    const [api, sdk, exporter, resources] = await Promise.all([
      import('@opentelemetry/api'),
      import('@opentelemetry/sdk-trace-base'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
    ]);
    const provider = new sdk.BasicTracerProvider({
      resource: resources.resourceFromAttributes({ 'service.name': config.observability.serviceName }),
      // Batched off the request path; the exporter's own OTEL_EXPORTER_OTLP_HEADERS / _TIMEOUT still apply.
      spanProcessors: [new sdk.BatchSpanProcessor(new exporter.OTLPTraceExporter({ url }))],
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
          [TRACE_ATTRIBUTES.genAiSystem]: GEN_AI_SYSTEM[config.provider],
          'server.address': upstream.hostname,
          'server.port': Number(upstream.port) || (upstream.protocol === 'https:' ? 443 : 80),
        };
      },
    });
    return new GatewayTracing(tracing, provider, addresses);
  }

  /** The attributes a request's server span starts with: what the route is and which model system answers it. */
  static requestAttributes(config: GatewayConfig, route: GatewayRoute | undefined, method: string, path: string): SpanAttributes {
    const operation = route && OPERATION[route];
    return {
      'http.request.method': method,
      'url.path': path,
      [TRACE_ATTRIBUTES.genAiSystem]: operation ? GEN_AI_SYSTEM[config.provider] : undefined,
      [TRACE_ATTRIBUTES.genAiOperation]: operation,
    };
  }

  /** Sends the spans still batched (tests, and a stop). */
  async flush(): Promise<void> {
    await this.provider?.forceFlush();
  }

  /** The spans of the last requests go out before the process ends. */
  async onApplicationShutdown(): Promise<void> {
    await this.provider?.shutdown().catch(() => undefined);
  }
}
