import { Inject, Injectable, Logger, Optional, type OnModuleDestroy } from '@nestjs/common';
import { from, lastValueFrom, isObservable, type ObservableInput } from 'rxjs';
import { BreakerRegistry } from './breaker/breaker.registry.js';
import { isTransientFailure } from './breaker/failure-classifier.js';
import type { BreakerSnapshot } from './breaker/circuit-breaker.js';
import { ConcurrencyRegistry, type LimiterSnapshot } from './concurrency/concurrency.registry.js';
import { CallPipeline, toCallEvents, type CallPolicy, type CallWork, type StartedCall } from './core/call-pipeline.js';
import { AnswerWindow } from './dedup/answer-window.js';
import { dedupKey, type DedupKeyInput } from './dedup/dedup-key.js';
import { normalizeOrchestrate, type NormalizedOrchestrateOptions, type OrchestrateOptions } from './orchestrate.options.js';
import { MODULE_OPTIONS_TOKEN } from './orchestrator.module-definition.js';
import {
  DEFAULT_DEDUP,
  DEFAULT_RETRY,
  OrchestratorConfigError,
  validateModuleOptions,
  type DedupOptions,
  type DedupRequest,
  type OrchestratorModuleOptions,
  type TimeoutOptions,
} from './orchestrator.options.js';
import type { TimeLimits } from './timeout/time-limits.js';

/** A route's (or a `run` call's) resolved settings; computed once per route and reused. */
export interface ResolvedPolicy {
  dedup?: Required<Pick<DedupOptions, 'windowMs' | 'cacheAnswers' | 'maxEntryBytes' | 'cancelWhenAbandoned'>> &
    Pick<DedupOptions, 'key' | 'credential'>;
  breaker?: CallPolicy['breaker'];
  limiter?: CallPolicy['limiter'];
  timeLimits?: CallPolicy['timeLimits'];
  retry?: CallPolicy['retry'];
}

export interface RunOptions extends OrchestrateOptions {
  /** Dedup key of this call (required for dedup; hash whatever identifies the answer, tenant included). */
  key?: string;
}

export interface OrchestratorHealth {
  breakers: BreakerSnapshot[];
  limiters: LimiterSnapshot[];
  /** Deduplicated calls in flight. */
  inFlight: number;
  /** How deduplicated requests were answered since start. */
  dedup: Record<'miss' | 'joined' | 'cached', number>;
  /** Clients that hung up before their answer was written. */
  clientsGone: number;
}

/**
 * The orchestrator for code that is not a route (a provider method, a queue
 * consumer), and the engine behind the route decorators.
 *
 * @example
 * ```ts
 * const answer = await orchestrator.run(
 *   { key: `summary:${tenant}:${docId}`, breaker: 'openai', concurrency: 8, timeout: 30_000 },
 *   (signal) => openai.chat.completions.create(params, { signal }),
 * );
 * ```
 */
@Injectable()
export class OrchestratorService implements OnModuleDestroy {
  readonly breakers: BreakerRegistry;
  readonly limiters: ConcurrencyRegistry;
  private readonly options: OrchestratorModuleOptions;
  private readonly window: AnswerWindow;
  private readonly pipeline = new CallPipeline();
  private readonly logger = new Logger('Orchestrator');
  private clientsGone = 0;

  constructor(@Optional() @Inject(MODULE_OPTIONS_TOKEN) options?: OrchestratorModuleOptions) {
    this.options = validateModuleOptions(options);
    this.breakers = new BreakerRegistry(this.options.breaker, this.options.breakers);
    this.limiters = new ConcurrencyRegistry(this.options.concurrency, this.options.limits);
    this.window = new AnswerWindow({
      maxEntries: this.options.dedup?.maxEntries ?? DEFAULT_DEDUP.maxEntries,
      stores: this.options.windowStores,
      onStoreError: (error) => this.logger.warn(`answer window store failed: ${(error as Error)?.message ?? error}`),
    });
  }

  /**
   * Runs `work` with the capabilities asked for, in their fixed order, and
   * resolves with its result (shared with identical calls when `key` and `dedup` are set).
   */
  async run<T>(options: RunOptions, work: (signal: AbortSignal) => Promise<T> | ObservableInput<T>): Promise<T> {
    const { key, ...capabilities } = options;
    const policy = this.resolve(normalizeOrchestrate(capabilities, 'run()'), undefined, 'default');
    const started = await this.start<T>(policy, key, (signal) => toCallEvents<T>(from(observeWork(work, signal))));
    const event = await lastValueFrom(started.events);
    if (event.kind !== 'value') throw new TypeError('run() work must produce a plain value, not a stream');
    return event.value;
  }

  /** Starts a call under a resolved policy; the low-level entry the interceptor uses. */
  start<T>(policy: ResolvedPolicy, key: string | undefined, work: CallWork<T>): Promise<StartedCall<T>> {
    const dedup = policy.dedup;
    return this.pipeline.start<T>(
      {
        dedup:
          dedup && key !== undefined
            ? {
                key,
                window: dedup.cacheAnswers ? this.window : undefined,
                windowMs: dedup.windowMs,
                maxEntryBytes: dedup.maxEntryBytes,
                cancelWhenAbandoned: dedup.cancelWhenAbandoned,
              }
            : undefined,
        breaker: policy.breaker,
        limiter: policy.limiter,
        timeLimits: policy.timeLimits,
        retry: policy.retry,
      },
      work,
    );
  }

  /**
   * Merges module defaults with class and route settings (route wins, field by
   * field). A capability is on only where a class or route asks for it.
   */
  resolve(
    route: NormalizedOrchestrateOptions,
    controller: NormalizedOrchestrateOptions | undefined,
    defaultName: string,
  ): ResolvedPolicy {
    const pick = <K extends keyof NormalizedOrchestrateOptions>(k: K) => {
      const r = route[k];
      const c = controller?.[k];
      if (r === false || (r === undefined && (c === false || c === undefined))) return undefined;
      return { ...this.options[k], ...(c || {}), ...(r || {}) } as Exclude<NormalizedOrchestrateOptions[K], false>;
    };
    const dedup = pick('dedup');
    const breaker = pick('breaker');
    const concurrency = pick('concurrency');
    const timeout = pick('timeout');
    const retry = pick('retry');
    return {
      dedup: dedup && {
        windowMs: dedup.windowMs ?? DEFAULT_DEDUP.windowMs,
        cacheAnswers: dedup.cacheAnswers ?? DEFAULT_DEDUP.cacheAnswers,
        maxEntryBytes: dedup.maxEntryBytes ?? DEFAULT_DEDUP.maxEntryBytes,
        cancelWhenAbandoned: dedup.cancelWhenAbandoned ?? DEFAULT_DEDUP.cancelWhenAbandoned,
        key: dedup.key,
        credential: dedup.credential,
      },
      breaker: breaker && this.breakers.get(breaker.name ?? defaultName, breaker),
      limiter: concurrency && this.limiters.get(concurrency.name ?? defaultName, concurrency),
      timeLimits: timeout && timeLimitsOf(timeout, defaultName),
      retry: retry && {
        retries: retry.retries ?? DEFAULT_RETRY.retries,
        baseDelayMs: retry.baseDelayMs ?? DEFAULT_RETRY.baseDelayMs,
        maxDelayMs: retry.maxDelayMs ?? DEFAULT_RETRY.maxDelayMs,
        shouldRetry: retry.shouldRetry ?? isTransientFailure,
      },
    };
  }

  /** The dedup key of an HTTP request under a route's policy; `undefined` skips dedup. */
  keyOf(policy: ResolvedPolicy, request: DedupRequest): string | undefined {
    const dedup = policy.dedup;
    if (!dedup) return undefined;
    if (dedup.key) return dedup.key(request);
    const input: DedupKeyInput = {
      method: request.method,
      url: request.url,
      body: request.body,
      credential: dedup.credential ? dedup.credential(request) : defaultCredential(request.headers),
    };
    return dedupKey(input);
  }

  health(): OrchestratorHealth {
    return {
      breakers: this.breakers.snapshot(),
      limiters: this.limiters.snapshot(),
      inFlight: this.pipeline.inFlight,
      dedup: { ...this.pipeline.outcomes },
      clientsGone: this.clientsGone,
    };
  }

  /** Counts a client that hung up before its answer was written (for `health()`). */
  noteClientGone(): void {
    this.clientsGone++;
  }

  async onModuleDestroy(): Promise<void> {
    this.breakers.shutdown();
    await this.window.disconnect().catch(() => undefined);
  }
}

function timeLimitsOf(timeout: Partial<TimeoutOptions>, where: string): TimeLimits {
  const ms = timeout.ms;
  if (ms === undefined) {
    throw new OrchestratorConfigError(
      `${where}: timeout has no duration; give one, or set OrchestratorModule.forRoot({ timeout: { ms } })`,
    );
  }
  return { totalMs: ms, firstChunkMs: timeout.firstChunkMs ?? ms, idleMs: timeout.idleMs ?? ms };
}

function defaultCredential(headers: DedupRequest['headers']): string | undefined {
  const value = headers.authorization ?? headers['x-api-key'];
  return Array.isArray(value) ? value.join(',') : value;
}

function observeWork<T>(work: (signal: AbortSignal) => Promise<T> | ObservableInput<T>, signal: AbortSignal) {
  const result = work(signal);
  return isObservable(result) ? result : from(result);
}


