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
 * The time limits of one attempt, told of its events as they pass: a plain
 * answer must come within `totalMs`, a stream's head too, its first chunk
 * within `firstChunkMs` of the start and each later chunk within `idleMs` of
 * the one before. When a limit is passed, `expire` is called once with an
 * `UpstreamTimeoutError`. A stream is timed by its first chunk and by the gaps
 * between chunks, never by its total length, so a long answer is not cut
 * while a hang is caught early.
 *
 * Time the process itself spent busy is not charged to the upstream: a timer
 * that fires late (the loop was blocked) is extended by its lateness, up to
 * the limit once more, so an answer that arrived while the loop was blocked is
 * read, and counts as in time.
 *
 * A class rather than an operator of its own: the guarded call owns one per
 * attempt and tells it of each event itself, so a plain answer costs one timer
 * and no extra subscription.
 */
export class CallClock {
  private readonly startedAt = Date.now();
  private timer?: ReturnType<typeof setTimeout>;
  /** A timer is set and has not fired yet. */
  private pending = false;
  private due = Infinity;
  private given = 0;
  private phase: UpstreamTimeoutError['phase'] = 'total';
  private limitMs: number;
  private flow?: FlowControl;

  constructor(
    private readonly limits: TimeLimits,
    private readonly expire: (error: UpstreamTimeoutError) => void,
  ) {
    this.limitMs = limits.totalMs;
    this.arm(limits.totalMs, 'total', limits.totalMs);
  }

  /** An event of the attempt: a value ends the timing, a head starts the first chunk's, a chunk the next gap's. */
  event(event: CallEvent<unknown>): void {
    if (event.kind === 'value') this.stop();
    else if (event.kind === 'head') {
      this.flow = event.flow;
      this.arm(this.startedAt + this.limits.firstChunkMs - Date.now(), 'first_chunk', this.limits.firstChunkMs);
    } else this.arm(this.limits.idleMs, 'idle', this.limits.idleMs);
  }

  /** The attempt ended (or was left): no limit applies any more. */
  stop(): void {
    this.due = Infinity;
    this.pending = false;
    clearTimeout(this.timer);
  }

  private arm(ms: number, phase: UpstreamTimeoutError['phase'], limitMs: number): void {
    // Each chunk of a stream moves the idle limit on: the timer already set reads `due` when it fires and is set
    // again for what is left, instead of being moved on every chunk (a timer list update each).
    const lazy = phase === 'idle' && this.phase === 'idle' && this.pending;
    this.phase = phase;
    this.limitMs = limitMs;
    this.due = Date.now() + Math.max(0, ms);
    if (lazy) return;
    clearTimeout(this.timer);
    this.set(Math.max(0, ms));
  }

  private set(ms: number): void {
    this.timer = setTimeout(this.check, ms);
    this.pending = true;
  }

  private readonly check = (): void => {
    this.pending = false;
    const now = Date.now();
    // A chunk came after the timer was set: the gap is timed from that chunk.
    if (now < this.due) return this.set(this.due - now);
    // Held back by its own slow readers, a stream is not silent: the gap limit starts again once it flows.
    if (this.phase === 'idle' && this.flow?.paused) {
      this.due = now + this.limits.idleMs;
      return this.set(this.limits.idleMs);
    }
    const late = now - this.due;
    if (late > LOOP_LAG_TOLERANCE_MS && this.given < this.limitMs) {
      const back = Math.min(late, this.limitMs - this.given);
      this.given += back;
      this.due = now + back;
      return this.set(back);
    }
    this.expire(new UpstreamTimeoutError(this.phase, this.limitMs));
  };
}

/**
 * Applies the limits to a call's events as an operator (see `CallClock`),
 * failing it with `UpstreamTimeoutError` (and unsubscribing it, which aborts
 * the upstream request) when one is passed.
 */
export function withTimeLimits<T>(limits: TimeLimits): OperatorFunction<CallEvent<T>, CallEvent<T>> {
  return (source) =>
    new Observable<CallEvent<T>>((subscriber) => {
      const clock = new CallClock(limits, (error) => subscriber.error(error));
      const subscription = source.subscribe({
        next(event) {
          clock.event(event);
          subscriber.next(event);
        },
        error(error) {
          clock.stop();
          subscriber.error(error);
        },
        complete() {
          clock.stop();
          subscriber.complete();
        },
      });
      return () => {
        clock.stop();
        subscription.unsubscribe();
      };
    });
}
