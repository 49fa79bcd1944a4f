import type { Keyv } from 'keyv';
import { Observable, from, isObservable, lastValueFrom, type ObservableInput } from 'rxjs';
import { BreakerRegistry } from './breaker/breaker.registry.js';
import { checkBreakerOptions, type BreakerOptions } from './breaker/breaker.options.js';
import type { BreakerSnapshot } from './breaker/circuit-breaker.js';
import { guardedCall, toCallEvents, type CallWork } from './call.js';
import { CONCURRENCY_FIELDS, type ConcurrencyOptions } from './concurrency/concurrency.options.js';
import { ConcurrencyRegistry, type LimiterSnapshot } from './concurrency/concurrency.registry.js';
import { AnswerWindow, replayEntry, type StoreState, type WindowHealth } from './dedup/answer-window.js';
import { DEDUP_FIELDS, type DedupOptions, type DedupRequest } from './dedup/dedup.options.js';
import { dedupKey } from './dedup/dedup-key.js';
import { SingleFlight, type DedupOutcome } from './dedup/single-flight.js';
import type { CallEvent } from './events.js';
import { OrchestratorConfigError, checkFields, describeValue, withDefaults, type Fields } from './options.js';
import {
  mergeCapability,
  normalizeOrchestrate,
  resolveDedup,
  resolveTimeLimits,
  type OrchestrateOptions,
  type RoutePolicy,
  type RouteSettings,
} from './policy.js';
import { RETRY_FIELDS, type RetryOptions } from './retry/retry.options.js';
import { RetryPolicy } from './retry/retry.policy.js';
import { TIMEOUT_FIELDS, type TimeoutOptions } from './timeout/timeout.options.js';

/** Module-wide defaults; decorators on a class or route override them field by field. */
export interface OrchestratorOptions {
  dedup?: DedupOptions;
  breaker?: BreakerOptions;
  concurrency?: ConcurrencyOptions;
  timeout?: TimeoutOptions;
  /** Retries of transient upstream failures (off unless a route asks for them). */
  retry?: RetryOptions;
  /** Settings of named breakers (e.g. a health probe), applied when that breaker is first used. */
  breakers?: Record<string, BreakerOptions>;
  /** Settings of named concurrency limiters. */
  limits?: Record<string, ConcurrencyOptions>;
  /** Keyv stores for the answer window, e.g. `[new Keyv(new KeyvRedis(url))]` to share it across replicas. */
  windowStores?: Keyv[];
}

const MODULE_FIELDS = {
  dedup: { check: 'object' },
  breaker: { check: 'object' },
  concurrency: { check: 'object' },
  timeout: { check: 'object' },
  retry: { check: 'object' },
  breakers: { check: 'object' },
  limits: { check: 'object' },
  windowStores: { check: 'array' },
} as const satisfies Fields<OrchestratorOptions>;

/** Throws `OrchestratorConfigError` naming the first option that cannot work. */
export function validateOrchestratorOptions(options: unknown): OrchestratorOptions {
  const value = options ?? {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new OrchestratorConfigError(`options must be an object, got ${describeValue(value)}`);
  }
  checkFields<OrchestratorOptions>('options', value, MODULE_FIELDS);
  const o = value as OrchestratorOptions;
  checkFields('dedup', o.dedup, DEDUP_FIELDS);
  checkBreakerOptions('breaker', o.breaker);
  checkFields('concurrency', o.concurrency, CONCURRENCY_FIELDS);
  checkFields('timeout', o.timeout, TIMEOUT_FIELDS);
  if (o.timeout !== undefined && o.timeout.ms === undefined) throw new OrchestratorConfigError('timeout.ms is required');
  checkFields('retry', o.retry, RETRY_FIELDS);
  for (const [name, breaker] of Object.entries(o.breakers ?? {})) checkBreakerOptions(`breakers.${name}`, breaker);
  for (const [name, limit] of Object.entries(o.limits ?? {})) checkFields(`limits.${name}`, limit, CONCURRENCY_FIELDS);
  const isStore = (store: unknown) =>
    typeof store === 'object' && store !== null && typeof (store as Keyv).get === 'function' && typeof (store as Keyv).set === 'function';
  if (o.windowStores !== undefined && !o.windowStores.every(isStore)) {
    throw new OrchestratorConfigError('windowStores must be an array of Keyv instances');
  }
  return o;
}

/** What `run` is given instead of a reusable policy: the capabilities, and the call's dedup key. */
export interface RunOptions extends OrchestrateOptions {
  /** Dedup key of this call (required for dedup; hash whatever identifies the answer, tenant included). */
  key?: string;
  /** Stop waiting when this aborts: the call itself goes on for whoever else joined it. */
  signal?: AbortSignal;
}

/** Per-call facts `run` needs alongside a reusable policy. */
export interface RunCall {
  key?: string;
  signal?: AbortSignal;
}

export interface StartedCall<T> {
  /** Absent when the call was not deduplicated. */
  outcome?: DedupOutcome;
  events: Observable<CallEvent<T>>;
}

export interface OrchestratorHealth {
  /** The answer window: entries, bytes, and its shared store's state (if it has one). */
  window: WindowHealth;
  breakers: BreakerSnapshot[];
  limiters: LimiterSnapshot[];
  /** Deduplicated calls in flight. */
  inFlight: number;
  /** How deduplicated requests were answered since start. */
  dedup: Record<DedupOutcome, number>;
  /** Clients that hung up before their answer was written. */
  clientsGone: number;
}

export interface OrchestratorHooks {
  /** The shared window store failed (reported once per outage; requests go on as misses) or is back. */
  onStoreState?: (state: StoreState, error?: unknown) => void;
}

const POLICY = Symbol.for('nest-prompt-orchestrator.route-policy');

/**
 * The engine, without any framework: dedup (singleflight + window of recent
 * answers), circuit breakers, concurrency limits, timeouts and retries, in a
 * fixed order. The Nest module wraps one; a queue worker or a script can
 * build its own.
 *
 * @example
 * ```ts
 * const orchestrator = new Orchestrator({ breakers: { openai: { failureThreshold: 3 } } });
 * const summaries = orchestrator.policy({ dedup: true, breaker: 'openai', concurrency: 8, timeout: 30_000 });
 * const answer = await orchestrator.run(summaries, (signal) => summarize(doc, { signal }), { key: `${tenant}:${doc.id}` });
 * ```
 */
export class Orchestrator {
  readonly breakers: BreakerRegistry;
  readonly limiters: ConcurrencyRegistry;
  /** How deduplicated requests were answered since start. */
  readonly outcomes: Record<DedupOutcome, number> = { miss: 0, joined: 0, cached: 0 };
  private readonly options: OrchestratorOptions;
  private readonly window: AnswerWindow;
  private readonly flights = new SingleFlight<unknown>();
  private clientsGone = 0;

  constructor(options?: OrchestratorOptions, hooks: OrchestratorHooks = {}) {
    this.options = validateOrchestratorOptions(options);
    this.breakers = new BreakerRegistry(this.options.breaker, this.options.breakers);
    this.limiters = new ConcurrencyRegistry(this.options.concurrency, this.options.limits);
    const dedup = withDefaults(DEDUP_FIELDS, this.options.dedup);
    if (dedup.maxEntryBytes > dedup.maxBytes) {
      throw new OrchestratorConfigError(`dedup.maxEntryBytes (${dedup.maxEntryBytes}) must not exceed dedup.maxBytes (${dedup.maxBytes})`);
    }
    this.window = new AnswerWindow({
      maxEntries: dedup.maxEntries,
      maxBytes: dedup.maxBytes,
      stores: this.options.windowStores,
      storeTimeoutMs: dedup.storeTimeoutMs,
      storeRetryMs: dedup.storeRetryMs,
      onStoreState: hooks.onStoreState,
    });
  }

  /**
   * Resolves what a caller asks for into a policy, once; keep it and pass it to
   * `run` for every call, so nothing is resolved per call.
   */
  policy(options: OrchestrateOptions, name = 'default'): RoutePolicy {
    return this.resolve(normalizeOrchestrate(options, `policy "${name}"`), undefined, name);
  }

  /**
   * Merges module defaults with class and route settings (route wins, field by
   * field). A capability is on only where a class or route asks for it.
   * `defaultName` names the breaker and limiter when the settings do not.
   */
  resolve(route: RouteSettings, controller: RouteSettings | undefined, defaultName: string, name = defaultName): RoutePolicy {
    const pick = <K extends keyof RouteSettings>(k: K) =>
      mergeCapability(k, this.options[k] as Exclude<RouteSettings[K], false> | undefined, controller, route);
    const dedup = pick('dedup');
    const breaker = pick('breaker');
    const concurrency = pick('concurrency');
    const timeout = pick('timeout');
    const retry = pick('retry');
    return {
      [POLICY]: true,
      name,
      dedup: dedup && resolveDedup(dedup, this.window),
      breaker: breaker && this.breakers.get(breaker.name ?? defaultName, breaker),
      limiter: concurrency && this.limiters.get(concurrency.name ?? defaultName, concurrency),
      timeLimits: timeout && resolveTimeLimits(timeout, name),
      retry: retry && new RetryPolicy(retry),
    } as RoutePolicy;
  }

  /**
   * Starts a call under a policy; the low-level entry point of the Nest
   * interceptor. `key` undefined (or a policy without dedup) skips dedup.
   * The call starts when `events` is subscribed; unsubscribing leaves it.
   */
  async start<T>(policy: RoutePolicy, key: string | undefined, work: CallWork<T>): Promise<StartedCall<T>> {
    const dedup = policy.dedup;
    if (!dedup || key === undefined) return { events: guardedCall(policy, work) };
    const flights = this.flights as SingleFlight<T>;
    const running = flights.join(key);
    if (running) return this.answer('joined', running);
    const window = dedup.window;
    if (window) {
      let stored = window.getLocal<T>(key);
      if (!stored && window.hasShared) {
        stored = await window.getShared<T>(key);
        // Another request may have started the same call while the shared store was read.
        const started = stored ? undefined : flights.join(key);
        if (started) return this.answer('joined', started);
      }
      if (stored) return this.answer('cached', from(replayEntry(stored)));
    }
    let reachedUpstream = false;
    const call = guardedCall(policy, work, () => (reachedUpstream = true));
    const events = flights.lead(key, call, {
      cancelWhenAbandoned: () => dedup.cancelWhenAbandoned || !reachedUpstream,
      maxEntryBytes: dedup.maxEntryBytes,
      onSuccess: window ? (entry) => window.set(key, entry, dedup.windowMs) : undefined,
    });
    return this.answer('miss', events);
  }

  /**
   * Runs `work` under a policy (from `policy()`, or options resolved for this
   * one call) and resolves with its result, shared with identical calls when
   * the policy deduplicates and a `key` is given.
   */
  run<T>(policy: RoutePolicy, work: (signal: AbortSignal) => Promise<T> | ObservableInput<T>, call?: RunCall): Promise<T>;
  run<T>(options: RunOptions, work: (signal: AbortSignal) => Promise<T> | ObservableInput<T>): Promise<T>;
  async run<T>(
    policyOrOptions: RoutePolicy | RunOptions,
    work: (signal: AbortSignal) => Promise<T> | ObservableInput<T>,
    call: RunCall = {},
  ): Promise<T> {
    let policy: RoutePolicy;
    if (isRoutePolicy(policyOrOptions)) policy = policyOrOptions;
    else {
      const { key, signal, ...capabilities } = policyOrOptions;
      policy = this.resolve(normalizeOrchestrate(capabilities, 'run()'), undefined, 'default', 'run()');
      call = { key, signal };
    }
    const started = await this.start<T>(policy, call.key, (signal) => toCallEvents<T>(from(observeWork(work, signal))));
    const event = await lastValueFrom(leaveOnAbort(started.events, call.signal));
    if (event.kind !== 'value') throw new TypeError('run() work must produce a plain value, not a stream');
    return event.value;
  }

  /** The dedup key of an HTTP request under a route's policy; `undefined` skips dedup. */
  requestKey(policy: RoutePolicy, request: DedupRequest): string | undefined {
    const dedup = policy.dedup;
    if (!dedup) return undefined;
    if (dedup.key) return dedup.key(request);
    return dedupKey({
      method: request.method,
      url: request.url,
      body: request.body,
      credential: dedup.credential ? dedup.credential(request) : defaultCredential(request.headers),
    });
  }

  health(): OrchestratorHealth {
    return {
      window: this.window.health(),
      breakers: this.breakers.snapshot(),
      limiters: this.limiters.snapshot(),
      inFlight: this.flights.size,
      dedup: { ...this.outcomes },
      clientsGone: this.clientsGone,
    };
  }

  /** Counts a client that hung up before its answer was written (for `health()`). */
  noteClientGone(): void {
    this.clientsGone++;
  }

  async close(): Promise<void> {
    this.breakers.shutdown();
    await this.window.disconnect().catch(() => undefined);
  }

  private answer<T>(outcome: DedupOutcome, events: Observable<CallEvent<T>>): StartedCall<T> {
    this.outcomes[outcome]++;
    return { outcome, events };
  }
}

export function isRoutePolicy(value: unknown): value is RoutePolicy {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[POLICY] === true;
}

function defaultCredential(headers: DedupRequest['headers']): string | undefined {
  const value = headers.authorization ?? headers['x-api-key'];
  return Array.isArray(value) ? value.join(',') : value;
}

function observeWork<T>(work: (signal: AbortSignal) => Promise<T> | ObservableInput<T>, signal: AbortSignal) {
  const result = work(signal);
  return isObservable(result) ? result : from(result);
}

/** The events, until `signal` aborts: then the caller stops waiting (with the signal's reason) and leaves the call. */
function leaveOnAbort<T>(events: Observable<T>, signal: AbortSignal | undefined): Observable<T> {
  if (!signal) return events;
  return new Observable<T>((subscriber) => {
    if (signal.aborted) return subscriber.error(signal.reason);
    const onAbort = () => subscriber.error(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    const subscription = events.subscribe(subscriber);
    return () => {
      signal.removeEventListener('abort', onAbort);
      subscription.unsubscribe();
    };
  });
}
