import { OrchestratorConfigError } from '../options.js';

/** Settings of an adaptive limit (see `AdaptiveLimit`); every field has a default. */
export interface AdaptiveLimitOptions {
  /** The limit before anything is learnt. Default 32 (never above `maxLimit`). */
  initialLimit?: number;
  /** The limit never goes below this. Default 1. */
  minLimit?: number;
  /** Latency may rise to this multiple of the uncontended latency before the limit shrinks. Default 1.25. */
  tolerance?: number;
  /** Factor applied to the limit when latency rose past the tolerance. Default 0.9. */
  backoff?: number;
  /** Factor applied to the limit on an overload answer (429, 503); at most once per window. Default 0.5. */
  dropBackoff?: number;
  /** Shortest window over which latencies are averaged before the limit moves. Default 100 ms. */
  windowMs?: number;
  /** Fewest samples a window needs before the limit moves. Default 8. */
  minSamples?: number;
}

/** Milliseconds from an arbitrary origin, increasing (e.g. `performance.now`). */
export type Clock = () => number;

interface Settings {
  minLimit: number;
  maxLimit: number;
  tolerance: number;
  backoff: number;
  dropBackoff: number;
  windowMs: number;
  minSamples: number;
}

/**
 * A concurrency limit that finds an upstream's capacity from its latency, in
 * the spirit of Netflix's concurrency-limits and Envoy's adaptive concurrency
 * filter, without timers of its own: it moves only when a sample arrives.
 *
 * Samples are averaged over windows (`windowMs`, at least `minSamples`). The
 * lowest window average is the uncontended latency. At the end of a window:
 * - the average is above `tolerance` x uncontended: the upstream is queueing,
 *   the limit shrinks by `backoff`;
 * - else it grows by its square root (quick from a small limit, gentle near a
 *   large one);
 * - a limit nobody used (less than half of it in flight) stays where it is:
 *   light traffic proves nothing.
 * An overload answer (429, 503) shrinks it by `dropBackoff` at once, at most
 * once per window (a burst of refusals is one signal).
 *
 * The uncontended latency is re-learnt at the minimum limit, where nothing of
 * ours queues: an upstream that became slower for everyone (another model, a
 * busier shared host) pushes the limit down once, then is measured afresh and
 * the limit grows again, as Envoy's periodic minimum-latency measurement does.
 */
export class AdaptiveLimit {
  private current: number;
  private readonly settings: Settings;
  private noLoadMs = Number.POSITIVE_INFINITY;
  private windowStart: number;
  private windowSum = 0;
  private windowCount = 0;
  private windowMaxInFlight = 0;
  private lastDropAt = Number.NEGATIVE_INFINITY;

  constructor(
    maxLimit: number,
    options: AdaptiveLimitOptions = {},
    private readonly now: Clock = () => performance.now(),
    /** Told of every change of the rounded limit. */
    private readonly onChange?: (limit: number) => void,
    /**
     * This process's own delay (ms) since it was last asked, e.g. the event loop's mean lag: taken off each window's
     * average, so that a gateway short of CPU does not read its own slowness as the upstream queueing.
     */
    private readonly ownDelayMs?: () => number,
  ) {
    this.settings = {
      minLimit: options.minLimit ?? 1,
      maxLimit,
      tolerance: options.tolerance ?? 1.25,
      backoff: options.backoff ?? 0.9,
      dropBackoff: options.dropBackoff ?? 0.5,
      windowMs: options.windowMs ?? 100,
      minSamples: options.minSamples ?? 8,
    };
    const s = this.settings;
    if (!(s.minLimit >= 1 && s.minLimit <= maxLimit)) throw new OrchestratorConfigError(`adaptive minLimit must be within 1..${maxLimit}`);
    if (!(s.tolerance >= 1)) throw new OrchestratorConfigError('adaptive tolerance must be at least 1');
    if (!(s.backoff > 0 && s.backoff < 1) || !(s.dropBackoff > 0 && s.dropBackoff < 1)) {
      throw new OrchestratorConfigError('adaptive backoff and dropBackoff must be between 0 and 1');
    }
    this.current = clamp(options.initialLimit ?? 32, s.minLimit, maxLimit);
    this.windowStart = now();
  }

  /** The limit to apply now (a whole number). */
  get limit(): number {
    return Math.floor(this.current);
  }

  /** The lowest window average latency seen (ms), or undefined before the first window. */
  get uncontendedMs(): number | undefined {
    return Number.isFinite(this.noLoadMs) ? this.noLoadMs : undefined;
  }

  /**
   * One finished call: its latency (to its first byte) and how many calls were
   * in flight when it started or ended (whichever the caller knows).
   */
  sample(latencyMs: number, inFlight: number): void {
    this.windowSum += latencyMs;
    this.windowCount++;
    if (inFlight > this.windowMaxInFlight) this.windowMaxInFlight = inFlight;
    const now = this.now();
    if (now - this.windowStart < this.settings.windowMs || this.windowCount < this.settings.minSamples) return;
    const average = this.windowSum / this.windowCount;
    const lag = this.ownDelayMs?.() ?? 0;
    const used = this.windowMaxInFlight >= this.current / 2;
    this.windowStart = now;
    this.windowSum = 0;
    this.windowCount = 0;
    this.windowMaxInFlight = 0;
    this.endWindow(average, Math.max(0, average - lag), used);
  }

  /** An overload answer (429, 503): the upstream says it has too much. */
  drop(): void {
    const now = this.now();
    if (now - this.lastDropAt < this.settings.windowMs) return;
    this.lastDropAt = now;
    this.set(this.current * this.settings.dropBackoff);
  }

  /**
   * `average` as measured sets the uncontended latency (a lag estimate never lowers it); `compensated` (the process's
   * own delay taken off) is what is compared with it, so that the process's own slowness can only spare the limit.
   */
  private endWindow(average: number, compensated: number, used: boolean): void {
    const s = this.settings;
    // At the floor nothing of ours queues: whatever latency is seen there is the upstream's own.
    if (average < this.noLoadMs || this.current <= s.minLimit) this.noLoadMs = average;
    // A limit nobody reached says nothing either way about the upstream's capacity.
    if (!used) return;
    if (compensated > this.noLoadMs * s.tolerance) this.set(this.current * s.backoff);
    else this.set(this.current + Math.sqrt(this.current));
  }

  private set(value: number): void {
    const before = this.limit;
    this.current = clamp(value, this.settings.minLimit, this.settings.maxLimit);
    if (this.limit !== before) this.onChange?.(this.limit);
  }
}

function clamp(value: number, min: number, max: number): number {
  return Math.min(max, Math.max(min, value));
}
