import OpossumBreaker from 'opossum';
import { CircuitOpenError, isOrchestratorError } from '../errors.js';
import type { WithDefaults } from '../options.js';
import type { BreakerCoordinator, SharedBreakerState } from '../cluster/coordination.js';
import { FailureAttribution, type Attribution, type CallSource } from './failure-attribution.js';
import type { BREAKER_FIELDS, BreakerOptions, FAILURE_RATE_FIELDS, FailureRateOptions } from './breaker.options.js';

export type BreakerState = 'closed' | 'open' | 'half_open';

/** A breaker's settings with every default applied (see `BreakerOptions` for each field). */
export type CircuitBreakerOptions = Omit<WithDefaults<BreakerOptions, typeof BREAKER_FIELDS>, 'name' | 'failureRate' | 'isFailure'> & {
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

/** How recently another tenant must have called for one tenant's failures to need the health probe's confirmation. */
const ATTRIBUTION_WINDOW_MS = 30_000;

/**
 * One upstream's circuit breaker: opossum's state machine (closed / open /
 * half-open with a single probe) plus what opossum cannot express: opening
 * after N consecutive failures, doubling the open period after a failed probe,
 * and closing early once a health probe succeeds.
 */
export class CircuitBreaker {
  private readonly breaker: OpossumBreaker<[Action, CallSource?], unknown>;
  /**
   * The options object given to opossum, which keeps it as `circuit.options` and reads `resetTimeout` from it
   * each time it opens (its README documents both). The doubled open period is written here.
   */
  private readonly opossumOptions: OpossumBreaker.Options<[Action, CallSource?]> & { resetTimeout: number };
  private consecutiveFailures = 0;
  private readonly attribution = new FailureAttribution();
  /** Tenants whose failures make up the current run of consecutive failures. */
  private readonly streakTenants = new Set<string | undefined>();
  /** The current run holds a failure of a caller never answered while others were: only a health check may confirm it. */
  private streakHasNewcomer = false;
  /** Tenants whose failures in the current run were the upstream's without doubt (callers with standing). */
  private readonly streakEstablished = new Set<string | undefined>();
  /** The verdict on the failure opossum is handling, from its errorFilter to its `failure` event (synchronous). */
  private verdict?: Attribution;
  /** A health probe deciding whether one tenant's failures are the upstream's (see `openOrConfirm`). */
  private confirming?: Promise<void>;
  private openedAt?: number;
  /** The last health probe failed (and none has succeeded since). */
  private upstreamKnownDown = false;
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
  /** Told of every change of state (set by the registry when somebody observes the orchestrator). */
  onTransition?: (name: string, from: BreakerState, to: BreakerState, at: number) => void;

  constructor(
    readonly name: string,
    private readonly options: CircuitBreakerOptions,
    /** Shares this breaker's state with the other replicas of the app (see `BreakerCoordinator`). */
    private readonly fleet?: BreakerCoordinator,
  ) {
    const rate = options.failureRate;
    this.opossumOptions = {
      name,
      // Timeouts are applied (and the call really cancelled) by the caller's pipeline.
      timeout: false,
      resetTimeout: options.openMs,
      // opossum opens when the rate is strictly above the threshold: 100 turns the mode off.
      errorThresholdPercentage: rate?.thresholdPercent ?? 100,
      volumeThreshold: rate?.minimumCalls ?? 0,
      rollingCountTimeout: rate?.windowMs ?? 10_000,
      // Not a failure of the upstream: not one by its kind (a 4xx, a refusal), or one request's or one tenant's own.
      // opossum calls it with fire()'s arguments after the error (its typings show only the error).
      errorFilter: ((error: unknown, _action: Action, source?: CallSource) => !options.isFailure(error) || !this.counts(source)) as (
        error: unknown,
      ) => boolean,
    };
    // The source rides along as fire()'s second argument so that errorFilter sees it; the action ignores it.
    this.breaker = new OpossumBreaker((action: Action, _source?: CallSource) => action(), this.opossumOptions);
    // opossum reports a filtered error as a success; a call its caller abandoned proves nothing either way.
    this.breaker.on('success', (result: unknown) => this.succeeded(result));
    // Registered before opossum decides to reopen after a failed probe, so the
    // doubled period is in place when its reset timer starts.
    this.breaker.on('failure', (_error: unknown, _latency: number, args: [Action, CallSource?]) => {
      const newcomer = this.verdict === 'newcomer';
      this.verdict = undefined;
      this.onFailure(args[1], newcomer);
    });
    this.breaker.on('open', () => {
      this.openedAt = Date.now();
      this.scheduleProbe();
      if (this.fleet && !this.applyingRemote) this.announcing = this.fleet.announce(name, { state: 'open', openMs: this.opossumOptions.resetTimeout });
    });
    this.breaker.on('close', () => {
      this.resetRun();
      this.openedAt = undefined;
      this.upstreamKnownDown = false;
      this.opossumOptions.resetTimeout = options.openMs;
      this.stopProbe();
      if (this.fleet && !this.applyingRemote) void this.fleet.announce(name, { state: 'closed' });
    });
    this.breaker.on('halfOpen', () => {
      // The health probe has just seen the upstream down: a live request sent as the half-open probe would
      // only fail too (and cost a paid call). Count it as a failed probe without sending it.
      if (this.upstreamKnownDown) {
        this.doubleOpenPeriod();
        this.breaker.open();
      } else if (!this.prober) {
        // In a fleet, only the prober tries the upstream; this replica waits for its word, refusing meanwhile.
        this.applyingRemote = true;
        this.breaker.open();
        this.applyingRemote = false;
      }
    });
    // Registered last: a handler above may move on at once (a half-open breaker reopened without a probe),
    // and only the state it settles in is announced.
    this.breaker.on('open', () => this.noteState());
    this.breaker.on('close', () => this.noteState());
    this.breaker.on('halfOpen', () => this.noteState());
    this.breaker.on('failure', () => (this.observed = true));
    if (fleet) {
      void fleet.watch(name, (state) => this.applyRemote(state)).then((current) => {
        if (current?.state === 'open') this.applyRemote(current);
      });
    }
  }

  private noteState(): void {
    const to = this.state;
    const from = this.lastState;
    if (to === from) return;
    this.lastState = to;
    this.onTransition?.(this.name, from, to, Date.now());
  }

  /** Another replica opened or closed this breaker: the same here, without counting anything. */
  private applyRemote(state: SharedBreakerState): void {
    if (this.breaker.isShutdown) return;
    this.applyingRemote = true;
    try {
      if (state.state === 'open' && !this.breaker.opened) {
        if (state.openMs !== undefined) this.opossumOptions.resetTimeout = state.openMs;
        this.breaker.open();
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
   * price of two promises and four events per call; the state machine (open,
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
    const newcomer = this.verdict === 'newcomer';
    this.verdict = undefined;
    this.observed = true;
    this.onFailure(source, newcomer);
    return this.fleetCount;
  }

  /** A call starts without `fire()` (see `admitsDirect`): its tenant is active, as `execute` records it. */
  noteCall(source?: CallSource): void {
    this.attribution.seen(source);
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
        this.breaker.removeListener('close', done);
        this.breaker.removeListener('halfOpen', done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, maxWaitMs);
      this.breaker.on('close', done);
      this.breaker.on('halfOpen', done);
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
            if (isAbandoned(error) && this.breaker.halfOpen) this.breaker.open();
            throw error;
          });
    this.attribution.seen(source);
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
      throw error;
    }
  }

  /**
   * Counts a failure that happened after `execute` had already resolved, such
   * as a stream cut or stalled mid-answer.
   */
  recordFailure(error: unknown, source?: CallSource): void {
    if (!this.options.isFailure(error) || !this.counts(source)) return;
    const newcomer = this.verdict === 'newcomer';
    this.verdict = undefined;
    this.onFailure(source, newcomer);
  }

  snapshot(): BreakerSnapshot {
    return {
      name: this.name,
      state: this.state,
      consecutiveFailures: this.consecutiveFailures,
      openMs: this.opossumOptions.resetTimeout,
      openedAt: this.openedAt,
      observed: this.observed,
    };
  }

  shutdown(): void {
    this.stopProbe();
    this.breaker.shutdown();
  }

  /**
   * Whether a failure counts at all. A newcomer's failure (see `FailureAttribution`) counts only where a health
   * probe can confirm it before it opens the breaker; without one, only callers with standing can open it.
   */
  private counts(source: CallSource | undefined): boolean {
    this.verdict = this.attribution.attribute(source);
    return this.verdict === 'upstream' || (this.verdict === 'newcomer' && this.options.healthProbe !== undefined);
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
    if (this.consecutiveFailures === 0 && this.streakTenants.size === 0 && !this.streakHasNewcomer) return;
    this.consecutiveFailures = 0;
    this.streakTenants.clear();
    this.streakHasNewcomer = false;
    this.streakEstablished.clear();
  }

  private onFailure(source: CallSource | undefined, newcomer: boolean): void {
    this.consecutiveFailures++;
    this.streakTenants.add(source?.tenant);
    if (newcomer) this.streakHasNewcomer = true;
    else this.streakEstablished.add(source?.tenant);
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
        return this.announcing;
      })
      .then(() => undefined);
  }

  private doubleOpenPeriod(): void {
    this.opossumOptions.resetTimeout = Math.min(this.opossumOptions.resetTimeout * 2, this.options.openMs * this.options.maxOpenMultiplier);
  }

  private retryAfterSeconds(): number {
    const now = Date.now();
    const openMs = this.opossumOptions.resetTimeout;
    let nextChance = (this.openedAt ?? now) + openMs;
    if (this.options.healthProbe) nextChance = Math.min(nextChance, now + this.options.probeIntervalMs);
    return Math.max(1, Math.ceil((nextChance - now) / 1000));
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
  private async probeOnce(probe: (signal: AbortSignal) => Promise<unknown>, abort = new AbortController()): Promise<boolean> {
    const timer = setTimeout(() => abort.abort(), this.options.probeTimeoutMs);
    // A probe that ignores its signal must not hang the loop: the abort (timeout or stop) ends the wait.
    const aborted = new Promise<false>((resolve) => abort.signal.addEventListener('abort', () => resolve(false), { once: true }));
    try {
      return (await Promise.race([probe(abort.signal), aborted])) !== false && !abort.signal.aborted;
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * The threshold is reached. Failures from one tenant only, while other
   * tenants were active lately, may be that tenant's own (its prompts fail,
   * its generations run long), and failures of callers never answered while
   * others were may be one caller posing as many: unless at least two
   * callers with standing failed in the run too, the health probe decides,
   * and the breaker opens only if it sees the upstream down. Otherwise
   * (several established tenants failing, or nobody else around to protect,
   * or no probe), it opens now.
   */
  private openOrConfirm(): void {
    const probe = this.options.healthProbe;
    const only = this.streakTenants.size === 1 ? this.streakTenants.values().next().value : undefined;
    const doubtful = this.streakHasNewcomer
      ? this.streakEstablished.size < 2
      : only !== undefined && this.attribution.othersActiveSince(only, Date.now() - ATTRIBUTION_WINDOW_MS);
    if (!probe || !doubtful) {
      this.breaker.open();
      return;
    }
    if (this.confirming) return;
    this.confirming = this.probeOnce(probe).then((healthy) => {
      this.confirming = undefined;
      if (!this.breaker.closed) return;
      if (healthy) {
        // That tenant's trouble, not the upstream's: the count starts over.
        this.resetRun();
      } else if (this.consecutiveFailures >= this.options.failureThreshold) this.breaker.open();
    });
  }

  private stopProbe(): void {
    clearTimeout(this.probeTimer);
    this.probeTimer = undefined;
    this.probeAbort?.abort();
    this.probeAbort = undefined;
  }
}

function isAbandoned(value: unknown): boolean {
  return isOrchestratorError(value) && value.code === 'client_closed_request';
}
