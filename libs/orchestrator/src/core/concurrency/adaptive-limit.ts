import { OrchestratorConfigError } from '../options.js';

/** Settings of an adaptive limit (see `AdaptiveLimit`); every field has a default. */
export interface AdaptiveLimitOptions {
  /** The limit before anything is learnt. Default 32 (never above `maxLimit`). */
  initialLimit?: number;
  /** The limit never goes below this. Default 1. */
  minLimit?: number;
  /** Latency may rise to this multiple of the uncontended latency before the limit shrinks. Default 1.15. */
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
  /** Double the limit where it would grow, until it first has to come down (as TCP's slow start). Default true. */
  slowStart?: boolean;
}

/** How latency moved with the calls in flight (d ln latency / d ln calls), and whether the last window measured it. */
interface Slope {
  elasticity: number;
  fresh: boolean;
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
 * Below this elasticity of latency to the calls in flight, more calls still raise throughput by more than half
 * their share (throughput = calls / latency): the upstream is not at its capacity, whatever the latency's level.
 */
const KNEE_ELASTICITY = 0.5;
/** Latency beyond this multiple of the uncontended one is queueing, whatever its slope says. */
const UNQUEUED_LATENCY = 2;
/** A slope this steep, just measured, is an upstream past its capacity (latency proportional to the calls it holds). */
const PAST_KNEE_ELASTICITY = 0.8;
/** Windows whose mean calls in flight differ by less than this (as a log ratio, ~10%) give no slope: noise would. */
const MIN_IN_FLIGHT_SPREAD = Math.log(1.1);
/** How many windows a slope is trusted for when the calls in flight hardly move. */
const SLOPE_WINDOWS = 5;
/** A latency above its slope's anchor by more than this factor, at the same calls in flight, is news: the slope is not used. */
const STEADY_LATENCY = 1.1;

/**
 * A concurrency limit that finds an upstream's capacity from its latency, in
 * the spirit of Netflix's concurrency-limits and Envoy's adaptive concurrency
 * filter, without timers of its own: it moves only when a sample arrives.
 *
 * Samples are averaged over windows (`windowMs` and twice their own latency
 * at least, `minSamples`); a window counts only calls that started after the
 * limit last moved, so that it judges the limit in force, not the one before.
 * At the end of a window:
 * - the latency rose in proportion to the calls in flight since an earlier
 *   window (their slope, d ln latency / d ln calls, is 0.8 or more: the
 *   upstream is past its capacity), or the average is above `tolerance` x
 *   the uncontended latency: the upstream is queueing, the limit shrinks by
 *   `backoff`;
 * - above half of that tolerance, it grows by one call: it settles just under
 *   the tolerance instead of swinging across it;
 * - else it grows by its square root (quick from a small limit, gentle near a
 *   large one, and never past where an upstream at its capacity would reach
 *   the tolerance), or doubles until it first had to come down (`slowStart`);
 * - up to twice the uncontended latency, it grows when the latency rose much
 *   less than the calls in flight (a slope below 0.5, below the knee an
 *   upstream at its capacity shows): a busy machine or a provider a little
 *   slower under load is not mistaken for one queueing our calls;
 * - a limit nobody used (less than half of it in flight) stays where it is:
 *   light traffic proves nothing.
 * An overload answer (429, 503) shrinks it by `dropBackoff` at once, at most
 * once per window (a burst of refusals is one signal).
 *
 * The uncontended latency is the lowest window average until congestion is
 * first seen; a limit that started above the upstream's capacity never saw
 * it uncontended, though. So congestion, at most once per `probeIntervalMs`,
 * first starts a probe, as Envoy's periodic minimum-latency measurement does:
 * the limit drops to a quarter (at least `PROBE_LIMIT` calls, at most half
 * the last limit that was not congested) until a window of calls started
 * under it, and ended with no more in flight, is in. Their median becomes the
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
  private windowInFlightSum = 0;
  /** A window judged earlier: its mean calls in flight and latency, what the slope of later ones is measured from. */
  private anchor?: { inFlight: number; latencyMs: number };
  /** The limit of the last window judged not congested. */
  private uncongestedLimit = Number.POSITIVE_INFINITY;
  /** Until the limit first comes down, it doubles where it would grow. */
  private slowStart: boolean;
  /** The last slope measured, and how many windows ago. */
  private slope?: { elasticity: number; age: number };
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
      tolerance: options.tolerance ?? 1.15,
      backoff: options.backoff ?? 0.9,
      dropBackoff: options.dropBackoff ?? 0.5,
      windowMs: options.windowMs ?? 100,
      minSamples: options.minSamples ?? 8,
      probeIntervalMs: options.probeIntervalMs ?? 30_000,
    };
    const s = this.settings;
    if (!(s.minLimit >= 1 && s.minLimit <= maxLimit))
      throw new OrchestratorConfigError(`adaptive minLimit must be within 1..${maxLimit}`);
    if (!(s.tolerance >= 1)) throw new OrchestratorConfigError('adaptive tolerance must be at least 1');
    if (!(s.backoff > 0 && s.backoff < 1) || !(s.dropBackoff > 0 && s.dropBackoff < 1)) {
      throw new OrchestratorConfigError('adaptive backoff and dropBackoff must be between 0 and 1');
    }
    this.current = clamp(options.initialLimit ?? 32, s.minLimit, maxLimit);
    this.slowStart = options.slowStart ?? true;
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
    if (this.resumeAt !== undefined) {
      // Only calls that ended with no more in flight than the probe lets through: while the calls let through before
      // it are still running, the upstream is as busy as before, and its latency says nothing uncontended.
      // (A call's slot may be handed to the next in the queue before its sample is taken: one more is allowed.)
      if (inFlight <= this.limit + 1) this.probeSamples.push(latencyMs);
      if (now - this.windowStart >= this.settings.windowMs && this.probeSamples.length >= this.settings.minSamples) {
        this.resetWindow(now);
        this.endProbe(now);
      }
      return;
    }
    this.windowSum += latencyMs;
    this.windowCount++;
    if (inFlight > this.windowMaxInFlight) this.windowMaxInFlight = inFlight;
    this.windowInFlightSum += inFlight;
    if (this.windowCount < this.settings.minSamples) return;
    const average = this.windowSum / this.windowCount;
    // A window at least twice its own latency long: closed sooner, it would hold only the calls that were quickest
    // to come back since the limit moved, and read the upstream faster than it is.
    if (now - this.windowStart < Math.max(this.settings.windowMs, 2 * average)) return;
    const meanInFlight = this.windowInFlightSum / this.windowCount;
    const lag = this.ownDelayMs?.() ?? 0;
    const used = this.windowMaxInFlight >= this.current / 2;
    this.resetWindow(now);
    const compensated = Math.max(0, average - lag);
    this.endWindow(average, compensated, used, this.elasticity(meanInFlight, compensated), now);
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
    if (this.resumeAt !== undefined)
      this.resumeAt = Math.max(this.settings.minLimit, this.resumeAt * this.settings.dropBackoff);
    else this.set(this.current * this.settings.dropBackoff, now);
  }

  /**
   * `average` as measured sets the uncontended latency (a lag estimate never lowers it); `compensated` (the process's
   * own delay taken off) is what is compared with it, so that the process's own slowness can only spare the limit.
   */
  private endWindow(average: number, compensated: number, used: boolean, slope: Slope | undefined, now: number): void {
    const s = this.settings;
    // At the floor nothing of ours queues: whatever latency is seen there is the upstream's own.
    if (average < this.noLoadMs || this.current <= s.minLimit) this.noLoadMs = average;
    // A limit nobody reached says nothing either way about the upstream's capacity.
    if (!used) return;
    // Latency that grows much less than our calls in flight is not the upstream queueing them: more calls still buy
    // more than half their share of throughput (a machine short of CPU, a provider a little slower under load).
    // Up to twice the uncontended latency, the limit then grows as below the tolerance (by steps large enough that
    // the next window measures the slope again); past the knee, one step costs at most one window of queueing.
    if (slope && slope.elasticity < KNEE_ELASTICITY && compensated <= this.noLoadMs * UNQUEUED_LATENCY) {
      this.grow(now);
    } else if (
      compensated > this.noLoadMs * s.tolerance ||
      (slope?.fresh && slope.elasticity >= PAST_KNEE_ELASTICITY)
    ) {
      // Congested, or latency that just rose in proportion to the calls in flight (an upstream at its capacity, even
      // against an uncontended latency measured wrong). The uncontended latency may never have been uncontended:
      // measure it first. A quarter of the limit (at least a few calls), and at most half the last limit whose
      // window was not congested (slow start may have doubled far past the capacity): small enough that the
      // probe's window fills within a few latencies.
      const quarter = Math.min(this.current / 4, this.uncongestedLimit / 2);
      const probe = Math.max(s.minLimit, Math.min(this.limit - 1, Math.max(PROBE_LIMIT, Math.floor(quarter))));
      if (now - this.probedAt >= s.probeIntervalMs && probe < this.limit) {
        this.resumeAt = this.current;
        this.probeSamples = [];
        this.set(probe, now);
      } else this.set(this.current * s.backoff, now);
    } else if (compensated > this.noLoadMs * (1 + (s.tolerance - 1) / 2)) {
      this.uncongestedLimit = this.current;
      // Close to the tolerance: one more call at a time, so the limit settles just under it rather than swinging.
      this.set(this.current + 1, now);
    } else {
      this.uncongestedLimit = this.current;
      this.grow(now, compensated);
    }
  }

  /**
   * By its square root (quick from a small limit, gentle near a large one); doubled until the limit first had to
   * come down, as TCP's slow start: a provider with room for hundreds of calls is not held at the initial limit for
   * the seconds that steps of a square root would take.
   *
   * After slow start, given the latency it grows from, no further than an upstream at its capacity (latency
   * proportional to the calls in flight) would take to the tolerance: a step from just under the knee does not
   * overshoot it by a square root (from 21 calls on an upstream of capacity 20, 5% over the uncontended latency, +4.6
   * would hold it 28% over for a whole window; the step stops at 23).
   */
  private grow(now: number, latencyMs?: number): void {
    if (this.slowStart) return this.set(this.current * 2, now);
    let next = this.current + Math.sqrt(this.current);
    if (latencyMs !== undefined && latencyMs > this.noLoadMs) {
      const atTolerance = (this.current * this.noLoadMs * this.settings.tolerance) / latencyMs;
      next = Math.max(this.current + 1, Math.min(next, atTolerance));
    }
    this.set(next, now);
  }

  /**
   * How the latency moved with the calls in flight since the last window judged (d ln latency / d ln in flight):
   * about 1 past an upstream's capacity (latency proportional to the calls it queues), about 0 below it. Undefined
   * when the calls in flight hardly moved (the slope is then noise).
   */
  private elasticity(inFlight: number, latencyMs: number): Slope | undefined {
    const anchor = this.anchor;
    if (!anchor || anchor.latencyMs <= 0 || latencyMs <= 0) {
      this.anchor = { inFlight, latencyMs };
      return undefined;
    }
    const spread = Math.log(inFlight / anchor.inFlight);
    if (Math.abs(spread) < MIN_IN_FLIGHT_SPREAD) {
      // Steps of one call, or callers that are all in: the slope measured a few windows ago still holds, unless the
      // latency moved on its own (an upstream slower for everyone is not measured by our calls).
      const steady = latencyMs <= anchor.latencyMs * STEADY_LATENCY;
      if (this.slope && ++this.slope.age <= SLOPE_WINDOWS && steady)
        return { elasticity: this.slope.elasticity, fresh: false };
      return undefined;
    }
    this.anchor = { inFlight, latencyMs };
    this.slope = { elasticity: Math.log(latencyMs / anchor.latencyMs) / spread, age: 0 };
    return { elasticity: this.slope.elasticity, fresh: true };
  }

  /** The probe's window is in: it is the upstream's uncontended latency now; the limit goes back to where it was. */
  private endProbe(now: number): void {
    const resume = this.resumeAt!;
    this.resumeAt = undefined;
    const samples = this.probeSamples.sort((a, b) => a - b);
    this.probeSamples = [];
    this.noLoadMs = samples[samples.length >> 1];
    this.probedAt = now;
    // Measured at a quarter of the limit: no slope to draw from it to the windows after.
    this.anchor = undefined;
    this.slope = undefined;
    this.set(resume * this.settings.backoff, now);
  }

  private resetWindow(now: number): void {
    this.windowStart = now;
    this.windowSum = 0;
    this.windowCount = 0;
    this.windowMaxInFlight = 0;
    this.windowInFlightSum = 0;
  }

  private set(value: number, now: number): void {
    const before = this.limit;
    if (value < this.current) this.slowStart = false;
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
