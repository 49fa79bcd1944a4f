import {
  CountersUnavailableError,
  MemoryWindowCounters,
  RedisThrottlerStorage,
  type WindowCounters,
} from 'nest-prompt-orchestrator/throttler';
import { parseTraceParent } from 'nest-prompt-orchestrator/core';
import type { GatewayConfig } from '../config/gateway-config.js';
import type { ContextLog } from '../common/context-log.js';
import { ApiError } from '../common/api-error.js';
import type { RequestContext, Settled } from '../observability/request-context.js';
import type { SharedState } from '../shared-state/shared-state.js';
import type { SpendCap } from '../config/spend-cap.js';
import { ROUTES } from '../providers/provider.js';
import { PriceTable, type Usage } from './prices.js';
import { RequestLog } from './request-log.js';
import { NANO, SpendLedger, type ScopedCap } from './spend-ledger.js';
import { VirtualKeys, type VirtualKey } from './virtual-keys.js';

/**
 * Budgets and keys: who may call (virtual keys), how often (requests and
 * tokens per window, counted with `@nestjs/throttler` storages: in memory,
 * or in Redis so that replicas share them), how much they may spend (priced
 * from the usage providers report), and the request log.
 */
export class Budgets {
  readonly keys?: VirtualKeys;
  readonly prices: PriceTable;
  readonly ledger: SpendLedger;
  private readonly counters: WindowCounters;
  /** Counts kept in this process while the shared ones (Redis) are unavailable (`--limits-without-redis` open or share). */
  private readonly localCounters = new MemoryWindowCounters();
  private readonly withoutRedis: GatewayConfig['limitsWithoutRedis'];
  private readonly shared: SharedState;
  private readonly requestLog?: RequestLog;
  private readonly window: number;
  private readonly settings: GatewayConfig['budgets'];
  // Long enough for any answer the gateway waits for; a replica that dies leaves its holds this long at most.
  private readonly holdMs: number;

  constructor(
    config: GatewayConfig,
    shared: SharedState,
    private readonly logger: ContextLog,
  ) {
    const budgets = config.budgets;
    this.settings = budgets;
    this.window = budgets.rateWindowMs;
    const log = (line: string) => this.logger.warn(line);
    if (budgets.keysFile !== undefined || budgets.keysJson !== undefined) {
      // A refused reload is a warning (shown by default); a reload that took is news.
      this.keys = VirtualKeys.load({ file: budgets.keysFile, json: budgets.keysJson }, (line, problem) =>
        problem ? this.logger.warn(line) : this.logger.log(line),
      );
    }
    this.prices = new PriceTable({
      operator: budgets.prices,
      defaultPrice: budgets.defaultPrice,
      upstreamUrl: config.upstream,
      localModels: config.provider === 'llama',
    });
    this.holdMs = Math.max(10 * 60_000, 2 * config.timeoutMs);
    const redis = shared.redis;
    const opTimeoutMs = Math.max(config.redisTimeoutMs, 50);
    this.shared = shared;
    this.withoutRedis = config.limitsWithoutRedis;
    this.counters = redis
      ? new RedisThrottlerStorage({
          client: redis,
          prefix: config.redisPrefix,
          opTimeoutMs,
          // Whoever asks decides what a count that cannot be shared means (--limits-without-redis).
          whenUnavailable: 'throw',
          // Never skipped on its own: while Redis is down its commands fail at once (RedisHealth), and once it is
          // back the very next count is shared again (under `closed`, not refused a second longer).
          retryMs: 0,
          onState: (state, error) => shared.health?.report('rate-limits', state, error),
        })
      : new MemoryWindowCounters();
    this.ledger = new SpendLedger({
      redis,
      slotPerScope: shared.topology === 'cluster',
      prefix: config.redisPrefix,
      opTimeoutMs,
      file: redis ? undefined : budgets.spendFile,
      log,
      withoutRedis: () => ({ mode: this.withoutRedis, replicas: this.replicas() }),
      onState: shared.health ? (state, error) => shared.health?.report('spend-caps', state, error) : undefined,
    });
    if (budgets.requestLog)
      this.requestLog = new RequestLog(budgets.requestLog, budgets.requestLogMaxBytes, budgets.requestLogFiles, log);
  }

  /** Whether clients must present a virtual key. */
  get keysOn(): boolean {
    return this.keys !== undefined;
  }

  get streamUsage(): boolean {
    return this.settings.streamUsage;
  }

  /**
   * Before a routed request goes further: within its key's request and
   * token rates, and under every spend cap that applies. A refusal is a 429
   * with `Retry-After` (rates: retryable) or `insufficient_quota` (caps: not
   * retryable until the period ends).
   */
  async admit(context: RequestContext, key: VirtualKey | undefined): Promise<void> {
    const rateKey = key ? `key:${key.name}` : `tenant:${context.tenantHash ?? '-'}`;
    context.rateKey = rateKey;
    context.keyName = key?.name;
    const requests = key?.requestsPerMinute ?? this.settings.requestsPerWindow;
    const tokens = key?.tokensPerMinute ?? this.settings.tokensPerWindow;
    if (tokens !== undefined) {
      const { value: used, limit } = await this.counted(tokens, (counters) =>
        counters.add(`tokens:${rateKey}`, this.window, 0),
      );
      if (used.total >= limit) {
        throw rateLimited(
          `Token rate limit reached: ${used.total} of ${tokens} tokens used in this ${this.window / 1000} s window.`,
          used.timeToExpire,
        );
      }
    }
    if (requests !== undefined) {
      const { value: hit } = await this.counted(requests, (counters, limit) =>
        counters.increment(rateKey, this.window, limit, 0, 'requests'),
      );
      if (hit.isBlocked) {
        throw rateLimited(
          `Rate limit reached: ${requests} requests per ${this.window / 1000} s window.`,
          hit.timeToBlockExpire,
        );
      }
    }
    const caps: ScopedCap[] = [];
    if (this.settings.maxSpend) caps.push({ scope: '*', cap: this.settings.maxSpend });
    if (key?.maxSpend) caps.push({ scope: key.name, cap: key.maxSpend });
    if (caps.length === 0) return;
    context.caps = caps;
    // Under a cap, a model call whose price is unknown would count as free: refused, saying how to price it.
    if (context.route && ROUTES[context.route].kind === 'generation') {
      const model = modelOf(context.body);
      if (!this.prices.sourceOf(model)) throw unpriced(model);
    }
    for (const { scope, cap } of caps) await this.checkCap(scope, cap, who(scope));
  }

  /**
   * Just before a call goes to the provider (only the call that does: joined and cached requests never get here):
   * its worst-case cost is held against every cap it is under, or it is refused if those caps are already reached
   * by what is spent and held. Across replicas with --redis. `settle` or `release` ends the hold.
   */
  async reserve(context: RequestContext, body: unknown, bodyBytes: number | undefined): Promise<void> {
    const caps = context.caps;
    if (!caps || context.hold || !context.route || ROUTES[context.route].kind !== 'generation') return;
    // A fallback asked for another model is priced as that model: one without a price would pass as free.
    if (context.servedModel !== undefined && !this.prices.sourceOf(context.servedModel))
      throw unpriced(context.servedModel, true);
    const worstNano = Math.round(this.worstCase(context, body, bodyBytes) * NANO);
    const result = await this.ledger.reserve(caps, worstNano, this.holdMs);
    if ('hold' in result) {
      context.hold = result.hold;
      return;
    }
    if ('unavailable' in result) throw limitsUnavailable('spend cap');
    const { scope, cap } = caps[result.refused.index];
    const usd = (nano: number) => Number((nano / NANO).toFixed(6));
    const message =
      result.refused.heldNano > 0 && result.refused.spentNano < Math.round(cap.usd * NANO)
        ? `${who(scope)} is at its spend cap of ${cap.usd} USD per ${cap.period} (UTC): ${usd(result.refused.spentNano)} USD spent and ${usd(result.refused.heldNano)} USD held by requests still in flight.`
        : `${who(scope)} has reached its spend cap of ${cap.usd} USD per ${cap.period} (UTC); requests resume next ${cap.period}.`;
    throw quotaExceeded(message);
  }

  /** The call failed before the provider answered it: its hold is let go, nothing is spent. */
  release(context: RequestContext): void {
    const hold = context.hold;
    if (!hold) return;
    context.hold = undefined;
    void this.ledger.settle(hold, context.keyName, 0);
  }

  /**
   * A call the gateway made has ended: its usage is priced and counted (spend, tokens), and its hold let go. An
   * answer whose usage is unknown costs what was held for it: under a cap, nothing the provider answered is free.
   * Resolves once the shared totals have it (never rejects).
   */
  settle(context: RequestContext, body: unknown, usage: Usage | undefined): Promise<void> {
    const hold = context.hold;
    context.hold = undefined;
    if (!usage) return hold ? this.ledger.settle(hold, context.keyName, hold.amountNano) : Promise.resolve();
    const settled = this.priced(context.servedModel ?? modelOf(body), usage);
    const costNano = settled.costNano;
    context.settled = settled;
    if (context.rateKey) {
      const rateKey = context.rateKey;
      const tokens = usage.input + usage.output;
      void this.counters
        .add(`tokens:${rateKey}`, this.window, tokens)
        .catch(() => this.localCounters.add(`tokens:${rateKey}`, this.window, tokens));
    }
    // What the requests that reuse this answer saved: they read it from the call's tag.
    if (context.tag) context.tag.settled = settled;
    const counted = this.ledger.settle(hold, context.keyName, costNano);
    // Only a capped request waits for it: without a cap, nothing reads the totals before the next answer.
    return context.caps ? counted : Promise.resolve();
  }

  /** What a call to `model` that used `usage` cost. */
  priced(model: string | undefined, usage: Usage): Settled {
    return { usage, costNano: Math.round(this.prices.costOf(model, usage) * NANO) };
  }

  /**
   * USD a request may cost at most: every byte of its body a prompt token (a token is at least one byte of text),
   * and the answer as long as it allows (`max_tokens` and kin, times the choices asked for), else the prices
   * file's `maxOutput` for the model, else --reserve-output-tokens.
   */
  private worstCase(context: RequestContext, body: unknown, bodyBytes: number | undefined): number {
    const b = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
    const model = context.servedModel ?? modelOf(body);
    let input = bodyBytes;
    if (input === undefined) {
      try {
        input = Buffer.byteLength(JSON.stringify(body ?? null));
      } catch {
        input = 0;
      }
    }
    const embeds = context.route === 'embeddings' || context.route === 'embedding' || context.route === 'rerank';
    const count = (value: unknown) =>
      typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.ceil(value) : undefined;
    const declared =
      count(b.max_completion_tokens) ?? count(b.max_tokens) ?? count(b.max_output_tokens) ?? count(b.n_predict);
    const perChoice = embeds ? 0 : (declared ?? this.prices.maxOutputOf(model) ?? this.settings.reserveOutputTokens);
    const choices = Math.max(1, count(b.n) ?? 1, count(b.best_of) ?? 1);
    return this.prices.costOf(model, { input, output: perChoice * choices, cached: 0 });
  }

  /** Once the response is over (sent, or the client gone): money saved by a joined or cached answer, and the request's log line. */
  finished(context: RequestContext, status: number): void {
    const outcome = context.outcome ?? null;
    const reused = outcome === 'joined' || outcome === 'cached';
    const original = reused ? context.tag?.settled : undefined;
    const savedNano = original?.costNano ?? 0;
    if (savedNano > 0) this.ledger.record(context.keyName, 0, savedNano);
    if (!this.requestLog) return;
    const usage = context.settled?.usage ?? original?.usage ?? context.reusedUsage;
    const trace = context.span?.recording ? parseTraceParent(context.span.traceparent) : undefined;
    this.requestLog.write({
      time: new Date().toISOString(),
      reqId: context.id,
      ...(trace ? { traceId: trace.traceId, spanId: trace.spanId } : {}),
      tenant: context.tenantHash ?? null,
      key: context.requestHash ?? null,
      outcome,
      route: context.route ?? null,
      model: modelOf(context.body) ?? null,
      // A fallback asked for another model: the one whose price `cost` is.
      ...(context.servedModel === undefined ? {} : { servedModel: context.servedModel }),
      status,
      ...(context.errorCode === undefined ? {} : { error: context.errorCode }),
      ...(context.upstream === undefined ? {} : { upstream: context.upstream }),
      tokensIn: usage?.input ?? 0,
      tokensOut: usage?.output ?? 0,
      cost: (context.settled?.costNano ?? 0) / NANO,
      saved: savedNano / NANO,
      latencyMs: Math.round(performance.now() - context.startedAt),
    });
  }

  /** Whether a request with this key must be checked against rates or caps before it goes further. */
  needsAdmission(key: VirtualKey | undefined): boolean {
    const s = this.settings;
    return (
      key !== undefined ||
      s.requestsPerWindow !== undefined ||
      s.tokensPerWindow !== undefined ||
      s.maxSpend !== undefined
    );
  }

  /**
   * For /health: the limits in force, and what this replica has seen spent and saved in the current UTC day and
   * month (USD; with --redis, the fleet's totals are in Redis). No key and no key name's secret.
   */
  health() {
    const totals = this.ledger.snapshot();
    const all = (period: 'day' | 'month') => {
      const entry = Object.entries(totals).find(([id]) => id.startsWith(`${period}:`) && id.endsWith(':*'))?.[1];
      return { spent: (entry?.spentNano ?? 0) / NANO, saved: (entry?.savedNano ?? 0) / NANO };
    };
    return {
      keys: this.keys?.size ?? null,
      rateWindowSecs: this.window / 1000,
      requestsPerWindow: this.settings.requestsPerWindow ?? null,
      tokensPerWindow: this.settings.tokensPerWindow ?? null,
      maxSpend: this.settings.maxSpend ?? null,
      day: all('day'),
      month: all('month'),
      requestLogDropped: this.requestLog?.droppedLines ?? null,
    };
  }

  async close(): Promise<void> {
    this.keys?.close();
    this.ledger.close();
    await this.requestLog?.close();
  }

  /**
   * A count through the shared counters; while they are unavailable, as --limits-without-redis says: this
   * replica's own count against the whole limit (`open`) or its share of it (`share`), or refused (`closed`).
   */
  private async counted<T>(
    limit: number,
    count: (counters: WindowCounters, limit: number) => Promise<T>,
  ): Promise<{ value: T; limit: number }> {
    try {
      return { value: await count(this.counters, limit), limit };
    } catch (error) {
      if (!(error instanceof CountersUnavailableError)) throw error;
      if (this.withoutRedis === 'closed') throw limitsUnavailable('rate limit');
      const share = this.withoutRedis === 'share' ? Math.max(0, Math.floor(limit / this.replicas())) : limit;
      return { value: await count(this.localCounters, share), limit: share };
    }
  }

  /** Gateway processes sharing this Redis, as last seen (at least 1). */
  private replicas(): number {
    return this.shared.health?.fleetSize ?? 1;
  }

  private async checkCap(scope: string, cap: SpendCap, who: string): Promise<void> {
    const status = await this.ledger.capStatus(scope, cap);
    if (status.spentNano === undefined) throw limitsUnavailable('spend cap');
    if (!status.reached) return;
    throw quotaExceeded(
      `${who} has reached its spend cap of ${cap.usd} USD per ${cap.period} (UTC); requests resume next ${cap.period}.`,
    );
  }
}

function who(scope: string): string {
  return scope === '*' ? 'The gateway' : `Key "${scope}"`;
}

/** Past a cap: not retryable (the SDKs would only spend their retries on it). */
function quotaExceeded(message: string): ApiError {
  const error = new ApiError(429, message, 'insufficient_quota', null, 'insufficient_quota');
  error.retryable = false;
  return error;
}

function unpriced(model: string | undefined, fallback = false): ApiError {
  const name =
    model === undefined
      ? 'The request names no model, so it'
      : fallback
        ? `The fallback model ${JSON.stringify(model.slice(0, 100))}, which the upstreams file sends this request to,`
        : `Model ${JSON.stringify(model.slice(0, 100))}`;
  return new ApiError(
    400,
    `${name} has no known price, and a spend cap applies: the gateway does not let a call it cannot price pass as free. ` +
      'Price the model in the file given to --prices (USD per 1M tokens), or price every unknown model with --default-price INPUT/OUTPUT.',
    'model_not_priced',
    'model',
    'invalid_request_error',
  );
}

/**
 * A limit or cap applies but its shared count (Redis) cannot be read, and --limits-without-redis closed says not to
 * guess: a 503 the SDKs retry, after Redis has had time to come back.
 */
function limitsUnavailable(what: 'rate limit' | 'spend cap'): ApiError {
  const error = new ApiError(
    503,
    `A ${what} applies to this request and its shared count cannot be checked (Redis is unavailable); the gateway refuses rather than pass it unchecked (--limits-without-redis closed). Retry shortly.`,
    'limits_unavailable',
    null,
    'service_unavailable',
  );
  error.retryAfter = '2';
  error.retryable = true;
  return error;
}

function rateLimited(message: string, retryAfterSeconds: number): ApiError {
  const error = new ApiError(429, message, 'rate_limit_exceeded', null, 'rate_limit_error');
  error.retryAfter = String(Math.max(1, retryAfterSeconds));
  error.retryable = true;
  return error;
}

/** The model a request body names (absent when it names none), at most 200 characters of it. */
export function modelOf(body: unknown): string | undefined {
  const model = (body as { model?: unknown } | null | undefined)?.model;
  return typeof model === 'string' ? model.slice(0, 200) : undefined;
}
