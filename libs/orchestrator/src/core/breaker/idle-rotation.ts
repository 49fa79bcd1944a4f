import { EventEmitter } from 'node:events';

/** The breaker events opossum counts in its rolling window (each one lands in the newest bucket). */
export const COUNTED_EVENTS = [
  'fire',
  'reject',
  'success',
  'failure',
  'timeout',
  'fallback',
  'semaphoreLocked',
  'cacheHit',
  'cacheMiss',
  'coalesceCacheHit',
  'coalesceCacheMiss',
] as const;

/**
 * Rotates opossum's rolling-window buckets (its `rotateBucketController`) at
 * the times its own `setInterval` would (every `periodMs` from creation), but
 * only while a bucket may hold a count: once `buckets` rotations have passed
 * with nothing counted, every bucket is empty and rotating it changes
 * nothing, so the timer stops until the next counted event. A gateway at rest
 * then wakes for none of its breakers.
 */
export class IdleRotation extends EventEmitter {
  private timer?: ReturnType<typeof setTimeout>;
  /** Rotations since the last counted event. */
  private quiet = 0;
  private readonly origin = performance.now();
  private stopped = false;

  constructor(
    private readonly periodMs: number,
    private readonly buckets: number,
  ) {
    super();
  }

  /** Something was counted: keep rotating until it has left the window. */
  readonly wake = (): void => {
    this.quiet = 0;
    if (this.timer === undefined && !this.stopped) this.schedule();
  };

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(): void {
    const intoPeriod = (performance.now() - this.origin) % this.periodMs;
    this.timer = setTimeout(this.rotate, this.periodMs - intoPeriod);
    this.timer.unref?.();
  }

  private readonly rotate = (): void => {
    this.timer = undefined;
    this.emit('rotate');
    if (++this.quiet < this.buckets) this.schedule();
  };
}
