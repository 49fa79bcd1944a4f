import OpossumBreaker from 'opossum';
import type { EventEmitter } from 'node:events';
import { CircuitOpenError, isOrchestratorError } from '../errors.js';
import type { WithDefaults } from '../options.js';
import type { BreakerCoordinator, SharedBreakerState } from '../cluster/coordination.js';
import { FailureAttribution, type CallSource } from './failure-attribution.js';
import { COUNTED_EVENTS, IdleRotation } from './idle-rotation.js';
import type { BREAKER_FIELDS, BreakerOptions, FAILURE_RATE_FIELDS, FailureRateOptions } from './breaker.options.js';
import type { BreakerState } from './breaker-state.js';

export type { BreakerState } from './breaker-state.js';

/** A breaker's settings with every default applied (see `BreakerOptions` for each field). */
export type CircuitBreakerOptions = Omit<
  WithDefaults<BreakerOptions, typeof BREAKER_FIELDS>,
  'name' | 'failureRate' | 'isFailure'
> & {
  failureRate?: WithDefaults<FailureRateOptions, typeof FAILURE_RATE_FIELDS>;
  isFailure: (error: unknown) => boolean;
};

export interface BreakerSnapshot {
  name: string;
  state: BreakerState;
  consecutiveFailures: number;
  /** Current open period, after doubling. */
  openMs: number;
  /** Epoch ms when the breaker last opened, if it is not closed. */
  openedAt?: number;
  /** Whether any call's outcome (or a health probe's) has been seen yet: before that, nobody knows the upstream's state. */
  observed: boolean;
}

type Action = () => Promise<unknown>;
type Opossum = OpossumBreaker<[Action, CallSource?], unknown>;

/** Half-open trials decided without a request (see `CircuitBreaker.trial`): the health probe sees the upstream down, */
const KNOWN_DOWN = new Error('The health probe sees the upstream down');
/** ... or, in a fleet, another replica probes it and this one waits for its word. */
const PROBER_DECIDES = new Error('Another replica probes the upstream');

/** opossum's default number of buckets in its rolling window. */
const ROLLING_BUCKETS = 10;

/** How long one probe's verdict answers for further failures: an attack of failing requests costs one probe a second. */
const VERDICT_TTL_MS = 1_000;

/**
 * One upstream's circuit breaker: opossum's state machine (closed / open /
 * half-open with a single probe) plus what opossum cannot express: opening
 * after N consecutive failures, doubling the open period after a failed probe,
 * and closing early once a health probe succeeds.
 *
 * With a health probe, failures open the breaker only when corroborated (see
 * `decide`): the probe sees the upstream down, or nobody has been answered for
 * `unansweredMs` while the upstream itself failed (not merely timed out). So
 * no group of callers can open it for the others while the upstream answers
 * them, and a long generation that runs past its time limit is not an outage.
 */
export class CircuitBreaker {
  /**
   * opossum's breaker for the current open period. Its `resetTimeout` is set once, when it is made, so a breaker
   * that opens for another period (doubled after a failed probe, or another replica's) is a new one made with it,
   * sharing the old one's rolling statistics through the documented `status` option (see `useBreakerFor`).
   */
  private breaker: Opossum;
  /** The open period `breaker` was made with. */
  private breakerPeriod: number;
  /** The current open period: `openMs`, doubled after each failed probe up to the cap, back to `openMs` on closing. */
  private openPeriod: number;
  /** Settings of every opossum breaker made here, but the open period. */
  private readonly opossumSettings: OpossumBreaker.Options<[Action, CallSource?]>;
  private readonly rotation: IdleRotation;
  /** Calls waiting in `waitUntilCallable`: woken when the breaker closes or half-opens. */
  private readonly callableWaiters = new Set<() => void>();
  /** A half-open trial stands in for the half-open request (see `trial`): the half-open state is not announced. */
  private trialPending = false;
  /** The next opening is this replica waiting for the prober's word: not announced to the fleet. */
  private quietOpen = false;
  private consecutiveFailures = 0;
  /** Failures of the current run that were the upstream's own (5xx, connection): not timeouts. */
  private hardFailures = 0;
  /** Which run of failures this is (a success starts the next): a verdict on an earlier run decides nothing. */
  private run = 0;
  private readonly attribution = new FailureAttribution();
  /**
   * Errors of calls through `fire()` that are not failures of the upstream: not one by their kind (a 4xx, a
   * refusal), or one request's or one tenant's own. Marked by the action, which knows the call's source; opossum's
   * `errorFilter`, which is given the error alone, lets them pass as successes.
   */
  private readonly notFailures = new NotFailures();
  /** The health probe asked whether the run of failures is an outage (see `decide`); calls wait for its verdict. */
  private confirming?: Promise<void>;
  /** The last confirmation probe's verdict, reused for `VERDICT_TTL_MS`. */
  private lastVerdict?: { up: boolean; at: number };
  /** When this breaker was made: "nobody answered for a while" counts from here at the earliest. */
  private readonly bornAt = Date.now();
  private openedAt?: number;
  /** The last health probe failed (and none has succeeded since). */
  private upstreamKnownDown = false;
  /**
   * Opened while the probe saw the upstream answering (a partial outage): the probe cannot tell when it is over,
   * so only the half-open request closes it.
   */
  private probeBlind = false;
  private probeTimer?: ReturnType<typeof setTimeout>;
  private probeAbort?: AbortController;
  /** Applying another replica's transition: not to be announced back. */
  private applyingRemote = false;
  /** With a fleet, whether this replica is its prober (the others wait for its word while open). */
  private prober = true;
  /** The fleet-wide count of the last failure, and the announcement it may have led to (both bounded in time). */
  private fleetCount?: Promise<void>;
  private announcing?: Promise<void>;
  /** The state last announced to `onTransition`. */
  private lastState: BreakerState = 'closed';
  private observed = false;
  /**
   * Told of every change of state (set by the registry when somebody observes the orchestrator); `remote`: applied
   * from another replica's (or worker's) announcement, not decided here.
   */
  onTransition?: (name: string, from: BreakerState, to: BreakerState, at: number, remote: boolean) => void;

  constructor(
    readonly name: string,
    private readonly options: CircuitBreakerOptions,
    /** Shares this breaker's state with the other replicas of the app (see `BreakerCoordinator`). */
    private readonly fleet?: BreakerCoordinator,
  ) {
    const rate = options.failureRate;
    this.rotation = new IdleRotation(Math.floor((rate?.windowMs ?? 10_000) / ROLLING_BUCKETS), ROLLING_BUCKETS);
    this.opossumSettings = {
      name,
      // Timeouts are applied (and the call really cancelled) by the caller's pipeline.
      timeout: false,
      // opossum opens when the rate is strictly above the threshold: 100 turns the mode off.
      errorThresholdPercentage: rate?.thresholdPercent ?? 100,
      volumeThreshold: rate?.minimumCalls ?? 0,
      rollingCountTimeout: rate?.windowMs ?? 10_000,
      rollingCountBuckets: ROLLING_BUCKETS,
      // The window's buckets rotate only while they hold something (opossum's own interval ticks forever), and nobody
      // reads opossum's periodic snapshots, which it would compute every bucket period.
      rotateBucketController: this.rotation,
      enableSnapshots: false,
      // Given the error only (as documented): the action below has already judged it.
      errorFilter: (error: unknown) => this.notFailures.take(error),
    };
    this.openPeriod = this.breakerPeriod = options.openMs;
    this.breaker = this.makeBreaker(options.openMs);
    if (fleet) {
      void fleet
        .watch(name, (state) => this.applyRemote(state))
        .then((current) => {
          if (current?.state === 'open') this.applyRemote(current);
        });
    }
  }

  /** An opossum breaker for open periods of `period` ms, with this class's listeners; `status`: the statistics so far. */
  private makeBreaker(period: number, status?: OpossumBreaker.Status): Opossum {
    // The source rides along as fire()'s second argument; the action judges its own failure (see `notFailures`).
    const breaker: Opossum = new OpossumBreaker((action: Action, source?: CallSource) => this.judged(action, source), {
      ...this.opossumSettings,
      resetTimeout: period,
      ...(status ? { status } : {}),
    });
    for (const event of COUNTED_EVENTS) (breaker as EventEmitter).on(event, this.rotation.wake);
    // opossum reports a filtered error as a success; a call its caller abandoned proves nothing either way.
    breaker.on('success', (result: unknown) => this.succeeded(result));
    breaker.on('failure', (error: unknown) => this.failed(breaker, error));
    breaker.on('open', () => {
      this.openedAt = Date.now();
      if (!this.probeBlind) this.scheduleProbe();
      const quiet = this.quietOpen;
      this.quietOpen = false;
      if (this.fleet && !this.applyingRemote && !quiet) {
        this.announcing = this.fleet.announce(this.name, {
          state: 'open',
          openMs: this.openPeriod,
          ...(this.probeBlind ? { probeBlind: true } : {}),
        });
      }
      this.noteState(quiet);
    });
    breaker.on('close', () => {
      this.resetRun();
      this.openedAt = undefined;
      this.upstreamKnownDown = false;
      this.probeBlind = false;
      this.openPeriod = this.options.openMs;
      this.stopProbe();
      if (this.fleet && !this.applyingRemote) void this.fleet.announce(this.name, { state: 'closed' });
      // Closed for good: the next opening (opossum's own, in the failure-rate mode) is for the first period.
      this.useBreakerFor(this.openPeriod);
      this.noteState();
      this.wakeWaiters();
    });
    breaker.on('halfOpen', () => {
      // The health probe has just seen the upstream down: a live request sent as the half-open probe would
      // only fail too (and cost a paid call). Its verdict is the half-open trial: a failed one.
      if (this.upstreamKnownDown) this.trial(KNOWN_DOWN);
      // In a fleet, only the prober tries the upstream; this replica waits for its word, refusing meanwhile.
      else if (!this.prober) this.trial(PROBER_DECIDES);
      else this.noteState();
      this.wakeWaiters();
    });
    return breaker;
  }

  /**
   * Makes `breaker` one whose open period is `period`, if it is not. The one it replaces changes state no more
   * (nor times anything); calls still in flight through it report their outcome here as before.
   */
  private useBreakerFor(period: number): void {
    if (period === this.breakerPeriod || this.breaker.isShutdown) return;
    const old = this.breaker;
    this.breakerPeriod = period;
    this.breaker = this.makeBreaker(period, old.status);
    for (const event of ['open', 'close', 'halfOpen'] as const) old.removeAllListeners(event);
  }

  /** Opens the breaker for `period` ms. */
  private openFor(period: number): void {
    this.openPeriod = period;
    this.useBreakerFor(period);
    this.breaker.open();
  }

  /**
   * Hands opossum the half-open trial's outcome without a request to the upstream: a trial that fails (as the
   * half-open request would have), after which opossum reopens the breaker.
   */
  private trial(verdict: Error): void {
    this.trialPending = true;
    void this.breaker.fire(() => Promise.reject(verdict)).catch(() => undefined);
  }

  /** A call through `breaker` failed (opossum's `failure` event). */
  private failed(breaker: Opossum, error: unknown): void {
    if (error === KNOWN_DOWN) this.doubleOpenPeriod();
    else if (error === PROBER_DECIDES) this.quietOpen = true;
    else {
      this.observed = true;
      this.onFailure(error);
    }
    this.trialPending = false;
    // A failure while half-open: opossum reopens the breaker the call went through next, for the period it was made
    // with. Opened here first when that is not the current breaker's or its period (what opossum then reopens is a
    // replaced breaker, which changes nothing).
    const current = this.breaker;
    if (current.halfOpen && (breaker !== current || this.openPeriod !== this.breakerPeriod))
      this.openFor(this.openPeriod);
  }

  private wakeWaiters(): void {
    for (const wake of [...this.callableWaiters]) wake();
  }

  private noteState(quiet = false): void {
    if (this.trialPending) return;
    const to = this.state;
    const from = this.lastState;
    if (to === from) return;
    this.lastState = to;
    this.onTransition?.(this.name, from, to, Date.now(), this.applyingRemote || quiet);
  }

  /** Another replica opened or closed this breaker: the same here, without counting anything. */
  private applyRemote(state: SharedBreakerState): void {
    if (this.breaker.isShutdown) return;
    this.applyingRemote = true;
    try {
      if (state.state === 'open' && !this.breaker.opened) {
        this.probeBlind = state.probeBlind === true;
        this.openFor(state.openMs ?? this.openPeriod);
      } else if (state.state === 'closed' && !this.breaker.closed) this.breaker.close();
    } finally {
      this.applyingRemote = false;
    }
  }

  get state(): BreakerState {
    if (this.breaker.closed) return 'closed';
    return this.breaker.halfOpen ? 'half_open' : 'open';
  }

  /** Whether a call would be let through right now (closed, or half-open with its probe not yet taken). */
  isCallable(): boolean {
    return this.breaker.closed || this.breaker.pendingClose;
  }

  /** Throws `CircuitOpenError` unless a call would be let through right now. */
  assertCallable(): void {
    if (this.isCallable()) return;
    throw this.refusal();
  }

  /** The error a refused call gets: when to come back, as `Retry-After` says it. */
  refusal(): CircuitOpenError {
    return new CircuitOpenError(this.name, this.retryAfterSeconds());
  }

  /**
   * Whether a call may be made without opossum's `fire()` (see `settle`): the
   * breaker is closed and opens on consecutive failures only. In that state
   * `fire()` does nothing but hand the outcome to the listeners this class
   * registers (its own statistics serve only the failure-rate mode), at the
   * price of a few promises and events per call (measured in
   * docs/benchmarks/2026-12-06-breaker-bypass.md); the state machine (open,
   * half-open with its single probe, the reset timer) stays opossum's.
   */
  get admitsDirect(): boolean {
    return this.breaker.closed && this.options.failureRate === undefined && !this.breaker.isShutdown;
  }

  /**
   * The outcome of a call made without `fire()` (see `admitsDirect`), up to its
   * first event (`error` undefined: it answered), counted exactly as `fire()`
   * would count it: a success resets the run of failures and gives its tenant
   * standing; a failure that is the upstream's counts (and may open the
   * breaker); one that is not counts as a success, as opossum reports a
   * filtered error. Returns what to wait for before answering the caller (a
   * failure being counted across the fleet), if anything.
   */
  settle(error: unknown, source?: CallSource): Promise<void> | undefined {
    if (error === undefined) {
      this.attribution.succeeded(source);
      this.succeeded(undefined);
      return undefined;
    }
    if (!this.options.isFailure(error) || !this.counts(source)) {
      this.succeeded(error);
      return this.fleetCount;
    }
    this.observed = true;
    this.onFailure(error);
    return this.fleetCount ?? this.confirming;
  }

  /**
   * While the health probe decides whether a run of failures is an outage, what new calls wait for (at most
   * `probeTimeoutMs`), so that an outage costs no more calls than the threshold; undefined the rest of the time.
   */
  get deciding(): Promise<void> | undefined {
    return this.confirming;
  }

  /**
   * Resolves once a call would be let through, or after `maxWaitMs`, or when
   * `signal` aborts, whichever comes first. Only a breaker with a health probe
   * can close that soon, so one without resolves at once.
   */
  waitUntilCallable(maxWaitMs: number, signal?: AbortSignal): Promise<void> {
    if (this.isCallable() || !this.options.healthProbe || signal?.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.callableWaiters.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, maxWaitMs);
      this.callableWaiters.add(done);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  /**
   * Runs `action` through the breaker; its rejection counts as a failure if
   * `isFailure` says so and it is the upstream's, not `source`'s (see
   * `FailureAttribution`).
   */
  async execute<T>(action: () => Promise<T>, source?: CallSource): Promise<T> {
    // While not closed, fire() lets only the half-open probe through. If its caller abandons it, reopen
    // for the current period (before opossum would count the abandonment as a success and close).
    const probe = this.breaker.closed
      ? action
      : () =>
          action().catch((error: unknown) => {
            if (isAbandoned(error) && this.breaker.halfOpen) this.openFor(this.openPeriod);
            throw error;
          });
    try {
      const result = (await this.breaker.fire(probe, source)) as T;
      // An answer nobody waited for proves nothing about the caller, and gives it no standing.
      if (!isAbandoned(result)) this.attribution.succeeded(source);
      return result;
    } catch (error) {
      if ((error as { code?: string } | undefined)?.code === 'EOPENBREAKER') {
        throw new CircuitOpenError(this.name, this.retryAfterSeconds());
      }
      // In a fleet, the failure is answered once it is counted (and an opening announced): the caller's next
      // request, to whichever replica, then finds the breaker open. A failure costs a Redis round trip or two.
      if (this.fleetCount) await this.fleetCount;
      else if (this.confirming) await this.confirming;
      throw error;
    }
  }

  /**
   * Counts a failure that happened after `execute` had already resolved, such
   * as a stream cut or stalled mid-answer.
   */
  recordFailure(error: unknown, source?: CallSource): void {
    if (!this.options.isFailure(error) || !this.counts(source)) return;
    this.onFailure(error);
  }

  snapshot(): BreakerSnapshot {
    return {
      name: this.name,
      state: this.state,
      consecutiveFailures: this.consecutiveFailures,
      openMs: this.openPeriod,
      openedAt: this.openedAt,
      observed: this.observed,
    };
  }

  shutdown(): void {
    this.stopProbe();
    this.breaker.shutdown();
    this.rotation.stop();
  }

  /** Runs a call given to `fire()`, marking its rejection if it is not a failure of the upstream (see `notFailures`). */
  private async judged(action: Action, source: CallSource | undefined): Promise<unknown> {
    try {
      return await action();
    } catch (error) {
      if (error !== KNOWN_DOWN && error !== PROBER_DECIDES && (!this.options.isFailure(error) || !this.counts(source)))
        this.notFailures.add(error);
      throw error;
    }
  }

  /**
   * Whether a failure counts at all. A newcomer's failure (see `FailureAttribution`) counts only where a health
   * probe confirms every opening; without one, only callers with standing can open the breaker.
   */
  private counts(source: CallSource | undefined): boolean {
    const verdict = this.attribution.attribute(source);
    return verdict === 'upstream' || (verdict === 'newcomer' && this.options.healthProbe !== undefined);
  }

  /** A call answered (or failed in a way that is not the upstream's): the run of failures is over. */
  private succeeded(result: unknown): void {
    this.observed = true;
    // An answer nobody waited for proves nothing either way.
    if (isAbandoned(result)) return;
    // A success while half-open closes the breaker (what opossum's own listener does for a call through fire()).
    if (this.breaker.halfOpen) this.breaker.close();
    this.resetRun();
    if (this.fleet) void this.fleet.resetFailures(this.name);
  }

  private resetRun(): void {
    this.consecutiveFailures = 0;
    this.hardFailures = 0;
    this.run++;
  }

  private onFailure(error: unknown): void {
    this.consecutiveFailures++;
    if (!isTimeout(error)) this.hardFailures++;
    if (this.breaker.halfOpen) {
      this.doubleOpenPeriod();
      return; // opossum reopens a breaker whose probe failed
    }
    if (!this.breaker.closed) return;
    if (!this.fleet) {
      if (this.consecutiveFailures >= this.options.failureThreshold) this.openOrConfirm();
      return;
    }
    // The fleet's run counts: five failures spread over four replicas are five in a row for the provider.
    const local = this.consecutiveFailures;
    this.fleetCount = this.fleet
      .countFailure(this.name)
      .then((fleetRun) => {
        if (this.breaker.closed && (fleetRun ?? local) >= this.options.failureThreshold) this.openOrConfirm();
        return this.confirming;
      })
      .then(() => this.announcing)
      .then(() => undefined);
  }

  private doubleOpenPeriod(): void {
    this.openPeriod = Math.min(this.openPeriod * 2, this.options.openMs * this.options.maxOpenMultiplier);
  }

  /** The real remaining open time (the health probe may close it sooner, but cannot promise to). */
  private retryAfterSeconds(): number {
    const now = Date.now();
    const reopensAt = (this.openedAt ?? now) + this.openPeriod;
    return Math.max(1, Math.ceil((reopensAt - now) / 1000));
  }

  private scheduleProbe(): void {
    const probe = this.options.healthProbe;
    if (!probe || this.probeTimer || this.breaker.isShutdown) return;
    this.probeTimer = setTimeout(() => void this.probeIfProber(probe), this.options.probeIntervalMs);
    this.probeTimer.unref?.();
  }

  /** In a fleet, one replica probes (the lease holder; another takes over if it dies); the others wait for its word. */
  private async probeIfProber(probe: (signal: AbortSignal) => Promise<unknown>): Promise<void> {
    if (this.fleet) {
      this.prober = await this.fleet.isProber(this.name);
      if (!this.prober) {
        this.probeTimer = undefined;
        if (!this.breaker.closed && !this.breaker.isShutdown) this.scheduleProbe();
        return;
      }
    }
    return this.runProbe(probe);
  }

  private async runProbe(probe: (signal: AbortSignal) => Promise<unknown>): Promise<void> {
    const abort = new AbortController();
    this.probeAbort = abort;
    const healthy = await this.probeOnce(probe, abort);
    // A probe that was stopped (breaker closed, reopened or shut down meanwhile) decides nothing.
    if (this.probeAbort !== abort) return;
    this.probeAbort = undefined;
    this.probeTimer = undefined;
    if (this.breaker.isShutdown || this.breaker.closed) return;
    this.observed = true;
    this.upstreamKnownDown = !healthy;
    if (healthy) this.breaker.close();
    else this.scheduleProbe();
  }

  /** One run of the health probe, bounded by `probeTimeoutMs` (and by `abort`): whether the upstream answered. */
  private async probeOnce(
    probe: (signal: AbortSignal) => Promise<unknown>,
    abort = new AbortController(),
  ): Promise<boolean> {
    const timer = setTimeout(() => abort.abort(), this.options.probeTimeoutMs);
    // A probe that ignores its signal must not hang the loop: the abort (timeout or stop) ends the wait.
    const aborted = new Promise<false>((resolve) =>
      abort.signal.addEventListener('abort', () => resolve(false), { once: true }),
    );
    try {
      return (await Promise.race([probe(abort.signal), aborted])) !== false && !abort.signal.aborted;
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * The threshold is reached. Without a health probe the breaker opens now
   * (failures of callers never answered did not count: see `counts`). With
   * one, the probe is asked first (its verdict reused for a second), and the
   * failing callers, and new calls, wait for the answer; see `decide`.
   */
  private openOrConfirm(): void {
    const probe = this.options.healthProbe;
    if (!probe) {
      this.openFor(this.openPeriod);
      return;
    }
    if (this.confirming) return;
    const run = this.run;
    const last = this.lastVerdict;
    if (last && Date.now() - last.at < VERDICT_TTL_MS) return this.decide(last.up, run);
    this.confirming = this.probeOnce(probe).then((up) => {
      this.lastVerdict = { up, at: Date.now() };
      this.confirming = undefined;
      this.decide(up, run);
    });
  }

  /**
   * Whether the run of failures is an outage. The probe sees the upstream down (no answer, 5xx, no answer in
   * time): it is, and the probe will see it back. The probe sees it answering: it is an outage only when the
   * upstream has failed (not merely timed out) and nobody at all has been answered for `unansweredMs` (a partial
   * outage: the health route works, the model calls do not); then only the half-open request can close it.
   * Otherwise these are some callers' own failures, or long generations, and the breaker stays closed.
   */
  private decide(up: boolean, run: number): void {
    // Opened meanwhile (by another replica), or somebody was answered while the probe ran: nothing to decide.
    if (!this.breaker.closed || run !== this.run) return;
    if (!up) {
      this.upstreamKnownDown = true;
      this.openFor(this.openPeriod);
      return;
    }
    const lastAnswered = Math.max(this.attribution.lastSuccess, this.bornAt);
    // In a fleet the run is counted across replicas: this one has seen its own part of it.
    const upstreamFailed = this.fleet ? this.hardFailures > 0 : this.hardFailures >= this.options.failureThreshold;
    if (upstreamFailed && Date.now() - lastAnswered >= this.options.unansweredMs) {
      this.probeBlind = true;
      this.openFor(this.openPeriod);
    } else {
      this.resetRun();
      if (this.fleet) void this.fleet.resetFailures(this.name);
    }
  }

  private stopProbe(): void {
    clearTimeout(this.probeTimer);
    this.probeTimer = undefined;
    this.probeAbort?.abort();
    this.probeAbort = undefined;
  }
}

function isTimeout(error: unknown): boolean {
  return isOrchestratorError(error) && error.code === 'upstream_timeout';
}

function isAbandoned(value: unknown): boolean {
  return isOrchestratorError(value) && value.code === 'client_closed_request';
}

/** The rejections an action judged not to be failures, until `errorFilter` takes them (see `CircuitBreaker.notFailures`). */
class NotFailures {
  private readonly objects = new WeakSet<object>();
  /** A rejection that is not an object (a thrown string) cannot be held weakly: counted by value. */
  private readonly values = new Map<unknown, number>();

  add(error: unknown): void {
    if (isObject(error)) this.objects.add(error);
    else this.values.set(error, (this.values.get(error) ?? 0) + 1);
  }

  /** Whether `error` was marked; forgets it. */
  take(error: unknown): boolean {
    if (isObject(error)) return this.objects.delete(error);
    const n = this.values.get(error);
    if (n === undefined) return false;
    if (n === 1) this.values.delete(error);
    else this.values.set(error, n - 1);
    return true;
  }
}

function isObject(value: unknown): value is object {
  return (typeof value === 'object' && value !== null) || typeof value === 'function';
}
