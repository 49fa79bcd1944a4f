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
  /**
   * Congestion is checked against an uncontended latency measured at a low limit (a probe) at most this often;
   * between probes it is taken as known. Default 30 000 ms.
   */
  probeIntervalMs?: number;
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
  probeIntervalMs: number;
}

/** Fewest calls let through while the uncontended latency is measured (as Envoy's `min_concurrency`). */
const PROBE_LIMIT = 4;

/**
 * A concurrency limit that finds an upstream's capacity from its latency, in
 * the spirit of Netflix's concurrency-limits and Envoy's adaptive concurrency
 * filter, without timers of its own: it moves only when a sample arrives.
 *
 * Samples are averaged over windows (`windowMs`, at least `minSamples`); a
 * window counts only calls that started after the limit last moved, so that
 * it judges the limit in force, not the one before. At the end of a window:
 * - the average is above `tolerance` x the uncontended latency: the upstream
 *   is queueing, the limit shrinks by `backoff`;
 * - above half of that tolerance, it grows by one call: it settles just under
 *   the tolerance instead of swinging across it;
 * - else it grows by its square root (quick from a small limit, gentle near a
 *   large one);
 * - a limit nobody used (less than half of it in flight) stays where it is:
 *   light traffic proves nothing.
 * An overload answer (429, 503) shrinks it by `dropBackoff` at once, at most
 * once per window (a burst of refusals is one signal).
 *
 * The uncontended latency is the lowest window average until congestion is
 * first seen; a limit that started above the upstream's capacity never saw
 * it uncontended, though. So congestion, at most once per `probeIntervalMs`,
 * first starts a probe, as Envoy's periodic minimum-latency measurement does:
 * the limit drops to a quarter (at least `PROBE_LIMIT` calls) until one
 * window of calls started under it is in. Their median becomes the
 * uncontended latency (an upstream that became slower, or faster, for
 * everyone is measured afresh), and the limit resumes at `backoff` times
 * where it was (the congestion was seen), judged against it from then on.
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
  /** When the limit last moved: calls started before say nothing about the limit now. */
  private changedAt: number;
  /** When the last probe ended (the uncontended latency was measured). */
  private probedAt = Number.NEGATIVE_INFINITY;
  /** During a probe: the limit to resume. */
  private resumeAt?: number;
  /** During a probe: its samples (their median is the uncontended latency, a few stragglers aside). */
  private probeSamples: number[] = [];

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
      probeIntervalMs: options.probeIntervalMs ?? 30_000,
    };
    const s = this.settings;
    if (!(s.minLimit >= 1 && s.minLimit <= maxLimit)) throw new OrchestratorConfigError(`adaptive minLimit must be within 1..${maxLimit}`);
    if (!(s.tolerance >= 1)) throw new OrchestratorConfigError('adaptive tolerance must be at least 1');
    if (!(s.backoff > 0 && s.backoff < 1) || !(s.dropBackoff > 0 && s.dropBackoff < 1)) {
      throw new OrchestratorConfigError('adaptive backoff and dropBackoff must be between 0 and 1');
    }
    this.current = clamp(options.initialLimit ?? 32, s.minLimit, maxLimit);
    this.windowStart = now();
    this.changedAt = this.windowStart;
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
    const now = this.now();
    if (now - latencyMs < this.changedAt) return;
    this.windowSum += latencyMs;
    this.windowCount++;
    if (this.resumeAt !== undefined) this.probeSamples.push(latencyMs);
    if (inFlight > this.windowMaxInFlight) this.windowMaxInFlight = inFlight;
    if (now - this.windowStart < this.settings.windowMs || this.windowCount < this.settings.minSamples) return;
    const average = this.windowSum / this.windowCount;
    const lag = this.ownDelayMs?.() ?? 0;
    const used = this.windowMaxInFlight >= this.current / 2;
    this.resetWindow(now);
    if (this.resumeAt !== undefined) return this.endProbe(now);
    this.endWindow(average, Math.max(0, average - lag), used, now);
  }

  /** Whether the uncontended latency is being measured now (the limit is held low meanwhile). */
  get probing(): boolean {
    return this.resumeAt !== undefined;
  }

  /** An overload answer (429, 503): the upstream says it has too much. */
  drop(): void {
    const now = this.now();
    if (now - this.lastDropAt < this.settings.windowMs) return;
    this.lastDropAt = now;
    if (this.resumeAt !== undefined) this.resumeAt = Math.max(this.settings.minLimit, this.resumeAt * this.settings.dropBackoff);
    else this.set(this.current * this.settings.dropBackoff, now);
  }

  /**
   * `average` as measured sets the uncontended latency (a lag estimate never lowers it); `compensated` (the process's
   * own delay taken off) is what is compared with it, so that the process's own slowness can only spare the limit.
   */
  private endWindow(average: number, compensated: number, used: boolean, now: number): void {
    const s = this.settings;
    // At the floor nothing of ours queues: whatever latency is seen there is the upstream's own.
    if (average < this.noLoadMs || this.current <= s.minLimit) this.noLoadMs = average;
    // A limit nobody reached says nothing either way about the upstream's capacity.
    if (!used) return;
    if (compensated > this.noLoadMs * s.tolerance) {
      // Congestion against an uncontended latency that may never have been uncontended: measure it first.
      // A quarter of the limit (at least a few calls): below the capacity of all but a far overshot upstream, whose
      // next probe starts lower; small enough that the probe's window fills within a few latencies.
      const probe = Math.max(s.minLimit, Math.min(this.limit - 1, Math.max(PROBE_LIMIT, Math.floor(this.current / 4))));
      if (now - this.probedAt >= s.probeIntervalMs && probe < this.limit) {
        this.resumeAt = this.current;
        this.probeSamples = [];
        this.set(probe, now);
      } else this.set(this.current * s.backoff, now);
    } else if (compensated > this.noLoadMs * (1 + (s.tolerance - 1) / 2)) {
      // Close to the tolerance: one more call at a time, so the limit settles just under it rather than swinging.
      this.set(this.current + 1, now);
    } else this.set(this.current + Math.sqrt(this.current), now);
  }

  /** The probe's window is in: it is the upstream's uncontended latency now; the limit goes back to where it was. */
  private endProbe(now: number): void {
    const resume = this.resumeAt!;
    this.resumeAt = undefined;
    const samples = this.probeSamples.sort((a, b) => a - b);
    this.probeSamples = [];
    this.noLoadMs = samples[samples.length >> 1];
    this.probedAt = now;
    this.set(resume * this.settings.backoff, now);
  }

  private resetWindow(now: number): void {
    this.windowStart = now;
    this.windowSum = 0;
    this.windowCount = 0;
    this.windowMaxInFlight = 0;
  }

  private set(value: number, now: number): void {
    const before = this.limit;
    this.current = clamp(value, this.settings.minLimit, this.settings.maxLimit);
    if (this.limit !== before) {
      this.changedAt = now;
      this.resetWindow(now);
      this.onChange?.(this.limit);
    }
  }
}

function clamp(value: number, min: number, max: number): number {
  return Math.min(max, Math.max(min, value));
}
