import { OrchestratorConfigError, checkFields, type Fields } from '../options.js';

/** Failure-rate opening, as in opossum: open when more than `thresholdPercent` of calls fail in the window. */
export interface FailureRateOptions {
  /** 0-100. */
  thresholdPercent: number;
  /** Calls the window must hold before the rate is judged. Default 10. */
  minimumCalls?: number;
  /** Default 10 000 ms. */
  windowMs?: number;
}

export interface BreakerOptions {
  /** Breaker name: one breaker per upstream. Default: the controller's class name. */
  name?: string;
  /** Consecutive failures that open the breaker. Default 5. */
  failureThreshold?: number;
  /** First open period in ms; doubled after each failed probe. Default 60 000. */
  openMs?: number;
  /** Cap of that doubling, as a multiple of `openMs`. Default 64. */
  maxOpenMultiplier?: number;
  /** Also open when more than `thresholdPercent` of calls in `windowMs` fail (opossum's mode). Off by default. */
  failureRate?: FailureRateOptions;
  /**
   * Run every `probeIntervalMs` while open; resolving (to anything but `false`)
   * closes the breaker at once. The gateway probes the provider's health route.
   */
  healthProbe?: (signal: AbortSignal) => Promise<unknown>;
  /** Default 500 ms. */
  probeIntervalMs?: number;
  /** Default 2 000 ms. */
  probeTimeoutMs?: number;
  /**
   * With a `healthProbe`, every opening is confirmed: the breaker opens when the probe sees the upstream down, or,
   * while the probe sees it answering, once the upstream's own failures (not timeouts) go on and nobody at all has
   * been answered for this long (a partial outage). Default 10 000 ms.
   */
  unansweredMs?: number;
  /** Which errors count as failures. Default: timeouts, 5xx, connection errors; not 4xx, refusals or overload. */
  isFailure?: (error: unknown) => boolean;
}

export const BREAKER_FIELDS = {
  name: { check: 'string' },
  failureThreshold: { check: 'positiveInt', default: 5 },
  openMs: { check: 'positive', default: 60_000 },
  maxOpenMultiplier: { check: 'positiveInt', default: 64 },
  failureRate: { check: 'object' },
  healthProbe: { check: 'function' },
  probeIntervalMs: { check: 'positive', default: 500 },
  probeTimeoutMs: { check: 'positive', default: 2_000 },
  unansweredMs: { check: 'positive', default: 10_000 },
  isFailure: { check: 'function' },
} as const satisfies Fields<BreakerOptions>;

export const FAILURE_RATE_FIELDS = {
  thresholdPercent: { check: 'positive' },
  minimumCalls: { check: 'nonNegativeInt', default: 10 },
  windowMs: { check: 'positive', default: 10_000 },
} as const satisfies Fields<FailureRateOptions>;

export function checkBreakerOptions(path: string, value: unknown): void {
  checkFields<BreakerOptions>(path, value, BREAKER_FIELDS);
  const rate = (value as BreakerOptions | undefined)?.failureRate;
  checkFields<FailureRateOptions>(`${path}.failureRate`, rate, FAILURE_RATE_FIELDS);
  if (rate && (rate.thresholdPercent === undefined || rate.thresholdPercent > 100)) {
    throw new OrchestratorConfigError(`${path}.failureRate.thresholdPercent must be between 0 and 100`);
  }
}
