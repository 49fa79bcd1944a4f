import { Observable, Subscription, defer, from, type Subscriber } from 'rxjs';
import { ClientClosedError, isOrchestratorError, type UpstreamTimeoutError } from './errors.js';
import type { ObserverHub, RefusalReason } from './observer.js';
import { isRawResponse, isStreamedResponse, type CallEvent } from './events.js';
import type { CallSource } from './breaker/failure-attribution.js';
import type { RoutePolicy } from './policy.js';
import type { ReleaseSlot } from './concurrency/concurrency-limiter.js';
import type { CallControl } from './retry/retry.policy.js';
import { withTimeLimits } from './timeout/time-limits.js';
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

/** One try at the upstream: its own signal (a timeout aborts this attempt only) and its events. */
interface Attempt {
  /** Absent when the work takes no signal (it stops when unsubscribed): no controller is made for nobody. */
  readonly abort?: AbortController;
  upstream?: Subscription;
  /** Settles the attempt's promise when the caller leaves, or the breaker would wait for it forever. */
  readonly abandon: () => void;
}

/**
 * Where a guarded call is. Each state carries what can be cancelled in it, so
 * `cancel()` never has to guess.
 */
type CallState =
  | { readonly kind: 'queued' }
  | { readonly kind: 'attempting'; readonly attempt: Attempt }
  | { readonly kind: 'backoff' }
  | { readonly kind: 'streaming'; readonly attempt: Attempt }
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
 */
export function guardedCall<T>(policy: RoutePolicy, work: CallWork<T>, options: GuardedCallOptions = {}): Observable<CallEvent<T>> {
  return new Observable<CallEvent<T>>((subscriber) => {
    const call = new GuardedCall(policy, work, subscriber, options);
    if (options.handle) {
      options.handle.detach = () => call.detach();
      options.handle.running = () => !call.cancelled;
    }
    call.run().catch((error: unknown) => call.fail(error));
    return () => call.cancel();
  });
}

export interface GuardedCallOptions {
  /** Who the call is for: its tenant waits in that tenant's line, and its failures are attributed (see `FailureAttribution`). */
  source?: CallSource;
  /** Told when the call leaves the queue for the upstream. */
  onUpstream?: () => void;
  /** Filled in on subscription: lets the caller move the running call out of the callers' slots. */
  handle?: CallHandle;
  /** Told of the call's queue wait, attempts, timeouts, retries and refusals (absent: nobody watches). */
  observer?: ObserverHub;
  /** The server span of the request that makes the call: each attempt gets a client span under it (absent: no tracing). */
  trace?: RequestSpan;
}

export interface CallHandle {
  /** Whether the call is still running (it has not ended, nor been cancelled). */
  running?: () => boolean;
  /**
   * Every caller left and the call is to keep running: its slot moves to the
   * limiter's detached budget. False when it cannot keep running (it has not
   * reached the upstream, or the budget is full): it is to be cancelled.
   */
  detach?: () => boolean;
}

class GuardedCall<T> implements CallControl {
  private state: CallState = QUEUED;
  private release?: ReleaseSlot;
  // Created only when the call has to wait (queue, back-off): most calls never need it.
  private cancelController?: AbortController;
  // Only with tracing: the queue wait and the attempt number go on each client span.
  private queueWaitMs = 0;
  private attempts = 0;
  private upstreamSpan?: UpstreamSpan;

  constructor(
    private readonly policy: RoutePolicy,
    private readonly work: CallWork<T>,
    private readonly subscriber: Subscriber<CallEvent<T>>,
    private readonly options: GuardedCallOptions,
  ) {}

  get cancelled(): boolean {
    return this.state.kind === 'done';
  }

  signal(): AbortSignal {
    return (this.cancelController ??= new AbortController()).signal;
  }

  async run(): Promise<void> {
    const { breaker, limiter, retry } = this.policy;
    const { source, observer, trace } = this.options;
    breaker?.assertCallable();
    if (limiter) {
      this.release = limiter.tryAcquire(source?.tenant);
      if (this.release) observer?.queueWait(this.upstream, 0);
      else {
        const queuedAt = observer || trace ? performance.now() : 0;
        this.release = await limiter.acquire(this.signal(), source?.tenant);
        const waited = performance.now() - queuedAt;
        observer?.queueWait(this.upstream, waited);
        this.queueWaitMs = waited;
      }
      trace?.setAttributes({ 'orchestrator.queue.wait_ms': round(this.queueWaitMs) });
    }
    // Cancelled while the slot was being granted.
    if (this.state.kind === 'done') return this.finish();
    this.options.onUpstream?.();
    let attempt = breaker ? () => breaker.execute(() => this.attempt(), source) : () => this.attempt();
    if (!retry) return attempt();
    if (observer) {
      const first = attempt;
      let tries = 0;
      attempt = () => {
        if (tries++ > 0) observer.retried(this.upstream);
        return first();
      };
    }
    // Never retry into an open breaker. One with a health probe may close within the back-off's bound
    // (the upstream is back): wait that long for it, as the SDKs would have waited before their own retry.
    const waitForBreaker = breaker && ((signal: AbortSignal) => breaker.waitUntilCallable(retry.maxDelayMs, signal));
    return retry.execute(attempt, this, waitForBreaker);
  }

  /** What observers call the upstream this call goes to. */
  private get upstream(): string {
    return this.policy.breaker?.name ?? this.policy.limiter?.name ?? this.policy.name;
  }

  /** Resolves at the first event (a value, or a stream's first chunk): that, not the whole stream, is what the breaker times. */
  private attempt(): Promise<void> {
    const { breaker, timeLimits, limiter } = this.policy;
    const { observer, trace } = this.options;
    // Read once per attempt: a limit learnt from latency needs the clock, a fixed one does not.
    const learning = limiter?.learning;
    const startedAt = observer || learning ? performance.now() : 0;
    const span = trace && this.startUpstreamSpan(trace);
    return new Promise<void>((resolveFirst, rejectFirst) => {
      // A work function that declares no parameter cannot read its signal: it gets a shared one that never aborts.
      const abort = this.work.length === 0 ? undefined : new AbortController();
      const attempt: Attempt = { abort, abandon: () => rejectFirst(new ClientClosedError()) };
      this.state = { kind: 'attempting', attempt };
      let answered = false;
      const events = defer(() => this.work(abort?.signal ?? NEVER_ABORTED, this.policy.upstream));
      attempt.upstream = (timeLimits ? events.pipe(withTimeLimits<T>(timeLimits)) : events).subscribe({
        next: (event) => {
          // A plain value is the whole answer: the call is over before the caller (who may unsubscribe at once) sees it.
          if (event.kind === 'value') {
            if (span) endUpstreamSpan(span, event.value);
            this.finish();
          }
          if (!answered && event.kind !== 'head') {
            answered = true;
            if (learning) learning.sample(performance.now() - startedAt, limiter!.inFlight + 1);
            observer?.upstreamCall(this.upstream, performance.now() - startedAt, 'ok');
            if (this.state.kind === 'attempting') this.state = { kind: 'streaming', attempt };
            resolveFirst();
          }
          this.subscriber.next(event);
        },
        error: (error: unknown) => {
          span?.end(isOrchestratorError(error) && error.code === 'upstream_timeout' ? 'timeout' : 'error', error);
          attempt.abort?.abort(error);
          if (observer) this.observeError(observer, error, answered ? undefined : performance.now() - startedAt);
          if (!answered) {
            if (learning && isOverloadSignal(error)) learning.drop();
            if (this.state.kind === 'attempting') this.state = BACKOFF;
            return rejectFirst(error);
          }
          // The breaker already counted this call a success; a stream that breaks later still counts.
          breaker?.recordFailure(error, this.options.source);
          this.fail(error);
        },
        complete: () => {
          span?.end('ok');
          this.finish();
          if (!answered) {
            if (learning) learning.sample(performance.now() - startedAt, limiter!.inFlight + 1);
            observer?.upstreamCall(this.upstream, performance.now() - startedAt, 'ok');
            resolveFirst();
          }
          this.subscriber.complete();
        },
      });
    });
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

  /** See `CallHandle.detach`. */
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

  /** The caller left. Once the call has ended there is nothing left to abort (and aborting costs a DOMException). */
  cancel(): void {
    const state = this.state;
    if (state.kind === 'done') return;
    this.finish();
    if (state.kind === 'attempting' || state.kind === 'streaming') {
      this.upstreamSpan?.end('cancelled');
      state.attempt.upstream?.unsubscribe();
      state.attempt.abort?.abort();
      state.attempt.abandon();
    }
    this.cancelController?.abort();
  }

  private finish(): void {
    this.state = DONE;
    const release = this.release;
    this.release = undefined;
    release?.();
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
              next: (chunk) => subscriber.next({ kind: 'chunk', chunk }),
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
