import { Inject, Injectable, Optional } from '@nestjs/common';
import { OrchestratorMetrics, OrchestratorService, TRACE_ATTRIBUTES, type RequestOutcome, type UpstreamPool } from 'nest-prompt-orchestrator';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import * as promClient from 'prom-client';
import type { Registry } from 'prom-client';
import { TalliedCounter } from 'nest-prompt-orchestrator/internal';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_CONFIG, GATEWAY_LOGGER } from '../gateway.tokens.js';
import { pathOfUrl, type RequestContext } from '../http/request-context.js';
import { UPSTREAM } from '../routes/shaping.js';
import { UPSTREAM_POOL } from '../upstreams/upstream-set.js';
import { StatusBoard } from '../status/status-board.js';
import { Budgets } from '../budgets/budgets.service.js';
import { GatewayTracing } from './gateway-tracing.js';
import { RequestLines } from './request-line.js';

const MAX_MODELS = 50;
const MAX_TENANT_LABELS = 50;
const MAX_PROMPT_CHARS = 4000;

type TokenChildren = [input: { inc(n: number): void }, output: { inc(n: number): void }];
type TokenLabels = 'direction' | 'model' | 'tenant';

/** Distinct label values up to a cap; later ones become "other" (a label never grows without bound). */
class CappedLabels {
  private readonly seen = new Set<string>();
  constructor(private readonly max: number) {}

  of(value: string): string {
    if (this.seen.has(value)) return value;
    if (this.seen.size >= this.max) return 'other';
    this.seen.add(value);
    return value;
  }
}

/**
 * What the gateway records when a request is over: its log line (request id,
 * route, hashed tenant, dedup outcome, breaker state, queue and upstream
 * times, status, tokens), its tokens in the metrics (by model; by hashed
 * tenant with --metrics-tenants), and its place on the status page. Runs on
 * the response's `close`, after the client has its answer. Never logs a key,
 * and logs a prompt only with --log-prompts.
 */
@Injectable()
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

  constructor(
    @Inject(GATEWAY_CONFIG) config: GatewayConfig,
    @Inject(GATEWAY_LOGGER) logger: Logger,
    private readonly orchestrator: OrchestratorService,
    private readonly budgets: Budgets,
    private readonly board: StatusBoard,
    @Optional() @Inject(OrchestratorMetrics) metrics: OrchestratorMetrics | null,
    @Optional() tracing?: GatewayTracing,
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
    }
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

  /** Watches one request of a control route (health, metrics, the status page) until its response is over. */
  track(request: IncomingMessage, response: ServerResponse, context: RequestContext): void {
    response.once('close', () => this.finished(context, request.method ?? 'GET', pathOfUrl((request as { originalUrl?: string }).originalUrl ?? request.url), statusOf(response)));
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
    const reused = outcome === 'joined' || outcome === 'cached' ? (context.tag?.settled?.usage ?? context.reusedUsage) : undefined;

    if (this.tokens && own) {
      const [input, output] = this.tokenChildren(served ?? 'unknown', this.metricsTenants ? (tenant ?? 'none') : undefined);
      input.inc(own.input);
      output.inc(own.output);
    }
    if (this.tokensSaved && reused) {
      const [input, output] = this.savedChildren(model ?? 'unknown');
      input.inc(reused.input);
      output.inc(reused.output);
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
        fromUpstream: context.errorCode === 'upstream_error',
      });
    }
    if (!this.requestLog) return;
    const now = performance.now();
    const answered = context.upstreamStartedAt !== undefined;
    this.lines.write({
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
      // The pool member (or fallback group's) whose answer, or failure, this was.
      upstream: context.upstream,
      usage: own && { in: own.input, out: own.output },
      savedUsage: !own && reused ? { in: reused.input, out: reused.output } : undefined,
      error: context.errorCode,
      prompt: this.logPrompts && context.body !== undefined ? promptOf(context.body) : undefined,
    });
  }
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
