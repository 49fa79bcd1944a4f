import { Inject, Injectable, Logger, type OnApplicationShutdown } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { MemoryWindowCounters, RedisThrottlerStorage, type WindowCounters } from 'nest-prompt-orchestrator/throttler';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_CONFIG } from '../gateway.tokens.js';
import { ApiError } from '../http/api-error.js';
import type { RequestContext } from '../http/request-context.js';
import { SharedState } from '../shared-state/shared-state.js';
import type { SpendCap } from './budget-config.js';
import { PriceTable, type Usage } from './prices.js';
import { RequestLog } from './request-log.js';
import { NANO, SpendLedger } from './spend-ledger.js';
import { VirtualKeys, type VirtualKey } from './virtual-keys.js';

/** What one request used, as known once its answer ended. */
interface Settled {
  usage: Usage;
  costNano: number;
}

/**
 * Budgets and keys: who may call (virtual keys), how often (requests and
 * tokens per window, counted with `@nestjs/throttler` storages: in memory,
 * or in Redis so that replicas share them), how much they may spend (priced
 * from the usage providers report), and the request log.
 */
@Injectable()
export class Budgets implements OnApplicationShutdown {
  readonly keys?: VirtualKeys;
  readonly prices: PriceTable;
  readonly ledger: SpendLedger;
  private readonly counters: WindowCounters;
  private readonly requestLog?: RequestLog;
  // What each recent answer cost, by dedup key: a joined or cached copy of it saved that much.
  private readonly answers = new LRUCache<string, Settled>({ max: 10_000 });
  private readonly logger = new Logger('Gateway');
  private readonly window: number;
  private readonly settings: GatewayConfig['budgets'];

  constructor(@Inject(GATEWAY_CONFIG) config: GatewayConfig, shared: SharedState) {
    const budgets = config.budgets;
    this.settings = budgets;
    this.window = budgets.rateWindowMs;
    const log = (line: string) => this.logger.warn(line);
    if (budgets.keysFile !== undefined || budgets.keysJson !== undefined) {
      // A refused reload is a warning (shown by default); a reload that took is news.
      this.keys = VirtualKeys.load({ file: budgets.keysFile, json: budgets.keysJson }, (line, problem) => (problem ? this.logger.warn(line) : this.logger.log(line)));
    }
    this.prices = budgets.pricesFile ? PriceTable.fromFile(budgets.pricesFile) : new PriceTable();
    const redis = shared.redis;
    const opTimeoutMs = Math.max(config.redisTimeoutMs, 50);
    this.counters = redis
      ? new RedisThrottlerStorage({
          client: redis,
          prefix: config.redisPrefix,
          opTimeoutMs,
          onState: (state, error) =>
            state === 'degraded'
              ? log(`rate limits through Redis unavailable (${((error as Error)?.message ?? '').slice(0, 120)}); each replica counts alone until it is back`)
              : this.logger.log('rate limits through Redis are back'),
        })
      : new MemoryWindowCounters();
    this.ledger = new SpendLedger({ redis, prefix: config.redisPrefix, opTimeoutMs, file: redis ? undefined : budgets.spendFile, log });
    if (budgets.requestLog) this.requestLog = new RequestLog(budgets.requestLog, budgets.requestLogMaxBytes, budgets.requestLogFiles, log);
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
      const used = await this.counters.add(`tokens:${rateKey}`, this.window, 0);
      if (used.total >= tokens) {
        throw rateLimited(`Token rate limit reached: ${used.total} of ${tokens} tokens used in this ${this.window / 1000} s window.`, used.timeToExpire);
      }
    }
    if (requests !== undefined) {
      const hit = await this.counters.increment(rateKey, this.window, requests, 0, 'requests');
      if (hit.isBlocked) {
        throw rateLimited(`Rate limit reached: ${requests} requests per ${this.window / 1000} s window.`, hit.timeToBlockExpire);
      }
    }
    await this.checkCap('*', this.settings.maxSpend, 'The gateway');
    if (key?.maxSpend) await this.checkCap(key.name, key.maxSpend, `Key "${key.name}"`);
  }

  /** A call the gateway made has ended: its usage is priced and counted (spend, tokens). */
  settle(context: RequestContext, body: unknown, usage: Usage | undefined): void {
    if (!usage) return;
    const model = modelOf(body);
    const costNano = Math.round(this.prices.costOf(model, usage) * NANO);
    const settled = { usage, costNano };
    context.settled = settled;
    this.ledger.record(context.keyName, costNano, 0);
    if (context.rateKey) void this.counters.add(`tokens:${context.rateKey}`, this.window, usage.input + usage.output);
    if (context.dedupKey) this.answers.set(context.dedupKey, settled);
  }

  /** Once the response is sent: money saved by a joined or cached answer, and the request's log line. */
  track(request: IncomingMessage & { body?: unknown }, response: ServerResponse, context: RequestContext): void {
    response.once('close', () => {
      const header = response.getHeader('x-orchestrator-dedup');
      const outcome = header === 'miss' || header === 'joined' || header === 'cached' ? header : null;
      const reused = outcome === 'joined' || outcome === 'cached';
      const original = reused && context.dedupKey ? this.answers.get(context.dedupKey) : undefined;
      const savedNano = original?.costNano ?? 0;
      if (savedNano > 0) this.ledger.record(context.keyName, 0, savedNano);
      if (!this.requestLog) return;
      const usage = context.settled?.usage ?? original?.usage;
      this.requestLog.write({
        time: new Date().toISOString(),
        tenant: context.tenantHash ?? null,
        key: context.requestHash ?? null,
        outcome,
        route: context.route ?? null,
        model: modelOf(request.body) ?? null,
        status: response.statusCode,
        tokensIn: usage?.input ?? 0,
        tokensOut: usage?.output ?? 0,
        cost: (context.settled?.costNano ?? 0) / NANO,
        saved: savedNano / NANO,
        latencyMs: Math.round(performance.now() - context.startedAt),
      });
    });
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

  async onApplicationShutdown(): Promise<void> {
    this.keys?.close();
    this.ledger.close();
    await this.requestLog?.close();
  }

  private async checkCap(scope: string, cap: SpendCap | undefined, who: string): Promise<void> {
    if (!cap) return;
    const spent = await this.ledger.spent(scope, cap);
    if (spent < Math.round(cap.usd * NANO)) return;
    const error = new ApiError(
      429,
      `${who} has reached its spend cap of ${cap.usd} USD per ${cap.period} (UTC); requests resume next ${cap.period}.`,
      'insufficient_quota',
      null,
      'insufficient_quota',
    );
    error.retryable = false;
    throw error;
  }
}

function rateLimited(message: string, retryAfterSeconds: number): ApiError {
  const error = new ApiError(429, message, 'rate_limit_exceeded', null, 'rate_limit_error');
  error.retryAfter = String(Math.max(1, retryAfterSeconds));
  error.retryable = true;
  return error;
}

function modelOf(body: unknown): string | undefined {
  const model = (body as { model?: unknown } | null | undefined)?.model;
  return typeof model === 'string' ? model.slice(0, 200) : undefined;
}
