import type { Keyv } from 'keyv';
import { createHash } from 'node:crypto';
import { NEVER, Observable, from, isObservable, lastValueFrom, type ObservableInput, type Subscription } from 'rxjs';
import { BreakerRegistry } from './breaker/breaker.registry.js';
import { checkBreakerOptions, type BreakerOptions } from './breaker/breaker.options.js';
import type { BreakerSnapshot, BreakerState } from './breaker/circuit-breaker.js';
import { toCallEvents, type CallHandle, type CallWork } from './call.js';
import { planOver, upstreamCall } from './upstreams/failover-call.js';
import { UpstreamRegistry } from './upstreams/upstream.registry.js';
import { checkUpstreamPools, type UpstreamPoolOptions } from './upstreams/upstreams.options.js';
import type { Upstream, UpstreamSnapshot } from './upstreams/upstream-pool.js';
import { CONCURRENCY_FIELDS, type ConcurrencyOptions } from './concurrency/concurrency.options.js';
import { ConcurrencyRegistry, type LimiterSnapshot } from './concurrency/concurrency.registry.js';
import {
  AnswerWindow,
  replayEntry,
  type ByteKeeper,
  type StoreState,
  type WindowEntry,
  type WindowHealth,
  type WindowPayload,
} from './dedup/answer-window.js';
import { DEDUP_FIELDS, type DedupOptions, type DedupRequest } from './dedup/dedup.options.js';
import { dedupKey } from './dedup/dedup-key.js';
import { SingleFlight, type DedupOutcome, type LeadOptions } from './dedup/single-flight.js';
import type { BreakerCoordinator, FlightCoordinator } from './cluster/coordination.js';
import { describeError } from './bounded.js';
import { ShuttingDownError } from './errors.js';
import type { CallEvent } from './events.js';
import { ObserverHub, type OrchestratorObserver } from './observer.js';
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
import type { RequestSpan, RequestTracing } from './tracing/request-tracing.js';

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
  /**
   * Pools of interchangeable upstreams, by name. A policy whose breaker has a
   * pool's name sends each call to one of the pool's upstreams (each with its
   * own breaker and limiter, named after it), failing over before the first
   * byte. A pool of one is exactly the breaker and limiter of its one member.
   */
  upstreams?: Record<string, UpstreamPoolOptions>;
  /** Keyv stores for the answer window, e.g. `[new Keyv(new KeyvRedis(url))]` to share it across replicas. */
  windowStores?: Keyv[];
  /**
   * Who a request is for, when the app tells callers apart by something else
   * than their credentials (a user a guard attached, a session, an
   * `x-tenant-id` header). Default: the `authorization`, `x-api-key` and
   * `cookie` headers together, so callers that differ in any of them never
   * share an answer. The identity is hashed before use.
   */
  tenant?: (request: DedupRequest) => string | undefined;
  /**
   * Makes the app's replicas behave as one: one upstream call for identical
   * requests across the fleet (joiners on other replicas get its events), and
   * one breaker state. E.g. `new RedisCoordinator({ client, subscriber })`.
   * Without it, each replica dedups and breaks on its own.
   */
  coordinator?: FlightCoordinator & BreakerCoordinator;
  /**
   * OpenTelemetry traces (`await RequestTracing.create()`, needs
   * `@opentelemetry/api`): the request paths of this package start a server
   * span per request and pass it as `CallRequest.trace`. Default off: nothing
   * is traced and nothing is paid for it.
   */
  tracing?: RequestTracing;
}

const MODULE_FIELDS = {
  dedup: { check: 'object' },
  breaker: { check: 'object' },
  concurrency: { check: 'object' },
  timeout: { check: 'object' },
  retry: { check: 'object' },
  breakers: { check: 'object' },
  limits: { check: 'object' },
  upstreams: { check: 'object' },
  windowStores: { check: 'array' },
  tenant: { check: 'function' },
  coordinator: { check: 'object' },
  tracing: { check: 'object' },
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
  if (o.timeout !== undefined && o.timeout.ms === undefined)
    throw new OrchestratorConfigError('timeout.ms is required');
  checkFields('retry', o.retry, RETRY_FIELDS);
  for (const [name, breaker] of Object.entries(o.breakers ?? {})) checkBreakerOptions(`breakers.${name}`, breaker);
  for (const [name, limit] of Object.entries(o.limits ?? {})) checkFields(`limits.${name}`, limit, CONCURRENCY_FIELDS);
  checkUpstreamPools(o.upstreams);
  const isStore = (store: unknown) =>
    typeof store === 'object' &&
    store !== null &&
    typeof (store as Keyv).get === 'function' &&
    typeof (store as Keyv).set === 'function';
  if (o.windowStores !== undefined && !o.windowStores.every(isStore)) {
    throw new OrchestratorConfigError('windowStores must be an array of Keyv instances');
  }
  return o;
}

/** What `run` is given instead of a reusable policy: the capabilities, and the call's dedup key. */
export interface RunOptions extends OrchestrateOptions {
  /** Dedup key of this call (required for dedup; hash whatever identifies the answer, tenant included). */
  key?: string;
  /** Who the call is for (any stable string): its fair share of the queue, and whose failure it is. */
  tenant?: string;
  /** Stop waiting when this aborts: the call itself goes on for whoever else joined it. */
  signal?: AbortSignal;
}

/** What one call asks of the window, from the caller's `Cache-Control` (or its own say). */
export interface Reuse {
  /** A fresh answer: not from the window, not joined to a call in flight (`no-cache`). */
  noCache?: boolean;
  /** This call's answer is not kept in the window (`no-store`). */
  noStore?: boolean;
  /** A stored answer older than this is not used (`max-age`). */
  maxAgeMs?: number;
}

/** One call's facts, beside its route's policy. */
export interface CallRequest {
  /** Dedup key (tenant included); without it nothing is shared. */
  key?: string;
  /**
   * What the request that leads the call wants the requests that reuse its
   * answer to know (e.g. a few fields of its body, which they then need not
   * read): kept with the flight and stored with the answer (plain data, when
   * the window has a shared store), and returned as `StartedCall.tag` to a
   * request that joins the call or replays the answer.
   */
  tag?: unknown;
  /** The caller's tenant (already hashed, see `tenantOf`): its line in the queue, and whose failure it is. */
  tenant?: string;
  reuse?: Reuse;
  /**
   * The request's server span (`RequestTracing.startServerSpan`): the call
   * records its dedup outcome and breaker state on it, links it to the
   * leader's span when it joins another's call (on any replica), and gives the
   * upstream call a client span under it.
   */
  trace?: RequestSpan;
}

/** Per-call facts `run` needs alongside a reusable policy. */
export interface RunCall extends CallRequest {
  /** Stop waiting when this aborts: the call itself goes on for whoever else joined it. */
  signal?: AbortSignal;
}

export interface StartedCall<T> {
  /** Absent when the call was not deduplicated. */
  outcome?: DedupOutcome;
  /** How old a `cached` answer is, in whole seconds (the `Age` header). */
  ageSeconds?: number;
  events: Observable<CallEvent<T>>;
  /**
   * A `cached` answer as the window holds it: a caller may write it as it is
   * (a body, or a stream's head and chunks) instead of subscribing to `events`.
   */
  stored?: WindowPayload<T>;
  /** The leader's `CallRequest.tag`, for a request that joined its call or replays its answer (when it gave one). */
  tag?: unknown;
}

export interface OrchestratorHealth {
  /** The answer window: entries, bytes, and its shared store's state (if it has one). */
  window: WindowHealth;
  breakers: BreakerSnapshot[];
  limiters: LimiterSnapshot[];
  /** Every upstream of every pool: health, breaker, limit, in flight, queued. */
  upstreams: UpstreamSnapshot[];
  /** Deduplicated calls in flight. */
  inFlight: number;
  /** Callers waiting on those calls (the leaders included): a herd of 300 is 1 in flight, 300 waiting. */
  callersWaiting: number;
  /** Bytes the streams in flight keep for late joiners and the window, together (bounded by `dedup.maxInFlightBytes`). */
  inFlightBytes: number;
  /** How deduplicated requests were answered since start. */
  dedup: Record<DedupOutcome, number>;
  /** Clients that hung up before their answer was written. */
  clientsGone: number;
  /** With a `coordinator`: whether the replicas share calls and breakers right now. */
  coordination?: { state: 'ok' | 'degraded'; error?: string };
}

/** A call in flight, as `flightsInFlight` lists it. */
export interface FlightSnapshot {
  /** 12 characters of a one-way digest of the dedup key: the same call has the same key on every replica. */
  key: string;
  route?: string;
  upstream?: string;
  /** Callers of this process waiting on the call (its leader's included). */
  callers: number;
  ageMs: number;
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
  // Not public: their snapshots are in `health()`, one breaker's state in `breakerState()`.
  protected readonly breakers: BreakerRegistry;
  protected readonly limiters: ConcurrencyRegistry;
  /** The pools of upstreams (`options.upstreams`), with their members' health, breakers and limiters. */
  readonly upstreams: UpstreamRegistry;
  /** How deduplicated requests were answered since start. */
  readonly outcomes: Record<DedupOutcome, number> = { miss: 0, joined: 0, cached: 0 };
  private readonly options: OrchestratorOptions;
  private readonly window: AnswerWindow;
  private readonly flights: SingleFlight<unknown>;
  private clientsGone = 0;
  private closing = false;
  /** Present only while somebody observes: unobserved, every event costs one property check. */
  private hub?: ObserverHub;

  constructor(options?: OrchestratorOptions, hooks: OrchestratorHooks = {}) {
    this.options = validateOrchestratorOptions(options);
    this.breakers = new BreakerRegistry(this.options.breaker, this.options.breakers, this.options.coordinator);
    this.limiters = new ConcurrencyRegistry(this.options.concurrency, this.options.limits);
    this.upstreams = new UpstreamRegistry(this.options.upstreams, this.breakers, this.limiters);
    const dedup = withDefaults(DEDUP_FIELDS, this.options.dedup);
    if (dedup.maxEntryBytes > dedup.maxBytes) {
      throw new OrchestratorConfigError(
        `dedup.maxEntryBytes (${dedup.maxEntryBytes}) must not exceed dedup.maxBytes (${dedup.maxBytes})`,
      );
    }
    if (dedup.maxEntryBytes > dedup.maxInFlightBytes) {
      throw new OrchestratorConfigError(
        `dedup.maxEntryBytes (${dedup.maxEntryBytes}) must not exceed dedup.maxInFlightBytes (${dedup.maxInFlightBytes})`,
      );
    }
    this.flights = new SingleFlight({ maxHeldBytes: dedup.maxInFlightBytes });
    this.window = new AnswerWindow({
      maxEntries: dedup.maxEntries,
      maxBytes: dedup.maxBytes,
      stores: this.options.windowStores,
      storeTimeoutMs: dedup.storeTimeoutMs,
      storeRetryMs: dedup.storeRetryMs,
      onStoreState: (state, error) => {
        hooks.onStoreState?.(state, error);
        this.hub?.storeState(state, error === undefined ? undefined : describeError(error));
      },
    });
  }

  /**
   * Tells `observer` what happens from now on (requests and their dedup
   * outcome, breaker transitions, refusals, timeouts, retries, queue waits,
   * upstream latency, the shared store's state). Returns a function that stops
   * it. Gauges (in flight, queued, window size, breaker state) are read from
   * `health()` when needed, not pushed.
   */
  observe(observer: OrchestratorObserver): () => void {
    const hub = (this.hub ??= new ObserverHub());
    hub.add(observer);
    this.breakers.onTransition((name, from, to, at, remote) => this.hub?.breakerTransition(name, from, to, at, remote));
    return () => {
      hub.remove(observer);
      if (hub.size === 0 && this.hub === hub) {
        this.hub = undefined;
        this.breakers.onTransition(undefined);
      }
    };
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
   * @internal
   */
  resolve(
    route: RouteSettings,
    controller: RouteSettings | undefined,
    defaultName: string,
    name = defaultName,
  ): RoutePolicy {
    const pick = <K extends keyof RouteSettings>(k: K) =>
      mergeCapability(k, this.options[k] as Exclude<RouteSettings[K], false> | undefined, controller, route);
    const dedup = pick('dedup');
    const breaker = pick('breaker');
    const concurrency = pick('concurrency');
    const timeout = pick('timeout');
    const retry = pick('retry');
    const base = {
      [POLICY]: true,
      name,
      dedup: dedup && resolveDedup(dedup, this.window),
      timeLimits: timeout && resolveTimeLimits(timeout, name),
      retry: retry && new RetryPolicy(retry),
    };
    const pool = breaker ? this.upstreams.get(breaker.name ?? defaultName) : undefined;
    if (!pool) {
      return {
        ...base,
        breaker: breaker && this.breakers.get(breaker.name ?? defaultName, breaker),
        limiter: concurrency && this.limiters.get(concurrency.name ?? defaultName, concurrency),
      };
    }
    // Over a pool, failing over is the retry: an attempt is not repeated on the upstream that just failed it.
    if (!pool.dynamic && pool.members.length === 1) {
      const upstream = pool.members[0];
      return { ...base, breaker: upstream.breaker, limiter: concurrency ? upstream.limiter : undefined, upstream };
    }
    const plan = planOver(pool, {
      base: { ...base, retry: undefined },
      limited: Boolean(concurrency),
      retry: base.retry,
    });
    return { ...base, retry: undefined, failover: plan };
  }

  /**
   * Starts a call under a policy; the low-level entry point of the Nest
   * interceptor. Without a `key` (or under a policy without dedup) nothing is
   * shared. The call starts when `events` is subscribed; unsubscribing leaves it.
   * @internal
   */
  async start<T>(policy: RoutePolicy, call: CallRequest, work: CallWork<T>): Promise<StartedCall<T>> {
    const hub = this.hub;
    if (this.closing) {
      hub?.refused(upstreamOf(policy), 'shutting_down');
      throw new ShuttingDownError();
    }
    const { key, tenant, reuse, trace } = call;
    const source = { key, tenant };
    const dedup = policy.dedup;
    if (!dedup || key === undefined) {
      hub?.request(policy.name, upstreamOf(policy), 'none');
      trace?.setOutcome('none', upstreamOf(policy), policy.breaker?.state);
      return { events: upstreamCall(policy, work, { source, observer: hub, trace }) };
    }
    const flights = this.flights as SingleFlight<T>;
    // no-cache: a fresh answer, neither joined nor from the window (it then replaces what the window holds).
    const local = this.findLocal<T>(policy, call);
    if (local) return local;
    const coordinator = this.options.coordinator;
    if (reuse?.noCache || !(dedup.window?.hasShared || coordinator)) {
      const lead = new Lead<T>(policy, call, work, hub, 'miss', false);
      return this.answer(policy, 'miss', this.register(key, lead, lead.call()), trace);
    }
    // The flight is registered before any I/O: every identical request in this process joins it, whatever the
    // shared store and the fleet do (slow, frozen or gone). They only decide where its events come from.
    const lead = new Lead<T>(policy, call, work, hub, undefined, true);
    const found = this.findShared<T>(policy, key, reuse, () => lead.call(), trace);
    const events = this.register(key, lead, afterFound(found));
    const { outcome: settled, ageSeconds, leader, tag } = await found;
    lead.outcome = settled;
    // Joiners here link to whoever leads the call: this request, or the request of another replica it follows.
    if (trace?.recording) flights.setLeader(events, settled === 'miss' ? trace.traceparent : leader);
    const started = this.answer(policy, settled, events, trace, leader);
    if (ageSeconds !== undefined) started.ageSeconds = ageSeconds;
    if (tag !== undefined) started.tag = tag;
    return started;
  }

  /**
   * Where a flight's events come from when this process has no answer: the
   * shared window, else the fleet (follow the replica that leads the call, or
   * lead it), else a call of our own. Never rejects: a store or a fleet that
   * fails is a miss, and the call is made here (once per process and key).
   */
  private async findShared<T>(
    policy: RoutePolicy,
    key: string,
    reuse: Reuse | undefined,
    lead: () => Observable<CallEvent<T>>,
    trace: RequestSpan | undefined,
  ): Promise<Found<T>> {
    try {
      const window = policy.dedup!.window;
      if (window?.hasShared) {
        const stored = await window.getShared<T>(key);
        const replay = stored && replayable(stored, reuse);
        if (replay) return { outcome: 'cached', ...replay, tag: stored.tag };
      }
      const traceparent = trace?.traceparent;
      const claim = await this.options.coordinator?.claim<T>(
        key,
        lead,
        traceparent ? { trace: traceparent } : undefined,
      );
      if (claim?.role === 'follow') return { outcome: 'joined', events: claim.events, leader: claim.leader };
      if (claim) {
        // Nobody here waits any more: the fleet is told at once (followers elsewhere take the call over).
        return {
          outcome: 'miss',
          events: claim.publish(lead()),
          abandon: () => claim.publish<T>(NEVER).subscribe().unsubscribe(),
        };
      }
    } catch {
      // A coordinator of the app's own that throws is a coordinator that is away.
    }
    return { outcome: 'miss', events: lead() };
  }

  /**
   * Makes the leader's guarded call (or the events found for it) the flight under the call's key, recorded for the
   * window when it succeeds: by the leader in memory and the shared store, by a replica that followed another in
   * memory only, not at all when it was replayed from the window (`lead.outcome` tells, once the flight is known).
   */
  private register<T>(key: string, lead: Lead<T>, events: Observable<CallEvent<T>>): Observable<CallEvent<T>> {
    return (this.flights as SingleFlight<T>).lead(key, events, lead);
  }

  /**
   * `start` without a promise, when nothing has to be asked of a shared store
   * or the fleet: a call in flight under the key to join, an answer the
   * in-memory window holds, or the call led from here. `undefined` when the call
   * needs such I/O (or the orchestrator is closing): then call `start`.
   * @internal
   */
  startLocal<T>(policy: RoutePolicy, call: CallRequest, work: CallWork<T>): StartedCall<T> | undefined {
    if (this.closing) return undefined;
    const { key, tenant, reuse, trace } = call;
    const dedup = policy.dedup;
    if (!dedup || key === undefined) {
      this.hub?.request(policy.name, upstreamOf(policy), 'none');
      trace?.setOutcome('none', upstreamOf(policy), policy.breaker?.state);
      return { events: upstreamCall(policy, work, { source: { key, tenant }, observer: this.hub, trace }) };
    }
    if (!reuse?.noCache) {
      const found = this.findLocal<T>(policy, call);
      if (found) return found;
      if (dedup.window?.hasShared || this.options.coordinator) return undefined;
    }
    const lead = new Lead<T>(policy, call, work, this.hub, 'miss', false);
    return this.answer(policy, 'miss', this.register(key, lead, lead.call()), trace);
  }

  /**
   * The call answered from this process alone, if it can be: joined to a
   * call in flight under its key, or replayed from the in-memory window.
   * `undefined` when it would have to be made (or asked of a shared store or
   * the fleet): nothing is started then.
   * @internal
   */
  findLocal<T>(policy: RoutePolicy, call: CallRequest): StartedCall<T> | undefined {
    const found = this.peekLocal<T>(policy, call);
    return found && this.answerLocal(policy, call, found);
  }

  /**
   * What this process holds for the call's key (a call in flight, an answer
   * in the in-memory window), without answering with it yet: nothing is
   * counted or started. Lets a caller that has the request's key before it
   * has read the whole request skip that reading for a request it will not
   * send (the leader's `tag` stands for it), and admit it before it answers.
   * @internal
   */
  peekLocal<T>(policy: RoutePolicy, call: CallRequest): LocalAnswer<T> | undefined {
    const { key, reuse } = call;
    const dedup = policy.dedup;
    if (!dedup || key === undefined || reuse?.noCache || this.closing) return undefined;
    const running = (this.flights as SingleFlight<T>).find(key);
    if (running) return { events: running.events, tag: running.tag };
    const stored = dedup.window?.getLocal<T>(key);
    if (!stored) return undefined;
    const ageSeconds = ageOf(stored, reuse);
    return ageSeconds === undefined ? undefined : { stored, ageSeconds, tag: stored.tag };
  }

  /**
   * The call answered with what `peekLocal` found (joined, or replayed), counted as such.
   * @internal
   */
  answerLocal<T>(policy: RoutePolicy, call: CallRequest, found: LocalAnswer<T>): StartedCall<T> {
    if (found.stored) {
      this.count(policy, 'cached', call.trace);
      return new Replay(found.stored, found.ageSeconds!);
    }
    const joined = this.joined(policy, found.events!, call.trace);
    joined.tag = found.tag;
    return joined;
  }

  /** A request that waits on a call in flight here: its span links to the call's leader (now, or once the fleet says who). */
  private joined<T>(
    policy: RoutePolicy,
    running: Observable<CallEvent<T>>,
    trace: RequestSpan | undefined,
  ): StartedCall<T> {
    if (trace?.recording) (this.flights as SingleFlight<T>).onLeader(running, (leader) => trace.link(leader));
    return this.answer(policy, 'joined', running, trace);
  }

  /**
   * Runs `work` under a policy (from `policy()`, or options resolved for this
   * one call) and resolves with its result, shared with identical calls when
   * the policy deduplicates and a `key` is given.
   */
  run<T>(
    policy: RoutePolicy,
    work: (signal: AbortSignal, upstream?: Upstream) => Promise<T> | ObservableInput<T>,
    call?: RunCall,
  ): Promise<T>;
  run<T>(
    options: RunOptions,
    work: (signal: AbortSignal, upstream?: Upstream) => Promise<T> | ObservableInput<T>,
  ): Promise<T>;
  async run<T>(
    policyOrOptions: RoutePolicy | RunOptions,
    work: (signal: AbortSignal, upstream?: Upstream) => Promise<T> | ObservableInput<T>,
    call: RunCall = {},
  ): Promise<T> {
    let policy: RoutePolicy;
    if (isRoutePolicy(policyOrOptions)) policy = policyOrOptions;
    else {
      const { key, tenant, signal, ...capabilities } = policyOrOptions;
      policy = this.resolve(normalizeOrchestrate(capabilities, 'run()'), undefined, 'default', 'run()');
      call = { key, tenant, signal };
    }
    const callWork: CallWork<T> = (signal, upstream) => toCallEvents<T>(from(observeWork(work, signal, upstream)));
    const started = this.startLocal<T>(policy, call, callWork) ?? (await this.start<T>(policy, call, callWork));
    const event = await lastValueFrom(leaveOnAbort(started.events, call.signal));
    if (event.kind !== 'value') throw new TypeError('run() work must produce a plain value, not a stream');
    return event.value;
  }

  /**
   * The caller's identity, derived once per request: `options.tenant` (an app's
   * own: a user from a guard, a session, a header), else the credentials the
   * request carries (`authorization`, `x-api-key` and `cookie` together). It
   * is hashed (never kept or shown as it was), then used for the dedup key,
   * the fair share of the concurrency queue, and attributing failures.
   * @internal
   */
  tenantOf(request: DedupRequest): string | undefined {
    const identity = this.options.tenant ? this.options.tenant(request) : defaultIdentity(request.headers);
    return identity === undefined || identity === '' ? undefined : hashIdentity(identity);
  }

  /**
   * The dedup key of an HTTP request under a route's policy, for a caller whose tenant is known; `undefined` skips dedup.
   * @internal
   */
  requestKey(policy: RoutePolicy, request: DedupRequest, tenant: string | undefined): string | undefined {
    const dedup = policy.dedup;
    if (!dedup) return undefined;
    if (dedup.key) return dedup.key(request);
    return dedupKey({ method: request.method, url: request.url, body: request.body, credential: tenant });
  }

  /**
   * Stored streams' bytes go to `keeper` from now on (see `ByteKeeper`): set before any answer is stored.
   * @internal
   */
  keepWindowBytes(keeper: ByteKeeper): void {
    this.window.keeper = keeper;
  }

  health(): OrchestratorHealth {
    return {
      window: this.window.health(),
      breakers: this.breakers.snapshot(),
      limiters: this.limiters.snapshot(),
      upstreams: this.upstreams.snapshot(),
      inFlight: this.flights.size,
      callersWaiting: this.flights.callers,
      inFlightBytes: this.flights.heldBytes,
      dedup: { ...this.outcomes },
      clientsGone: this.clientsGone,
      coordination: this.options.coordinator?.health?.(),
    };
  }

  /** The state of the breaker of that name, if it was ever used. */
  breakerState(name: string): BreakerState | undefined {
    return this.breakers.find(name)?.state;
  }

  /** The tracing given in the options (`undefined`: requests are not traced). */
  get tracing(): RequestTracing | undefined {
    return this.options.tracing;
  }

  /**
   * The calls in flight with the most callers waiting on them (at most
   * `limit`), for a status page: a herd of 300 is one call with 300 callers.
   * `key` is a short one-way digest of the dedup key, never the key itself.
   */
  flightsInFlight(limit = 10): FlightSnapshot[] {
    const now = Date.now();
    return this.flights.busiest(limit).map((f) => ({
      key: hashIdentity(f.key).slice(0, 12),
      route: f.route,
      upstream: f.upstream,
      callers: f.callers,
      ageMs: now - f.startedAt,
    }));
  }

  /**
   * Whether the app says who a request is for (`options.tenant`), rather than relying on its credentials.
   * @internal
   */
  get hasTenantResolver(): boolean {
    return this.options.tenant !== undefined;
  }

  /**
   * Counts a client that hung up before its answer was written (for `health()`).
   * @internal
   */
  noteClientGone(): void {
    this.clientsGone++;
  }

  /** From now on new calls are refused with `ShuttingDownError`; calls in flight go on. */
  drain(): void {
    this.closing = true;
  }

  /** Whether `drain()` or `close()` was called. */
  get isClosing(): boolean {
    return this.closing;
  }

  /** Refuses new calls, stops the breakers' timers and probes, and closes the window's shared stores. */
  async close(): Promise<void> {
    this.closing = true;
    this.breakers.shutdown();
    await this.window.disconnect().catch(() => undefined);
  }

  private answer<T>(
    policy: RoutePolicy,
    outcome: DedupOutcome,
    events: Observable<CallEvent<T>>,
    trace?: RequestSpan,
    leader?: string,
  ): StartedCall<T> {
    this.count(policy, outcome, trace, leader);
    return { outcome, events };
  }

  /** How a request was answered: counted, told to the observers, and set on its span. */
  private count(policy: RoutePolicy, outcome: DedupOutcome, trace?: RequestSpan, leader?: string): void {
    this.outcomes[outcome]++;
    this.hub?.request(policy.name, upstreamOf(policy), outcome);
    if (trace) {
      trace.setOutcome(outcome, upstreamOf(policy), policy.breaker?.state);
      if (outcome === 'joined') trace.link(leader);
    }
  }
}

export function isRoutePolicy(value: unknown): value is RoutePolicy {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[POLICY] === true;
}

// Every header that commonly tells callers apart. Over-isolating costs only shared answers; under-isolating leaks them.
const IDENTITY_HEADERS = ['authorization', 'x-api-key', 'cookie'] as const;

function defaultIdentity(headers: DedupRequest['headers']): string | undefined {
  let identity: string | undefined;
  for (const name of IDENTITY_HEADERS) {
    const value = headers[name];
    if (value === undefined) continue;
    identity = `${identity ?? ''}${name}=${Array.isArray(value) ? value.join(',') : value}\n`;
  }
  return identity;
}

/** What this process holds for a key (see `Orchestrator.peekLocal`): a call in flight, or an answer the window holds. */
export interface LocalAnswer<T> {
  /** The call in flight's events. */
  readonly events?: Observable<CallEvent<T>>;
  /** The stored answer, and its age in whole seconds. */
  readonly stored?: WindowEntry<T>;
  readonly ageSeconds?: number;
  /** Its leader's `CallRequest.tag`. */
  readonly tag?: unknown;
}

/** Where a flight's events come from, once the shared window and the fleet have been asked. */
interface Found<T> {
  outcome: DedupOutcome;
  events: Observable<CallEvent<T>>;
  ageSeconds?: number;
  /** The leader's span on another replica (a `traceparent`), when this replica follows it. */
  leader?: string;
  /** Called instead of subscribing when every caller left before the flight was found (gives a won claim back). */
  abandon?: () => void;
  /** The stored answer's tag (see `CallRequest.tag`). */
  tag?: unknown;
}

/** A stored answer's age in whole seconds (the `Age` header), unless the caller asks for a younger one (`max-age`). */
function ageOf(stored: WindowEntry<unknown>, reuse: Reuse | undefined): number | undefined {
  const age = Date.now() - stored.storedAt;
  if (reuse?.maxAgeMs !== undefined && age > reuse.maxAgeMs) return undefined;
  return Math.max(0, Math.floor(age / 1000));
}

/** A stored answer's events and age, unless the caller asks for a younger one. */
function replayable<T>(
  stored: WindowEntry<T>,
  reuse: Reuse | undefined,
): { events: Observable<CallEvent<T>>; ageSeconds: number } | undefined {
  const ageSeconds = ageOf(stored, reuse);
  return ageSeconds === undefined ? undefined : { events: from(replayEntry(stored)), ageSeconds };
}

/** A call answered from the window: its events are made only for a caller that subscribes (others write `stored`). */
class Replay<T> implements StartedCall<T> {
  readonly outcome = 'cached';

  constructor(
    readonly stored: WindowEntry<T>,
    readonly ageSeconds: number,
  ) {}

  get tag(): unknown {
    return this.stored.tag;
  }

  get events(): Observable<CallEvent<T>> {
    return from(replayEntry(this.stored));
  }
}

/**
 * The leader side of one flight, as the flight sees it (`LeadOptions`): the
 * guarded call it makes, what is learnt of that call while it runs (its
 * handle), what happens when every caller has left, and where its answer is
 * recorded. One object per flight.
 */
class Lead<T> implements LeadOptions<T> {
  readonly handle: CallHandle = {};
  readonly maxEntryBytes: number;
  readonly leader?: string;
  readonly route: string;
  readonly upstream: string;
  readonly onSuccess?: (entry: WindowPayload<T>) => Promise<void> | undefined;
  readonly tag: unknown;
  private readonly window?: AnswerWindow;

  constructor(
    private readonly policy: RoutePolicy,
    private readonly request: CallRequest,
    private readonly work: CallWork<T>,
    private readonly observer: ObserverHub | undefined,
    /** How this process answers the key: `miss` (it leads), `joined` (it follows another replica), `cached`. Set once known. */
    public outcome: DedupOutcome | undefined,
    leaderPending: boolean,
  ) {
    const dedup = policy.dedup!;
    this.maxEntryBytes = dedup.maxEntryBytes;
    const trace = request.trace;
    this.leader = !trace?.recording ? undefined : leaderPending ? 'pending' : trace.traceparent;
    this.route = policy.name;
    this.upstream = upstreamOf(policy);
    this.window = request.reuse?.noStore ? undefined : dedup.window;
    this.tag = request.tag;
    // Called as the flight's option (`options.onSuccess(entry)`), so the method keeps this object as `this`.
    // eslint-disable-next-line @typescript-eslint/unbound-method
    if (this.window) this.onSuccess = this.record;
  }

  /** The guarded call (over the pool, if the policy has one). */
  call(): Observable<CallEvent<T>> {
    const { key, tenant, trace } = this.request;
    return upstreamCall(this.policy, this.work, {
      source: { key, tenant },
      handle: this.handle,
      observer: this.observer,
      trace,
    });
  }

  /**
   * Every caller gone: a call that has not reached the upstream is dropped; one still running is aborted when the
   * route says so, else keeps running for the window in the limiter's detached budget (cancelled when that is
   * full). One that has ended (a plain answer: the caller leaves as soon as it has it) is left to record itself.
   */
  cancelWhenAbandoned(): boolean {
    const handle = this.handle;
    if (!handle.reachedUpstream) return true;
    if (this.policy.dedup!.cancelWhenAbandoned && !(handle.call?.cancelled ?? false)) return true;
    return !(handle.call?.detach() ?? true);
  }

  private record(entry: WindowPayload<T>): Promise<void> | undefined {
    const window = this.window!;
    const { windowMs } = this.policy.dedup!;
    if (this.outcome === 'miss') return window.set(this.request.key!, entry, windowMs);
    if (this.outcome === 'joined') window.setLocal(this.request.key!, entry, windowMs);
    return undefined;
  }
}

/** The events of `found` once it settles; a subscriber that leaves before then makes it `abandon`. */
function afterFound<T>(found: Promise<Found<T>>): Observable<CallEvent<T>> {
  return new Observable<CallEvent<T>>((subscriber) => {
    let inner: Subscription | undefined;
    let left = false;
    void found.then((settled) => {
      if (left) settled.abandon?.();
      else inner = settled.events.subscribe(subscriber);
    });
    return () => {
      left = true;
      inner?.unsubscribe();
    };
  });
}

/** What a policy protects, as observers name it: its breaker, else its limiter, else the policy itself. */
export function upstreamOf(policy: RoutePolicy): string {
  return policy.breaker?.name ?? policy.failover?.pool.name ?? policy.limiter?.name ?? policy.name;
}

/** A short, stable, one-way form of an identity: safe to keep in memory maps, logs and metrics. */
export function hashIdentity(identity: string): string {
  return createHash('sha256').update(identity).digest('base64url').slice(0, 22);
}

function observeWork<T>(
  work: (signal: AbortSignal, upstream?: Upstream) => Promise<T> | ObservableInput<T>,
  signal: AbortSignal,
  upstream: Upstream | undefined,
) {
  const result = work(signal, upstream);
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
