import { Observable, defer, from, map, mergeMap, of, concat, type ObservableInput, type Subscription } from 'rxjs';
import type { CircuitBreaker } from '../breaker/circuit-breaker.js';
import type { ConcurrencyLimiter, ReleaseSlot } from '../concurrency/concurrency-limiter.js';
import { replayEntry, type AnswerWindow } from '../dedup/answer-window.js';
import { SingleFlight, type DedupOutcome } from '../dedup/single-flight.js';
import { withTimeLimits, type TimeLimits } from '../timeout/time-limits.js';
import { isStreamedResponse, type CallEvent } from './call-events.js';
import { ClientClosedError } from './orchestrator-errors.js';

/** Everything that shapes one call, resolved from decorators and module options. */
export interface CallPolicy {
  dedup?: {
    key: string;
    /** Where finished answers are kept; absent when answers are not reused. */
    window?: AnswerWindow;
    windowMs: number;
    maxEntryBytes: number;
    cancelWhenAbandoned: boolean;
  };
  breaker?: CircuitBreaker;
  limiter?: ConcurrencyLimiter;
  timeLimits?: TimeLimits;
  retry?: RetryPolicy;
}

/** Retries of transient failures before the first chunk, each one measured by the breaker. */
export interface RetryPolicy {
  retries: number;
  baseDelayMs: number;
  maxDelayMs: number;
  shouldRetry: (error: unknown) => boolean;
}

/** The upstream work: receives the call's own AbortSignal, aborted on timeout or cancellation. */
export type CallWork<T> = (signal: AbortSignal) => Observable<CallEvent<T>>;

export interface StartedCall<T> {
  /** Absent when the call was not deduplicated. */
  outcome?: DedupOutcome;
  events: Observable<CallEvent<T>>;
}

/**
 * The order of effects, whatever order the decorators were written in:
 * dedup first (a joined or cached request uses no slot and never touches the
 * breaker), then an immediate refusal if the breaker is open, then the
 * concurrency slot, then the timed call, which is what the breaker measures.
 */
export class CallPipeline {
  private readonly flights = new SingleFlight<unknown>();
  /** How deduplicated requests were answered since start. */
  readonly outcomes: Record<DedupOutcome, number> = { miss: 0, joined: 0, cached: 0 };

  /** Calls in flight under a dedup key. */
  get inFlight(): number {
    return this.flights.size;
  }

  async start<T>(policy: CallPolicy, work: CallWork<T>): Promise<StartedCall<T>> {
    const dedup = policy.dedup;
    if (!dedup) return { events: guardedCall(policy, work) };
    const flights = this.flights as SingleFlight<T>;
    const running = flights.join(dedup.key);
    if (running) return this.answer('joined', running);
    if (dedup.window) {
      const stored = await dedup.window.get<T>(dedup.key);
      if (stored) return this.answer('cached', from(replayEntry(stored)));
      // Another request may have started the same call while the window was read.
      const started = flights.join(dedup.key);
      if (started) return this.answer('joined', started);
    }
    let reachedUpstream = false;
    const call = guardedCall(policy, work, () => (reachedUpstream = true));
    const window = dedup.window;
    const events = flights.lead(dedup.key, call, {
      cancelWhenAbandoned: () => dedup.cancelWhenAbandoned || !reachedUpstream,
      maxEntryBytes: dedup.maxEntryBytes,
      onSuccess: window ? (entry) => window.set(dedup.key, entry, dedup.windowMs) : undefined,
    });
    return this.answer('miss', events);
  }

  private answer<T>(outcome: DedupOutcome, events: Observable<CallEvent<T>>): StartedCall<T> {
    this.outcomes[outcome]++;
    return { outcome, events };
  }
}

/**
 * Breaker refusal, concurrency slot, then the timed call through the breaker,
 * retried (if asked) while it fails before its first chunk. Unsubscribing
 * cancels whatever stage the call is in: it leaves the queue, or aborts the
 * upstream request through the attempt's own signal.
 */
function guardedCall<T>(policy: CallPolicy, work: CallWork<T>, onUpstream?: () => void): Observable<CallEvent<T>> {
  const { breaker, limiter, timeLimits, retry } = policy;
  return new Observable<CallEvent<T>>((subscriber) => {
    // Created only when the call has to wait (queue, back-off): most calls never need it.
    let cancel: AbortController | undefined;
    const cancelSignal = () => (cancel ??= new AbortController()).signal;
    let attemptAbort: AbortController | undefined;
    let release: ReleaseSlot | undefined;
    let upstream: Subscription | undefined;
    let abandonAttempt: (() => void) | undefined;
    // Once the call has ended there is nothing left to abort (and aborting costs a DOMException per call).
    let ended = false;
    const finish = () => {
      ended = true;
      release?.();
    };

    // Resolves at the first chunk (or value): that, not the whole stream, is what the breaker times.
    const attempt = () =>
      new Promise<void>((resolveFirst, rejectFirst) => {
        const abort = new AbortController();
        attemptAbort = abort;
        // The caller left: settle the attempt, or the breaker waits for it (as a half-open probe, forever).
        abandonAttempt = () => rejectFirst(new ClientClosedError());
        let answered = false;
        const events = defer(() => work(abort.signal));
        upstream = (timeLimits ? events.pipe(withTimeLimits<T>(timeLimits)) : events).subscribe({
          next(event) {
            // A plain value is the whole answer: the call is over before the caller (who may unsubscribe at once) sees it.
            if (event.kind === 'value') finish();
            if (!answered && event.kind !== 'head') {
              answered = true;
              resolveFirst();
            }
            subscriber.next(event);
          },
          error(error: unknown) {
            abort.abort(error);
            if (!answered) return rejectFirst(error);
            // The breaker already counted this call a success; a stream that breaks later still counts.
            breaker?.recordFailure(error);
            finish();
            subscriber.error(error);
          },
          complete() {
            finish();
            if (!answered) resolveFirst();
            subscriber.complete();
          },
        });
      });

    const run = async () => {
      breaker?.assertCallable();
      if (limiter) release = limiter.tryAcquire() ?? (await limiter.acquire(cancelSignal()));
      if (subscriber.closed) return release?.();
      onUpstream?.();
      for (let retries = 0; ; retries++) {
        try {
          return await (breaker ? breaker.execute(attempt) : attempt());
        } catch (error) {
          if (!retry || retries >= retry.retries || !retry.shouldRetry(error) || subscriber.closed) throw error;
          await backOff(retry, retries, cancelSignal());
          // Never retry into an open breaker. One with a health probe may close within the back-off's bound
          // (the upstream is back): wait that long for it, as the SDKs would have waited before their own retry.
          await breaker?.waitUntilCallable(retry.maxDelayMs, cancelSignal());
          breaker?.assertCallable();
        }
      }
    };
    run().catch((error: unknown) => {
      finish();
      subscriber.error(error);
    });

    return () => {
      if (ended) return;
      upstream?.unsubscribe();
      finish();
      attemptAbort?.abort();
      abandonAttempt?.();
      cancel?.abort();
    };
  });
}

/** Waits `min(maxDelayMs, baseDelayMs * 2^n)` with full jitter, or until cancelled. */
function backOff(retry: RetryPolicy, retries: number, signal: AbortSignal): Promise<void> {
  const ceiling = Math.min(retry.maxDelayMs, retry.baseDelayMs * 2 ** retries);
  const delay = Math.random() * ceiling;
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, delay);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Turns what a handler produced (a value, a promise, an Observable of values,
 * or a `StreamedResponse`) into call events.
 */
export function toCallEvents<T>(result: Observable<unknown>): Observable<CallEvent<T>> {
  return result.pipe(
    mergeMap((value): ObservableInput<CallEvent<T>> => {
      if (!isStreamedResponse(value)) return of({ kind: 'value', value: value as T });
      return concat(
        of<CallEvent<T>>({ kind: 'head', head: value.head, formatError: value.formatError }),
        from(value.chunks).pipe(map((chunk): CallEvent<T> => ({ kind: 'chunk', chunk }))),
      );
    }),
  );
}
