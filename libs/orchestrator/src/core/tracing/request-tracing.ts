import type * as Otel from '@opentelemetry/api';
import type { BreakerState } from '../breaker/circuit-breaker.js';
import type { RequestOutcome, UpstreamResult } from '../observer.js';
import { OrchestratorConfigError } from '../options.js';
import { formatTraceParent, parseTraceParent } from './traceparent.js';

/** A value OpenTelemetry keeps as a span attribute (`undefined` entries are skipped). */
export type SpanAttributeValue = string | number | boolean | string[];
export type SpanAttributes = Record<string, SpanAttributeValue | undefined>;

/** Request headers as Node gives them (lower-case names). */
export type TraceHeaders = Record<string, string | string[] | undefined>;

/** How a call to the upstream ended, as its client span records it. */
export type UpstreamSpanResult = UpstreamResult | 'cancelled';

/**
 * Attribute names the orchestrator writes: the OpenTelemetry GenAI semantic
 * conventions for what the model call is, and `orchestrator.*` for what the
 * orchestrator did with the request. Use them for attributes of your own too,
 * so that dashboards find one name.
 */
export const TRACE_ATTRIBUTES = {
  /** Who serves the model (`openai`, `anthropic`, ...): the conventions' successor of `gen_ai.system`. */
  genAiProviderName: 'gen_ai.provider.name',
  /** @deprecated The GenAI conventions replaced it with `gen_ai.provider.name` (`genAiProviderName`). */
  genAiSystem: 'gen_ai.system',
  genAiOperation: 'gen_ai.operation.name',
  genAiRequestModel: 'gen_ai.request.model',
  genAiResponseModel: 'gen_ai.response.model',
  genAiResponseId: 'gen_ai.response.id',
  /** An array of strings: why each choice of the answer ended (`stop`, `length`, `tool_calls`, ...). */
  genAiResponseFinishReasons: 'gen_ai.response.finish_reasons',
  genAiInputTokens: 'gen_ai.usage.input_tokens',
  genAiOutputTokens: 'gen_ai.usage.output_tokens',
  /** `miss` (this request made the call), `joined`, `cached`, or `none` (not deduplicated). */
  dedupOutcome: 'orchestrator.dedup.outcome',
  /** The trace id of the request whose call a joined request waited on (also a span link). */
  dedupLeaderTraceId: 'orchestrator.dedup.leader_trace_id',
  /** Tokens a joined or cached request did not cost (the leader's usage; never counted as `gen_ai.usage.*`). */
  savedInputTokens: 'orchestrator.saved.input_tokens',
  savedOutputTokens: 'orchestrator.saved.output_tokens',
  upstream: 'orchestrator.upstream',
  breakerState: 'orchestrator.breaker.state',
  queueWaitMs: 'orchestrator.queue.wait_ms',
  attempt: 'orchestrator.attempt',
  result: 'orchestrator.upstream.result',
} as const;

const A = TRACE_ATTRIBUTES;

/**
 * One request's server span, as the orchestrator and the request path see it.
 * Obtained from `RequestTracing.startServerSpan`; whoever started it ends it
 * once the response is over. Every method is cheap and never throws.
 */
export interface RequestSpan {
  /** False for a span nobody records (no SDK, or not sampled): callers may skip work that only feeds it. */
  readonly recording: boolean;
  /** This span as a W3C `traceparent` (`''` when not recording): what joiners of its call link to. */
  readonly traceparent: string;
  /** Adds attributes (`undefined` values are skipped). GenAI request attributes are copied onto its client spans. */
  setAttributes(attributes: SpanAttributes): void;
  /** How the orchestrator answered the request, and the state of the breaker it met. */
  setOutcome(outcome: RequestOutcome, upstream: string, breaker?: BreakerState): void;
  /** This request waited on the call of another (`traceparent` of the leader's span, on any replica). */
  link(traceparent: string | undefined): void;
  /** A span around one attempt at the upstream, child of this one (the orchestrator's guarded call starts it). */
  startUpstreamSpan(upstream: string, attributes: SpanAttributes): UpstreamSpan;
  /**
   * Writes the trace context of the attempt in progress (its client span) into the headers of the request to the
   * upstream: `traceparent` and `tracestate`, or the registered propagator's headers. Nothing when no attempt runs.
   */
  injectUpstream(headers: Record<string, string>): void;
  /** Adds attributes to the client span of the attempt in progress (the answer's `gen_ai.response.*`, its usage). */
  setUpstreamAttributes(attributes: SpanAttributes): void;
  /** Ends the span with the response's status (>= 500 marks it failed); later calls do nothing. */
  end(status?: number, errorType?: string): void;
}

/** The client span of one attempt at the upstream. */
export interface UpstreamSpan {
  setAttributes(attributes: SpanAttributes): void;
  /** Ends it (later calls do nothing); an `error` gives `error.type` (its code, else its status, else its name). */
  end(result: UpstreamSpanResult, error?: unknown): void;
}

export interface RequestTracingOptions {
  /**
   * Where spans go: a TracerProvider (anything with `getTracer(name, version)`).
   * Default: the global one, i.e. whatever SDK the app registered; with none,
   * every span is a no-op and costs next to nothing.
   */
  tracerProvider?: { getTracer(name: string, version?: string): unknown };
  /** The instrumentation scope's name. Default `nest-prompt-orchestrator`. */
  tracerName?: string;
  /** Attributes of every client span to an upstream (e.g. `server.address`, `gen_ai.system`), asked once per upstream name. */
  upstreamAttributes?: (upstream: string) => SpanAttributes;
}

const NOOP_UPSTREAM_SPAN: UpstreamSpan = Object.freeze({ setAttributes() {}, end() {} });

/** What a span that nobody records is: shared, allocation-free. */
export const NOOP_REQUEST_SPAN: RequestSpan = Object.freeze({
  recording: false,
  traceparent: '',
  setAttributes() {},
  setOutcome() {},
  link() {},
  startUpstreamSpan: () => NOOP_UPSTREAM_SPAN,
  injectUpstream() {},
  setUpstreamAttributes() {},
  end() {},
});

/**
 * OpenTelemetry traces of requests, without any framework: one server span
 * per request (continuing the caller's `traceparent`), one client span per
 * attempt at the upstream, and a link from every request that joined another's
 * call to that call's leader. Needs `@opentelemetry/api` (an optional peer);
 * the app installs and registers the SDK and exporter it wants.
 *
 * A request path calls `startServerSpan` when a request arrives, passes the
 * span to `Orchestrator.start` as `CallRequest.trace` (which records the dedup
 * outcome, the link and the client span), and calls `end` when the response
 * is over.
 *
 * @example
 * ```ts
 * const tracing = await RequestTracing.create();
 * const orchestrator = new Orchestrator({ tracing });
 * const span = tracing.startServerSpan('POST /v1/chat/completions', request.headers, { 'gen_ai.request.model': body.model });
 * const started = await orchestrator.start(policy, { key, tenant, trace: span }, work);
 * response.once('close', () => span.end(response.statusCode));
 * ```
 */
export class RequestTracing {
  private readonly backend: Backend;

  /** Loads `@opentelemetry/api` (an optional peer dependency of this package). */
  static async create(options: RequestTracingOptions = {}): Promise<RequestTracing> {
    let api: { default?: unknown };
    try {
      api = await import('@opentelemetry/api');
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') {
        throw new OrchestratorConfigError(
          'tracing needs the package "@opentelemetry/api": npm install @opentelemetry/api',
        );
      }
      throw error;
    }
    return new RequestTracing(
      api.default && typeof api.default === 'object' ? { ...api, ...api.default } : api,
      options,
    );
  }

  /** `api` is the `@opentelemetry/api` module (typed loosely so that apps without it still compile against this package). */
  constructor(api: object, options: RequestTracingOptions = {}) {
    this.backend = new Backend(api as typeof Otel, options);
  }

  /**
   * Starts the server span of a request that just arrived: a child of the
   * caller's span when its headers carry one (the registered propagator's
   * format, else W3C `traceparent`), else a new trace.
   */
  startServerSpan(name: string, headers: TraceHeaders, attributes?: SpanAttributes): RequestSpan {
    const { api, tracer } = this.backend;
    if (!this.backend.live()) return NOOP_REQUEST_SPAN;
    const span = tracer.startSpan(
      name,
      { kind: api.SpanKind.SERVER, attributes: clean(attributes) },
      this.backend.parentOf(headers),
    );
    if (!span.isRecording()) return NOOP_REQUEST_SPAN;
    return new TracedRequest(this.backend, span, attributes);
  }
}

/** The OpenTelemetry side of `RequestTracing` (kept out of its public type: the API package is optional). */
class Backend {
  readonly tracer: Otel.Tracer;
  private readonly upstreamAttributes?: (upstream: string) => SpanAttributes;
  private readonly upstreams = new Map<string, Otel.Attributes>();
  private readonly name: string;
  /** The API's global provider while no SDK has registered behind it (then every span would be a no-op). */
  private proxy?: Otel.ProxyTracerProvider;

  constructor(
    readonly api: typeof Otel,
    options: RequestTracingOptions,
  ) {
    const provider = (options.tracerProvider as Otel.TracerProvider | undefined) ?? api.trace.getTracerProvider();
    this.name = options.tracerName ?? 'nest-prompt-orchestrator';
    this.tracer = provider.getTracer(this.name);
    if (provider instanceof api.ProxyTracerProvider) this.proxy = provider;
    this.upstreamAttributes = options.upstreamAttributes;
  }

  /**
   * Whether spans can be recorded at all: without an SDK behind the global
   * provider, a request is not even parsed for its parent (a no-op span with a
   * remote parent still costs several microseconds). Once an SDK registers,
   * it stays: the check is then never made again.
   */
  live(): boolean {
    if (!this.proxy) return true;
    if (this.proxy.getDelegateTracer(this.name) === undefined) return false;
    this.proxy = undefined;
    return true;
  }

  parentOf(headers: TraceHeaders): Otel.Context {
    const api = this.api;
    const extracted = api.propagation.extract(api.ROOT_CONTEXT, headers, api.defaultTextMapGetter);
    if (api.trace.getSpanContext(extracted)) return extracted;
    // No propagator registered (the API's default is a no-op): W3C trace context, read here.
    const parent = parseTraceParent(headers.traceparent);
    if (!parent) return api.ROOT_CONTEXT;
    const state = headers.tracestate;
    return api.trace.setSpanContext(api.ROOT_CONTEXT, {
      ...parent,
      isRemote: true,
      traceState: typeof state === 'string' && state.length <= 512 ? api.createTraceState(state) : undefined,
    });
  }

  /**
   * The context of `span` in outgoing headers: through the registered propagator, else as W3C trace context
   * (the API's default propagator writes nothing).
   */
  inject(span: Otel.Span, headers: Record<string, string>): void {
    const api = this.api;
    api.propagation.inject(api.trace.setSpan(api.ROOT_CONTEXT, span), headers, api.defaultTextMapSetter);
    if (headers.traceparent !== undefined) return;
    const context = span.spanContext();
    headers.traceparent = formatTraceParent(context);
    const state = context.traceState?.serialize();
    if (state) headers.tracestate = state;
  }

  /** The client span of an attempt, child of `parent`, named as the GenAI conventions say (`chat gpt-4o`). */
  startClient(parent: Otel.Span, upstream: string, attributes: Otel.Attributes): Otel.Span {
    const api = this.api;
    let own = this.upstreams.get(upstream);
    if (!own) {
      own = clean(this.upstreamAttributes?.(upstream)) ?? {};
      // Upstream names are the app's breakers and limiters: few, fixed.
      if (this.upstreams.size < 256) this.upstreams.set(upstream, own);
    }
    const operation = attributes[A.genAiOperation];
    const model = attributes[A.genAiRequestModel];
    const name =
      typeof operation === 'string' && typeof model === 'string' ? `${operation} ${model}` : `upstream ${upstream}`;
    return this.tracer.startSpan(
      name,
      { kind: api.SpanKind.CLIENT, attributes: { ...own, ...attributes, [A.upstream]: upstream } },
      api.trace.setSpan(api.ROOT_CONTEXT, parent),
    );
  }
}

/** A recording server span. */
class TracedRequest implements RequestSpan {
  readonly recording = true;
  private ended = false;
  /** What the request asks of the model (`gen_ai.*` request attributes): its client spans carry them too. */
  private readonly request: Otel.Attributes = {};
  /** The client span of the latest attempt (attempts of one call follow each other). */
  private attempt?: TracedUpstream;

  constructor(
    private readonly tracing: Backend,
    private readonly span: Otel.Span,
    attributes: SpanAttributes | undefined,
  ) {
    if (attributes) this.keepRequestAttributes(attributes);
  }

  get traceparent(): string {
    return formatTraceParent(this.span.spanContext());
  }

  setAttributes(attributes: SpanAttributes): void {
    const cleaned = clean(attributes);
    if (!cleaned) return;
    this.span.setAttributes(cleaned);
    this.keepRequestAttributes(attributes);
  }

  setOutcome(outcome: RequestOutcome, upstream: string, breaker?: BreakerState): void {
    this.span.setAttributes(
      breaker === undefined
        ? { [A.dedupOutcome]: outcome, [A.upstream]: upstream }
        : {
            [A.dedupOutcome]: outcome,
            [A.upstream]: upstream,
            [A.breakerState]: breaker,
          },
    );
  }

  link(traceparent: string | undefined): void {
    const leader = parseTraceParent(traceparent);
    if (!leader || typeof this.span.addLink !== 'function') return;
    this.span.addLink({ context: { ...leader, isRemote: true }, attributes: { 'orchestrator.link': 'dedup_leader' } });
    this.span.setAttribute(A.dedupLeaderTraceId, leader.traceId);
  }

  startUpstreamSpan(upstream: string, attributes: SpanAttributes): UpstreamSpan {
    const attempt = new TracedUpstream(
      this.tracing,
      this.tracing.startClient(this.span, upstream, { ...this.request, ...clean(attributes) }),
    );
    this.attempt = attempt;
    return attempt;
  }

  injectUpstream(headers: Record<string, string>): void {
    if (this.attempt) this.tracing.inject(this.attempt.span, headers);
  }

  setUpstreamAttributes(attributes: SpanAttributes): void {
    this.attempt?.setAttributes(attributes);
  }

  end(status?: number, errorType?: string): void {
    if (this.ended) return;
    this.ended = true;
    if (status !== undefined) this.span.setAttribute('http.response.status_code', status);
    if ((status !== undefined && status >= 500) || errorType !== undefined) {
      this.span.setAttribute('error.type', errorType ?? String(status));
      if (status === undefined || status >= 500) this.span.setStatus({ code: this.tracing.api.SpanStatusCode.ERROR });
    }
    this.span.end();
  }

  private keepRequestAttributes(attributes: SpanAttributes): void {
    for (const key in attributes) {
      const value = attributes[key];
      if (value !== undefined && REQUEST_KEYS.has(key)) this.request[key] = value;
    }
  }
}

/** The request attributes a server span hands on to its client spans. */
const REQUEST_KEYS = new Set<string>([A.genAiProviderName, A.genAiSystem, A.genAiOperation, A.genAiRequestModel]);

class TracedUpstream implements UpstreamSpan {
  private ended = false;

  constructor(
    private readonly tracing: Backend,
    readonly span: Otel.Span,
  ) {}

  setAttributes(attributes: SpanAttributes): void {
    if (this.ended) return;
    const cleaned = clean(attributes);
    if (cleaned) this.span.setAttributes(cleaned);
  }

  end(result: UpstreamSpanResult, error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.span.setAttribute(A.result, result);
    if (error !== undefined && result !== 'cancelled') {
      const e = error as { code?: unknown; status?: unknown; statusCode?: unknown; name?: unknown };
      const status =
        typeof e?.status === 'number' ? e.status : typeof e?.statusCode === 'number' ? e.statusCode : undefined;
      if (status !== undefined) this.span.setAttribute('http.response.status_code', status);
      const type =
        typeof e?.code === 'string'
          ? e.code
          : status !== undefined
            ? String(status)
            : typeof e?.name === 'string'
              ? e.name
              : 'error';
      this.span.setAttribute('error.type', type);
      this.span.setStatus({ code: this.tracing.api.SpanStatusCode.ERROR, message: type });
    }
    this.span.end();
  }
}

/** Attributes without `undefined` values (which OpenTelemetry would warn about); `undefined` when none is left. */
function clean(attributes: SpanAttributes | undefined): Otel.Attributes | undefined {
  if (!attributes) return undefined;
  let out: Otel.Attributes | undefined;
  for (const key in attributes) {
    const value = attributes[key];
    if (value !== undefined) (out ??= {})[key] = value;
  }
  return out;
}

const REQUEST_SPAN = Symbol.for('nest-prompt-orchestrator.request-span');

/**
 * Hands a request's span to later layers of the same request path (e.g. an
 * app's middleware started it early; the orchestrator's interceptor then uses
 * it instead of starting its own, and leaves ending it to the middleware).
 */
export function attachRequestSpan(request: object, span: RequestSpan): void {
  (request as { [REQUEST_SPAN]?: RequestSpan })[REQUEST_SPAN] = span;
}

/** The span `attachRequestSpan` put on a request (or on the Node request under a Fastify one). */
export function requestSpanOf(request: object): RequestSpan | undefined {
  const r = request as { [REQUEST_SPAN]?: RequestSpan; raw?: { [REQUEST_SPAN]?: RequestSpan } };
  return r[REQUEST_SPAN] ?? r.raw?.[REQUEST_SPAN];
}
