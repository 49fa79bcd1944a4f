import { Observable, type OperatorFunction } from 'rxjs';
import type { CallEvent } from '../events.js';
import { UpstreamTimeoutError } from '../errors.js';

/** Time limits of one upstream call, in milliseconds. */
export interface TimeLimits {
  /** A plain answer must arrive within this time; so must a stream's head. */
  totalMs: number;
  /** A stream's first chunk must arrive this long after the call started. */
  firstChunkMs: number;
  /** Longest silence allowed between two chunks of a stream. */
  idleMs: number;
}

/**
 * Applies the limits to a call's events, failing it with `UpstreamTimeoutError`
 * (and unsubscribing it, which aborts the upstream request) when one is passed.
 * A stream is timed by its first chunk and by the gaps between chunks, never by
 * its total length, so a long answer is not cut while a hang is caught early.
 */
export function withTimeLimits<T>(limits: TimeLimits): OperatorFunction<CallEvent<T>, CallEvent<T>> {
  return (source) =>
    new Observable<CallEvent<T>>((subscriber) => {
      const startedAt = Date.now();
      let timer: ReturnType<typeof setTimeout> | undefined;
      const arm = (ms: number, error: () => Error) => {
        clearTimeout(timer);
        timer = setTimeout(() => subscriber.error(error()), Math.max(0, ms));
      };
      arm(limits.totalMs, () => new UpstreamTimeoutError('total', limits.totalMs));
      const subscription = source.subscribe({
        next(event) {
          if (event.kind === 'value') clearTimeout(timer);
          else if (event.kind === 'head') {
            const left = startedAt + limits.firstChunkMs - Date.now();
            arm(left, () => new UpstreamTimeoutError('first_chunk', limits.firstChunkMs));
          } else arm(limits.idleMs, () => new UpstreamTimeoutError('idle', limits.idleMs));
          subscriber.next(event);
        },
        error(error) {
          clearTimeout(timer);
          subscriber.error(error);
        },
        complete() {
          clearTimeout(timer);
          subscriber.complete();
        },
      });
      return () => {
        clearTimeout(timer);
        subscription.unsubscribe();
      };
    });
}
