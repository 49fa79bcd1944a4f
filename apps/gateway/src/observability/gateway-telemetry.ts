import {
  BatchedHistogram,
  type Orchestrator,
  type OrchestratorMetrics,
  TRACE_ATTRIBUTES,
  TalliedCounter,
  parseTraceParent,
  type BucketTally,
  type RequestOutcome,
  type Tally,
  type UpstreamPool,
} from 'nest-prompt-orchestrator/core';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import * as promClient from 'prom-client';
import type { Registry } from 'prom-client';
import type { GatewayConfig } from '../config/gateway-config.js';
import { pathOfUrl, type RequestContext } from './request-context.js';
import { UPSTREAM } from '../providers/shaping.js';
import { UPSTREAM_POOL } from '../upstreams/upstream-set.js';
import type { StatusBoard } from '../status/status-board.js';
import type { Budgets } from '../budgets/budgets.service.js';
import { ROUTES, type GatewayRoute } from '../providers/provider.js';
import type { GatewayTracing } from './gateway-tracing.js';
import { CappedLabels, MAX_MODEL_LABELS as MAX_MODELS, MAX_TENANT_LABELS } from '../common/label-bounds.js';
import { RequestLines } from './request-line.js';

const MAX_PROMPT_CHARS = 4000;
const MAX_UPSTREAM_LABELS = 64;
const NANO = 1e9;

/**
 * How a request ended, as a client sees it: answered by its own call to the provider (`miss`; `none` when the
 * route does not deduplicate), by another's (`joined`, `cached`), declined by the gateway before any call
 * (`refused`: see `REFUSAL_CAUSES`), or failed (`error`: a bad request, a provider's error, a client gone).
 */
export type ClientOutcome = 'miss' | 'joined' | 'cached' | 'none' | 'refused' | 'error';
const CLIENT_OUTCOMES: readonly ClientOutcome[] = ['miss', 'joined', 'cached', 'none', 'refused', 'error'];
/** Error codes of a request the gateway declined to pass on (to protect the provider, or a key's limits). */
export const REFUSAL_CAUSES = [
  'circuit_open',
  'overloaded',
  'queue_timeout',
  'shutting_down',
  'no_upstream_available',
  'rate_limit_exceeded',
  'insufficient_quota',
] as const;
const REFUSALS: ReadonlySet<string> = new Set(REFUSAL_CAUSES);
/** Routes whose request counts are exposed at 0 from the start (the generation routes; others appear when used). */
const COUNTED_ROUTES = (Object.keys(ROUTES) as GatewayRoute[]).filter((route) => ROUTES[route].kind === 'generation');
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const FIRST_TOKEN_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30];

/** The client-facing outcome of a request (see `ClientOutcome`). */
export function clientOutcomeOf(context: RequestContext, status: number): ClientOutcome {
  if (context.errorCode !== undefined && REFUSALS.has(context.errorCode)) return 'refused';
  if (status >= 400 || context.errorCode !== undefined) return 'error';
  return context.outcome ?? 'none';
}

function statusClass(status: number): string {
  return status >= 100 && status < 600 ? `${Math.floor(status / 100)}xx` : 'other';
}

type TokenChildren = [input: { inc(n: number): void }, output: { inc(n: number): void }];
type TokenLabels = 'direction' | 'model' | 'tenant';

/** The gateway's client-facing metrics (see docs/operations.md, "Metrics"). */
interface ClientMetrics {
  requests: TalliedCounter<'route' | 'outcome'>;
  duration: BatchedHistogram<'route' | 'status_class' | 'outcome'>;
  refusals: TalliedCounter<'cause'>;
  firstToken: BatchedHistogram<'route'>;
  upstreamFirstByte: BatchedHistogram<'upstream'>;
  upstreamDuration: BatchedHistogram<'upstream'>;
  spent?: TalliedCounter<'model' | 'tenant'>;
  saved?: TalliedCounter<'model' | 'tenant'>;
}

/**
 * What the gateway records when a request is over: its log line (request id,
 * route, hashed tenant, dedup outcome, breaker state, queue and upstream
 * times, status, tokens), its tokens in the metrics (by model; by hashed
 * tenant with --metrics-tenants), and its place on the status page. Runs on
 * the response's `close`, after the client has its answer. Never logs a key,
 * and logs a prompt only with --log-prompts.
 */
export class GatewayTelemetry {
  /** Whether a request needs watching at all (else the middleware adds no listener). */
  readonly enabled: boolean;
  private readonly requestLog: boolean;
  private readonly logPrompts: boolean;
  private readonly tokens?: TalliedCounter<TokenLabels>;
  private readonly tokensSaved?: TalliedCounter<'direction' | 'model'>;
  private readonly models = new CappedLabels(MAX_MODELS);
  private readonly tenantLabels = new CappedLabels(MAX_TENANT_LABELS);
  private readonly metricsTenants: boolean;
  private readonly boundTokens = new Map<string, TokenChildren>();
  private readonly boundSaved = new Map<string, TokenChildren>();
  /** The primary pool: a request line whose call reached no upstream (refused) names its breaker (see `defaultBreaker`). */
  private readonly pool?: UpstreamPool;
  private readonly lines: RequestLines;
  private readonly client?: ClientMetrics;
  private readonly upstreamLabels = new CappedLabels(MAX_UPSTREAM_LABELS);
  /** Bound children by label key (label values here are few: routes, classes, outcomes, capped names). */
  private readonly tallies = new Map<object, Map<string, Tally>>();
  private readonly buckets = new Map<object, Map<string, BucketTally>>();
  /** Paths of the control plane (metrics, health, status page): their lines are at debug, not info. */
  private readonly controlPaths: string[];

  constructor(
    config: GatewayConfig,
    logger: Logger,
    private readonly orchestrator: Orchestrator,
    private readonly budgets: Budgets,
    private readonly board: StatusBoard,
    metrics: OrchestratorMetrics | undefined,
    tracing?: GatewayTracing,
  ) {
    const o = config.observability;
    this.pool = orchestrator.upstreams.get(UPSTREAM_POOL);
    this.requestLog = o.requestLog && logger.isLevelEnabled('info');
    this.lines = new RequestLines(logger);
    this.logPrompts = o.logPrompts;
    this.metricsTenants = o.metricsTenants;
    if (metrics) {
      const registers = [metrics.registry as Registry];
      this.tokens = new TalliedCounter<TokenLabels>(promClient, {
        name: 'gateway_tokens_total',
        help: 'Tokens of the calls the gateway made to the provider, as it reported them (direction in = prompt, out = completion).',
        labelNames: o.metricsTenants ? ['direction', 'model', 'tenant'] : ['direction', 'model'],
        registers,
      });
      this.tokensSaved = new TalliedCounter<'direction' | 'model'>(promClient, {
        name: 'gateway_tokens_saved_total',
        help: 'Tokens of answers reused by deduplication (joined or cached requests): calls the provider did not bill.',
        labelNames: ['direction', 'model'],
        registers,
      });
      tracing?.registerMetrics(metrics.registry as Registry);
      this.client = clientMetrics(registers, o.metricsTenants);
    }
    this.controlPaths = [
      '/health',
      '/v1/health',
      ...(o.metricsPath ? [o.metricsPath] : []),
      ...(o.statusPath ? [o.statusPath] : []),
    ];
    this.enabled = this.requestLog || this.tokens !== undefined || board.enabled || tracing?.tracing !== undefined;
  }

  /** The breaker of the sole primary upstream (however named), else the pool's name; read as the pool is now. */
  private defaultBreaker(): string {
    const members = this.pool?.members.filter((m) => !m.draining) ?? [];
    return members.length === 1 ? members[0].name : UPSTREAM;
  }

  /** The in/out children of the token counter for a model (and tenant), bound once: no label look-up per request. */
  private tokenChildren(model: string, tenant: string | undefined): TokenChildren {
    const key = tenant === undefined ? model : `${model}\n${tenant}`;
    let children = this.boundTokens.get(key);
    if (!children) {
      const m = this.models.of(model);
      const labels = tenant === undefined ? [m] : [m, this.tenantLabels.of(tenant)];
      children = [this.tokens!.tally('in', ...labels), this.tokens!.tally('out', ...labels)];
      // Values past the caps all map to "other": remember them under their own key only while that stays small.
      if (this.boundTokens.size < 4 * (MAX_MODELS + MAX_TENANT_LABELS)) this.boundTokens.set(key, children);
    }
    return children;
  }

  private savedChildren(model: string): TokenChildren {
    let children = this.boundSaved.get(model);
    if (!children) {
      const m = this.models.of(model);
      children = [this.tokensSaved!.tally('in', m), this.tokensSaved!.tally('out', m)];
      if (this.boundSaved.size < 4 * MAX_MODELS) this.boundSaved.set(model, children);
    }
    return children;
  }

  private tally(counter: TalliedCounter<string>, ...values: string[]): Tally {
    return bound(this.tallies, counter, values, () => counter.tally(...values));
  }

  private bucket(histogram: BatchedHistogram<string>, ...values: string[]): BucketTally {
    return bound(this.buckets, histogram, values, () => histogram.tally(...values));
  }

  /** Whether a path is the control plane's (metrics, health, the status page and its event stream). */
  private isControl(path: string): boolean {
    return this.controlPaths.some((p) => path === p || path.startsWith(`${p}/`));
  }

  /** Watches one request of a control route (health, metrics, the status page) until its response is over. */
  track(request: IncomingMessage, response: ServerResponse, context: RequestContext): void {
    response.once('close', () =>
      this.finished(
        context,
        request.method ?? 'GET',
        pathOfUrl((request as { originalUrl?: string }).originalUrl ?? request.url),
        statusOf(response),
      ),
    );
  }

  /** A request is over: its line, its tokens, its place on the status page. `path` names a request no route served. */
  finished(context: RequestContext, method: string, path: string, status: number): void {
    const outcome: RequestOutcome | undefined = context.outcome;
    const route = context.route ?? 'unrouted';
    const needTenant = this.board.enabled || this.requestLog || this.metricsTenants;
    const tenant = needTenant ? context.tenantHash : undefined;
    const body = context.body as { model?: unknown } | undefined;
    const model = typeof body?.model === 'string' ? body.model : undefined;
    // What this request's own call used is the model that answered it (a fallback may have been asked for another).
    const served = context.servedModel ?? model;
    const own = context.usage;
    const reused =
      outcome === 'joined' || outcome === 'cached' ? (context.tag?.settled?.usage ?? context.reusedUsage) : undefined;

    if (this.tokens && own) {
      const [input, output] = this.tokenChildren(
        served ?? 'unknown',
        this.metricsTenants ? (tenant ?? 'none') : undefined,
      );
      input.inc(own.input);
      output.inc(own.output);
    }
    if (this.tokensSaved && reused) {
      const [input, output] = this.savedChildren(model ?? 'unknown');
      input.inc(reused.input);
      output.inc(reused.output);
    }
    const now = performance.now();
    const clientOutcome = clientOutcomeOf(context, status);
    const spentNano = context.settled?.costNano;
    const savedNano = reused ? context.tag?.settled?.costNano : undefined;
    // The pool member its last attempt went to, else the breaker its route's calls go through; kept on the context for
    // the request log file (written next) to say the same.
    const upstream = (context.upstream ??= context.route ? this.defaultBreaker() : undefined);
    if (this.client) {
      const c = this.client;
      const routeLabel = context.route ?? (this.isControl(path) ? 'control' : 'unrouted');
      this.tally(c.requests, routeLabel, clientOutcome).inc();
      this.bucket(c.duration, routeLabel, statusClass(status), clientOutcome).observe((now - context.startedAt) / 1000);
      if (clientOutcome === 'refused') this.tally(c.refusals, context.errorCode!).inc();
      if (context.firstChunkAt !== undefined)
        this.bucket(c.firstToken, routeLabel).observe((context.firstChunkAt - context.startedAt) / 1000);
      if (context.upstreamStartedAt !== undefined) {
        const label = this.upstreamLabels.of(upstream ?? UPSTREAM);
        if (context.upstreamAnsweredAt !== undefined) {
          this.bucket(c.upstreamFirstByte, label).observe(
            (context.upstreamAnsweredAt - context.upstreamStartedAt) / 1000,
          );
          // The whole answer: only one that was read to its end (a client gone, or a failure, is no answer's length).
          if (status < 400) this.bucket(c.upstreamDuration, label).observe((now - context.upstreamStartedAt) / 1000);
        }
      }
      const tenantLabel = this.metricsTenants ? this.tenantLabels.of(tenant ?? 'none') : undefined;
      if (c.spent && spentNano)
        this.tally(
          c.spent,
          this.models.of(served ?? 'unknown'),
          ...(tenantLabel === undefined ? [] : [tenantLabel]),
        ).inc(spentNano / NANO);
      if (c.saved && savedNano)
        this.tally(
          c.saved,
          this.models.of(model ?? 'unknown'),
          ...(tenantLabel === undefined ? [] : [tenantLabel]),
        ).inc(savedNano / NANO);
    }
    const span = context.span;
    if (span) {
      // Usage is on the client span of the call that was made; what a joined or cached request got for free is saved.
      span.setAttributes({
        [TRACE_ATTRIBUTES.savedInputTokens]: reused?.input,
        [TRACE_ATTRIBUTES.savedOutputTokens]: reused?.output,
        'gateway.tenant': context.tenantHash,
      });
      span.end(status, context.errorCode ?? (status === 499 ? 'client_closed' : undefined));
    }
    if (this.board.enabled) {
      this.board.record({
        outcome: outcome ?? (context.route ? 'none' : undefined),
        status,
        route,
        requestId: context.id,
        tenant,
        errorCode: context.errorCode,
        savedTokens: reused && reused.input + reused.output,
        savedDollars: reused && model ? this.budgets.prices.costOf(model, reused) : undefined,
        spentTokens: own && own.input + own.output,
        spentDollars: own && served ? this.budgets.prices.costOf(served, own) : undefined,
        latencyMs: performance.now() - context.startedAt,
        model,
        key: context.keyName ?? tenant,
        fromUpstream: context.errorCode === 'upstream_error' || context.errorCode === 'upstream_rejected',
      });
    }
    if (!this.requestLog) return;
    const answered = context.upstreamStartedAt !== undefined;
    const trace = span?.recording ? parseTraceParent(span.traceparent) : undefined;
    this.lines.write({
      debug: !context.route && this.isControl(path),
      traceId: trace?.traceId,
      spanId: trace?.spanId,
      outcome: clientOutcome,
      ttftMs: context.firstChunkAt === undefined ? undefined : round(context.firstChunkAt - context.startedAt),
      costUsd: spentNano === undefined ? undefined : spentNano / NANO,
      savedUsd: savedNano === undefined ? undefined : savedNano / NANO,
      upstreamError: context.upstreamErrorBody,
      reqId: context.id,
      reqIdGiven: context.idGiven === true,
      method,
      route: context.route ?? path,
      named: context.route !== undefined,
      status,
      dedup: outcome ?? null,
      tenant: tenant ?? null,
      breaker: this.orchestrator.breakerState(context.upstream ?? this.defaultBreaker()) ?? null,
      totalMs: round(now - context.startedAt),
      queueMs: answered ? round(context.upstreamStartedAt! - context.startedAt) : undefined,
      upstreamMs: answered ? round((context.upstreamAnsweredAt ?? now) - context.upstreamStartedAt!) : undefined,
      model: model?.slice(0, 100),
      servedModel: context.servedModel?.slice(0, 100),
      // The pool member (or fallback group's) whose answer, or failure, this was; else the breaker the call met.
      upstream,
      usage: own && { in: own.input, out: own.output },
      savedUsage: !own && reused ? { in: reused.input, out: reused.output } : undefined,
      error: context.errorCode,
      prompt: this.logPrompts && context.body !== undefined ? promptOf(context.body) : undefined,
    });
  }
}

/** The client-facing metrics, registered in the orchestrator's registry; counters present at 0 for their known values. */
function clientMetrics(registers: Registry[], byTenant: boolean): ClientMetrics {
  const requests = new TalliedCounter<'route' | 'outcome'>(promClient, {
    name: 'gateway_requests_total',
    help: 'Requests answered, each once, by route (control: metrics, health, status page; unrouted: no route) and outcome (miss, joined, cached, none: not deduplicated, refused, error).',
    labelNames: ['route', 'outcome'],
    registers,
  });
  for (const route of COUNTED_ROUTES)
    for (const outcome of CLIENT_OUTCOMES) requests.counter.inc({ route, outcome }, 0);
  const refusals = new TalliedCounter<'cause'>(promClient, {
    name: 'gateway_refusals_total',
    help: 'Requests the gateway declined before any call to the provider, by cause (the error code the client got).',
    labelNames: ['cause'],
    registers,
  });
  for (const cause of REFUSAL_CAUSES) refusals.counter.inc({ cause }, 0);
  const money = (name: string, help: string) =>
    new TalliedCounter<'model' | 'tenant'>(promClient, {
      name,
      help,
      labelNames: byTenant ? ['model', 'tenant'] : ['model'],
      registers,
    });
  return {
    requests,
    refusals,
    duration: new BatchedHistogram({
      name: 'gateway_request_duration_seconds',
      help: "Time from a request's arrival to the end of its response, by route, status class (2xx, 4xx, 5xx) and outcome.",
      labelNames: ['route', 'status_class', 'outcome'],
      buckets: DURATION_BUCKETS,
      registers,
    }),
    firstToken: new BatchedHistogram({
      name: 'gateway_time_to_first_token_seconds',
      help: "Streamed answers: time from the request's arrival to the first chunk written to the client.",
      labelNames: ['route'],
      buckets: FIRST_TOKEN_BUCKETS,
      registers,
    }),
    upstreamFirstByte: new BatchedHistogram({
      name: 'gateway_upstream_first_byte_seconds',
      help: "A request's own call: time from sending it to the provider's response headers.",
      labelNames: ['upstream'],
      buckets: DURATION_BUCKETS,
      registers,
    }),
    upstreamDuration: new BatchedHistogram({
      name: 'gateway_upstream_duration_seconds',
      help: "A request's own call answered in full: time from sending it to the answer's end (a stream's last chunk).",
      labelNames: ['upstream'],
      buckets: DURATION_BUCKETS,
      registers,
    }),
    spent: money(
      'gateway_spent_usd_total',
      "USD the provider's answers cost, by the model that answered (priced from the prices table).",
    ),
    saved: money(
      'gateway_saved_usd_total',
      'USD not spent: answers reused by deduplication (joined or cached), by the model asked for.',
    ),
  };
}

/** The child of `metric` for `values`, bound once (every value here is bounded: the maps stay as small as the series). */
function bound<C>(byMetric: Map<object, Map<string, C>>, metric: object, values: string[], make: () => C): C {
  let children = byMetric.get(metric);
  if (!children) byMetric.set(metric, (children = new Map<string, C>()));
  const key = values.join('\u0000');
  let child = children.get(key);
  if (!child) children.set(key, (child = make()));
  return child;
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}

/** The status a response was logged with: a client that left before its answer was written is a 499, as nginx logs it. */
export function statusOf(response: ServerResponse): number {
  return response.writableFinished ? response.statusCode : 499;
}

/** The request's prompt, as the client sent it (messages, prompt or input), bounded. */
function promptOf(body: unknown): string {
  const b = body as { messages?: unknown; prompt?: unknown; input?: unknown; system?: unknown };
  const prompt = b.messages ?? b.prompt ?? b.input ?? body;
  const text = typeof prompt === 'string' ? prompt : JSON.stringify(prompt);
  return text.length > MAX_PROMPT_CHARS ? `${text.slice(0, MAX_PROMPT_CHARS)}…` : text;
}
