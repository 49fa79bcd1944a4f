import { Observable, Subscription, from, type Observer, type Subscriber, type Unsubscribable } from 'rxjs';
import { ClientClosedError, isOrchestratorError, type UpstreamTimeoutError } from './errors.js';
import type { ObserverHub, RefusalReason } from './observer.js';
import { ChunkEvent, isRawResponse, isStreamedResponse, type CallEvent } from './events.js';
import type { CallSource } from './breaker/failure-attribution.js';
import type { RoutePolicy } from './policy.js';
import type { ReleaseSlot } from './concurrency/concurrency-limiter.js';
import type { AdaptiveLimit } from './concurrency/adaptive-limit.js';
import type { CallControl } from './retry/retry.policy.js';
import { CallClock } from './timeout/time-limits.js';
import { isOverloadSignal } from './breaker/failure-classifier.js';
import type { Upstream } from './upstreams/upstream-pool.js';
import type { RequestSpan, UpstreamSpan } from './tracing/request-tracing.js';

/**
 * The upstream work: receives the call's own AbortSignal, aborted on timeout
 * or cancellation, and, under a policy over a pool of upstreams, the upstream
 * this attempt goes to (its `target` says where to send the request).
 * Unsubscribing its Observable stops it too: work that stops that way and
 * needs no upstream may declare no parameter, and then costs no AbortController.
 */
export type CallWork<T> = (signal: AbortSignal, upstream?: Upstream) => Observable<CallEvent<T>>;

/**
 * Where a guarded call is. Each state carries what can be cancelled in it, so
 * `cancel()` never has to guess.
 */
type CallState =
  | { readonly kind: 'queued' }
  | { readonly kind: 'attempting'; readonly attempt: Attempt<unknown> }
  | { readonly kind: 'backoff' }
  | { readonly kind: 'streaming'; readonly attempt: Attempt<unknown> }
  | { readonly kind: 'done' };

const REFUSALS = new Set<string>(['circuit_open', 'overloaded', 'queue_timeout', 'shutting_down']);

const QUEUED: CallState = { kind: 'queued' };
const NEVER_ABORTED = new AbortController().signal;
const BACKOFF: CallState = { kind: 'backoff' };
const DONE: CallState = { kind: 'done' };

/**
 * Breaker refusal, concurrency slot, then the timed call through the breaker,
 * retried (if the policy asks) while it fails before its first chunk:
 *
 *     slot = limiter.acquire();  retry.execute(() => breaker.execute(() => firstEvent(work)))
 *
 * The breaker times an attempt up to its first event (a value, or a stream's
 * first chunk); a stream that breaks later is reported to it on its own. The
 * slot is held until the call ends, stream included. Unsubscribing cancels
 * whatever stage the call is in: it leaves the queue, or aborts the upstream
 * request through the attempt's own signal.
 *
 * The common case runs in one synchronous pass without a promise: a free
 * slot, a closed breaker that opens on consecutive failures (see
 * `CircuitBreaker.admitsDirect`) and the first attempt, whose outcome the
 * breaker counts as its `execute` would. A queue wait, a retry, or a breaker
 * that is not closed takes the general path above.
 */
export function guardedCall<T>(
  policy: RoutePolicy,
  work: CallWork<T>,
  options: GuardedCallOptions = {},
): Observable<CallEvent<T>> {
  return new Observable<CallEvent<T>>((subscriber) => {
    const call = new GuardedCall(policy, work, subscriber, options);
    if (options.handle) options.handle.call = call;
    call.start();
    return call;
  });
}

export interface GuardedCallOptions {
  /** Who the call is for: its tenant waits in that tenant's line, and its failures are attributed (see `FailureAttribution`). */
  source?: CallSource;
  /** Filled in on subscription, and told when the call leaves the queue for the upstream. */
  handle?: CallHandle;
  /** Told of the call's queue wait, attempts, timeouts, retries and refusals (absent: nobody watches). */
  observer?: ObserverHub;
  /** The server span of the request that makes the call: each attempt gets a client span under it (absent: no tracing). */
  trace?: RequestSpan;
}

/** What whoever started a call learns of it while it runs. */
export interface CallHandle {
  /** The call running now (the latest attempt's, over a pool): set on subscription. */
  call?: RunningCall;
  /** Set once the call has left the queue for the upstream. */
  reachedUpstream?: boolean;
}

export interface RunningCall {
  /** Whether the call has ended or been cancelled. */
  readonly cancelled: boolean;
  /**
   * Every caller left and the call is to keep running: its slot moves to the
   * limiter's detached budget (or, under an upstream's capacity, stays held:
   * see `ConcurrencyLimiter.detach`). False when it cannot keep running (it has
   * not reached the upstream, or the budget is full): it is to be cancelled.
   */
  detach(): boolean;
}

/** How an attempt on the general path settles the promise the breaker and the retries wait on. */
interface Settle {
  resolve(): void;
  reject(error: unknown): void;
}

class GuardedCall<T> implements CallControl, RunningCall, Unsubscribable {
  private state: CallState = QUEUED;
  private release?: ReleaseSlot;
  // Created only when the call waits out a back-off: most calls never need it.
  private cancelController?: AbortController;
  /** Leaves the limiter's queue, while the call waits there. */
  private leaveQueue?: () => void;
  // Only with tracing: the queue wait and the attempt number go on each client span.
  private queueWaitMs = 0;
  private attempts = 0;
  private upstreamSpan?: UpstreamSpan;
  /** The pool member this call counts against until it ends (what removing that member waits for). */
  private member?: Upstream;

  constructor(
    private readonly policy: RoutePolicy,
    readonly work: CallWork<T>,
    private readonly subscriber: Subscriber<CallEvent<T>>,
    private readonly options: GuardedCallOptions,
  ) {}

  get cancelled(): boolean {
    return this.state.kind === 'done';
  }

  signal(): AbortSignal {
    return (this.cancelController ??= new AbortController()).signal;
  }

  start(): void {
    const { breaker, limiter, upstream } = this.policy;
    const { source, observer, trace } = this.options;
    // Once: a call that waited for the breaker's verdict comes back here.
    if (upstream && !this.member) {
      this.member = upstream;
      upstream.enter();
    }
    // The breaker is asking its health probe whether a run of failures is an outage: this call waits for the verdict.
    const deciding = breaker?.deciding;
    if (deciding) {
      void deciding.then(() => this.cancelled || this.start());
      return;
    }
    if (breaker && !breaker.isCallable()) return this.fail(breaker.refusal());
    if (limiter) {
      this.release = limiter.tryAcquire(source?.tenant);
      if (!this.release) return this.queue();
      observer?.queueWait(this.upstream, 0);
      trace?.setAttributes({ 'orchestrator.queue.wait_ms': 0 });
    }
    this.firstAttempt()?.catch((error: unknown) => this.fail(error));
  }

  /**
   * No slot was free: the call waits in the limiter's queue (left at once if the caller goes), then goes on as
   * `start` would. The slot or the refusal is taken up in a microtask, as an awaited promise's would be: never
   * inside the release of the call that freed the slot.
   */
  private queue(): void {
    const { source, observer, trace } = this.options;
    const queuedAt = observer || trace ? performance.now() : 0;
    this.leaveQueue = this.policy.limiter!.wait(
      source?.tenant ?? '',
      (release) => queueMicrotask(() => this.granted(release, queuedAt)),
      (error) => queueMicrotask(() => this.fail(error)),
    );
  }

  private granted(release: ReleaseSlot, queuedAt: number): void {
    this.leaveQueue = undefined;
    this.release = release;
    // Cancelled while the slot was being granted.
    if (this.state.kind === 'done') return this.finish();
    const { observer, trace } = this.options;
    const waited = performance.now() - queuedAt;
    observer?.queueWait(this.upstream, waited);
    this.queueWaitMs = waited;
    trace?.setAttributes({ 'orchestrator.queue.wait_ms': round(waited) });
    this.firstAttempt()?.catch((error: unknown) => this.fail(error));
  }

  private firstAttempt(): Promise<void> | undefined {
    if (this.options.handle) this.options.handle.reachedUpstream = true;
    const breaker = this.policy.breaker;
    if (breaker && !breaker.admitsDirect) return this.general();
    this.attempt(undefined);
    return undefined;
  }

  /**
   * The general path: each attempt through the breaker's `execute`, retried
   * by the policy; `failed` is the error of a first attempt made directly.
   */
  private general(failed?: { error: unknown }): Promise<void> {
    const { breaker, retry } = this.policy;
    const { source, observer } = this.options;
    const once = () => new Promise<void>((resolve, reject) => this.attempt({ resolve, reject }));
    let attempt = breaker ? () => breaker.execute(once, source) : once;
    if (!retry) return attempt();
    if (observer) {
      const first = attempt;
      let tries = failed ? 1 : 0;
      attempt = () => {
        if (tries++ > 0) observer.retried(this.upstream);
        return first();
      };
    }
    // Never retry into an open breaker. One with a health probe may close within the back-off's bound
    // (the upstream is back): wait that long for it, as the SDKs would have waited before their own retry.
    const waitForBreaker = breaker && ((signal: AbortSignal) => breaker.waitUntilCallable(retry.maxDelayMs, signal));
    return retry.execute(attempt, this, waitForBreaker, failed);
  }

  /** What observers call the upstream this call goes to. */
  private get upstream(): string {
    return this.policy.breaker?.name ?? this.policy.limiter?.name ?? this.policy.name;
  }

  /**
   * One try at the upstream, up to its first event (a value, or a stream's first chunk): that, not the whole
   * stream, is what the breaker times. `settle` is the general path's promise; without it the attempt was made
   * directly, and its outcome is counted by `directSettled`.
   */
  private attempt(settle: Settle | undefined): void {
    const { timeLimits, limiter } = this.policy;
    const { observer, trace } = this.options;
    // Read once per attempt: a limit learnt from latency needs the clock, a fixed one does not.
    const learning = limiter?.learning;
    const startedAt = observer || learning ? performance.now() : 0;
    const span = trace && this.startUpstreamSpan(trace);
    // A work function that declares no parameter cannot read its signal: it gets a shared one that never aborts.
    const abort = this.work.length === 0 ? undefined : new AbortController();
    const attempt = new Attempt<T>(this, settle, abort, startedAt, learning, span);
    this.state = { kind: 'attempting', attempt: attempt };
    let events: Observable<CallEvent<T>>;
    try {
      events = this.work(abort?.signal ?? NEVER_ABORTED, this.policy.upstream);
    } catch (error) {
      // As `defer` would: work that throws is an attempt that failed.
      return attempt.error(error);
    }
    if (timeLimits) attempt.clock = new CallClock(timeLimits, (error) => attempt.timedOut(error));
    attempt.upstream = events.subscribe(attempt);
  }

  /** An event of the attempt in progress. */
  onEvent(attempt: Attempt<T>, event: CallEvent<T>): void {
    attempt.clock?.event(event);
    // A plain value is the whole answer: the call is over before the caller (who may unsubscribe at once) sees it.
    if (event.kind === 'value') {
      if (attempt.span) endUpstreamSpan(attempt.span, event.value);
      this.finish();
    }
    if (!attempt.answered && event.kind !== 'head') {
      attempt.answered = true;
      this.answered(attempt);
      if (this.state.kind === 'attempting') this.state = { kind: 'streaming', attempt: attempt };
      attempt.settled(undefined);
    }
    this.subscriber.next(event);
  }

  onError(attempt: Attempt<T>, error: unknown): void {
    attempt.clock?.stop();
    attempt.span?.end(isOrchestratorError(error) && error.code === 'upstream_timeout' ? 'timeout' : 'error', error);
    attempt.abort?.abort(error);
    const observer = this.options.observer;
    if (observer)
      this.observeError(observer, error, attempt.answered ? undefined : performance.now() - attempt.startedAt);
    if (!attempt.answered) {
      if (attempt.learning && isOverloadSignal(error)) attempt.learning.drop();
      if (this.state.kind === 'attempting') this.state = BACKOFF;
      return attempt.settled(error);
    }
    // The breaker already counted this call a success; a stream that breaks later still counts.
    this.policy.breaker?.recordFailure(error, this.options.source);
    this.fail(error);
  }

  onComplete(attempt: Attempt<T>): void {
    attempt.clock?.stop();
    attempt.span?.end('ok');
    this.finish();
    if (!attempt.answered) {
      attempt.answered = true;
      this.answered(attempt);
      attempt.settled(undefined);
    }
    this.subscriber.complete();
  }

  /** The attempt's first event: its latency, for the adaptive limit and the observers. */
  private answered(attempt: Attempt<T>): void {
    if (attempt.learning)
      attempt.learning.sample(performance.now() - attempt.startedAt, this.policy.limiter!.inFlight + 1);
    this.options.observer?.upstreamCall(this.upstream, performance.now() - attempt.startedAt, 'ok');
  }

  /**
   * The outcome of a first attempt made directly, counted by the breaker as its `execute` would count it; a
   * failure then goes to the retries, if the policy has any.
   */
  directSettled(error: unknown): void {
    const counted = this.policy.breaker?.settle(error, this.options.source);
    if (error === undefined) return;
    if (counted) void counted.then(() => this.afterDirectFailure(error));
    else this.afterDirectFailure(error);
  }

  private afterDirectFailure(error: unknown): void {
    if (!this.policy.retry || this.cancelled) return this.fail(error);
    this.general({ error }).catch((e: unknown) => this.fail(e));
  }

  private startUpstreamSpan(trace: RequestSpan): UpstreamSpan {
    const span = trace.startUpstreamSpan(this.upstream, {
      'orchestrator.attempt': ++this.attempts,
      'orchestrator.breaker.state': this.policy.breaker?.state,
      'orchestrator.queue.wait_ms': this.policy.limiter ? round(this.queueWaitMs) : undefined,
    });
    this.upstreamSpan = span;
    return span;
  }

  /** An attempt was aborted while it ran (its time limit): the limiter counts the upstream's slot a little longer. */
  upstreamAborted(): void {
    this.policy.limiter?.abortedCall();
  }

  /** See `RunningCall.detach`. */
  detach(): boolean {
    const state = this.state.kind;
    if (state === 'done') return true;
    if (state !== 'attempting' && state !== 'streaming') return false;
    const limiter = this.policy.limiter;
    if (!limiter || !this.release) return true;
    const detached = limiter.detach(this.release);
    if (!detached) return false;
    this.release = detached;
    return true;
  }

  fail(error: unknown): void {
    // A refusal never reached the upstream: told here, where every refusal (breaker, queue) ends up.
    const observer = this.options.observer;
    if (observer && this.state.kind !== 'done' && isOrchestratorError(error) && REFUSALS.has(error.code)) {
      observer.refused(this.upstream, error.code as RefusalReason);
    }
    this.finish();
    this.subscriber.error(error);
  }

  /** An attempt failed: a timeout (at any point), and the attempt's latency when it failed before its first event. */
  private observeError(observer: ObserverHub, error: unknown, latencyMs: number | undefined): void {
    const timeout = isOrchestratorError(error) && error.code === 'upstream_timeout';
    if (timeout) observer.timedOut(this.upstream, (error as UpstreamTimeoutError).phase);
    if (latencyMs !== undefined) observer.upstreamCall(this.upstream, latencyMs, timeout ? 'timeout' : 'error');
  }

  /** The caller left (the subscription's teardown). */
  unsubscribe(): void {
    this.cancel();
  }

  /** The caller left. Once the call has ended there is nothing left to abort (and aborting costs a DOMException). */
  cancel(): void {
    const state = this.state;
    if (state.kind === 'done') return;
    // Told before the slot is released: the upstream may run the aborted request a little longer.
    if (state.kind === 'attempting' || state.kind === 'streaming') this.policy.limiter?.abortedCall();
    this.finish();
    if (state.kind === 'attempting' || state.kind === 'streaming') {
      this.upstreamSpan?.end('cancelled');
      state.attempt.leave();
    }
    this.leaveQueue?.();
    this.cancelController?.abort();
  }

  private finish(): void {
    this.state = DONE;
    const release = this.release;
    this.release = undefined;
    release?.();
    const member = this.member;
    this.member = undefined;
    member?.leave();
  }
}

/**
 * One try at the upstream: its own signal (a timeout aborts this attempt
 * only), its time limits, and its events, which it hands to its call. The
 * observer its work is subscribed with.
 */
class Attempt<T> implements Observer<CallEvent<T>> {
  upstream?: Subscription;
  clock?: CallClock;
  /** Its first event (a value, a stream's first chunk) or its end has come. */
  answered = false;
  private done = false;

  constructor(
    private readonly call: GuardedCall<T>,
    private readonly settle: Settle | undefined,
    /** Absent when the work takes no signal (it stops when unsubscribed): no controller is made for nobody. */
    readonly abort: AbortController | undefined,
    readonly startedAt: number,
    readonly learning: AdaptiveLimit | undefined,
    readonly span: UpstreamSpan | undefined,
  ) {}

  next(event: CallEvent<T>): void {
    this.call.onEvent(this, event);
  }

  error(error: unknown): void {
    this.call.onError(this, error);
  }

  complete(): void {
    this.call.onComplete(this);
  }

  /** A time limit passed: the upstream request is left (and aborted), and the attempt fails with it. */
  timedOut(error: UpstreamTimeoutError): void {
    this.call.upstreamAborted();
    this.upstream?.unsubscribe();
    this.error(error);
  }

  /** The caller left: the upstream request is aborted, and an attempt still waited on settles as abandoned. */
  leave(): void {
    this.clock?.stop();
    this.upstream?.unsubscribe();
    this.abort?.abort();
    this.settled(new ClientClosedError());
  }

  /** Up to its first event, once: the promise of the general path, else the direct path's count. */
  settled(error: unknown): void {
    if (this.done) return;
    this.done = true;
    const settle = this.settle;
    if (!settle) return this.call.directSettled(error);
    if (error === undefined) settle.resolve();
    else settle.reject(error);
  }
}

/** A plain answer's client span ends with it: its status (a relayed provider error is a failure of the upstream). */
function endUpstreamSpan(span: UpstreamSpan, value: unknown): void {
  const status = isRawResponse(value) ? value.status : undefined;
  if (status === undefined) return span.end('ok');
  span.setAttributes({ 'http.response.status_code': status });
  span.end(status >= 500 ? 'error' : 'ok', status >= 500 ? { status } : undefined);
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}

/**
 * Turns what a handler produced (a value, a promise, an Observable of values,
 * or a `StreamedResponse`) into call events. Written out rather than as
 * `mergeMap` + `of`: a plain answer then costs one subscription, not three.
 */
export function toCallEvents<T>(result: Observable<unknown>): Observable<CallEvent<T>> {
  return new Observable<CallEvent<T>>((subscriber) => {
    const subscription = new Subscription();
    let sourceDone = false;
    let streams = 0;
    const completeWhenDone = () => {
      if (sourceDone && streams === 0) subscriber.complete();
    };
    subscription.add(
      result.subscribe({
        next(value) {
          if (!isStreamedResponse(value)) return subscriber.next({ kind: 'value', value: value as T });
          subscriber.next({ kind: 'head', head: value.head, formatError: value.formatError });
          streams++;
          subscription.add(
            from(value.chunks).subscribe({
              next: (chunk) => subscriber.next(new ChunkEvent(chunk)),
              error: (error: unknown) => subscriber.error(error),
              complete: () => {
                streams--;
                completeWhenDone();
              },
            }),
          );
        },
        error: (error: unknown) => subscriber.error(error),
        complete: () => {
          sourceDone = true;
          completeWhenDone();
        },
      }),
    );
    return subscription;
  });
}
