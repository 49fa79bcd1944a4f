import { Observable, type OperatorFunction } from 'rxjs';
import type { CallEvent, FlowControl } from '../events.js';
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
 * A timer that fires this much later than it was due means the event loop was
 * busy (a large body parsed, a burst of answers written), not that the
 * upstream was slow: that time is given back to the call.
 */
export const LOOP_LAG_TOLERANCE_MS = 20;

/**
 * Applies the limits to a call's events, failing it with `UpstreamTimeoutError`
 * (and unsubscribing it, which aborts the upstream request) when one is passed.
 * A stream is timed by its first chunk and by the gaps between chunks, never by
 * its total length, so a long answer is not cut while a hang is caught early.
 *
 * Time the process itself spent busy is not charged to the upstream: a timer
 * that fires late (the loop was blocked) is extended by its lateness, up to the
 * limit once more, so an answer that arrived while the loop was blocked is
 * read, and counts as in time.
 */
export function withTimeLimits<T>(limits: TimeLimits): OperatorFunction<CallEvent<T>, CallEvent<T>> {
  return (source) =>
    new Observable<CallEvent<T>>((subscriber) => {
      const startedAt = Date.now();
      let timer: ReturnType<typeof setTimeout> | undefined;
      let armedMs = -1;
      let due = Infinity;
      let given = 0;
      let phase: UpstreamTimeoutError['phase'] = 'total';
      let limitMs = limits.totalMs;
      let flow: FlowControl | undefined;
      const check = () => {
        // Held back by its own slow readers, a stream is not silent: the gap limit starts again once it flows.
        if (phase === 'idle' && flow?.paused) {
          due = Date.now() + limits.idleMs;
          timer = setTimeout(check, limits.idleMs);
          armedMs = -1;
          return;
        }
        const late = Date.now() - due;
        if (late > LOOP_LAG_TOLERANCE_MS && given < limitMs) {
          const back = Math.min(late, limitMs - given);
          given += back;
          due = Date.now() + back;
          armedMs = -1;
          timer = setTimeout(check, back);
          return;
        }
        subscriber.error(new UpstreamTimeoutError(phase, limitMs));
      };
      const arm = (ms: number, nextPhase: UpstreamTimeoutError['phase'], nextLimit: number) => {
        phase = nextPhase;
        limitMs = nextLimit;
        due = Date.now() + Math.max(0, ms);
        // The idle limit re-arms on every chunk with the same delay: refreshing the timer costs no new one.
        if (timer && armedMs === ms) timer.refresh();
        else {
          clearTimeout(timer);
          timer = setTimeout(check, Math.max(0, ms));
          armedMs = ms;
        }
      };
      const disarm = () => {
        due = Infinity;
        clearTimeout(timer);
      };
      arm(limits.totalMs, 'total', limits.totalMs);
      const subscription = source.subscribe({
        next(event) {
          if (event.kind === 'value') disarm();
          else if (event.kind === 'head') {
            flow = event.flow;
            arm(startedAt + limits.firstChunkMs - Date.now(), 'first_chunk', limits.firstChunkMs);
          }
          else arm(limits.idleMs, 'idle', limits.idleMs);
          subscriber.next(event);
        },
        error(error) {
          disarm();
          subscriber.error(error);
        },
        complete() {
          disarm();
          subscriber.complete();
        },
      });
      return () => {
        disarm();
        subscription.unsubscribe();
      };
    });
}
