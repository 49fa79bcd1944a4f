import perfHooks, { type IntervalHistogram } from 'node:perf_hooks';
import type * as PromClient from 'prom-client';

/** A process this long without a request is at rest: its event loop is no longer sampled. */
export const REST_AFTER_MS = 2_000;

/** How often the event-loop monitor samples while requests come. */
const PRECISION_MS = 100;

type MonitorEventLoopDelay = typeof perfHooks.monitorEventLoopDelay;
/** `node:perf_hooks` as an object whose function may be swapped (prom-client reads it from there when it is called). */
const hooks = perfHooks as unknown as { monitorEventLoopDelay: MonitorEventLoopDelay };

/**
 * prom-client's default metrics, with their event-loop-delay monitor (`nodejs_eventloop_lag_*`) sampling only while
 * requests come (`busy`), not at rest. prom-client enables that monitor for as long as its registry lives: a
 * libuv timer that wakes an idle process ten times a second, which was most of what a gateway at rest cost. At rest
 * there is no lag to see; a scrape then reads 0 (prom-client would read an empty monitor's minimum as 2^63 ns).
 * Hand-written: prom-client has no option to pause its monitor, so the monitor is caught as prom-client makes it.
 */
export class DefaultMetrics {
  private readonly monitor?: IntervalHistogram;
  private sampling = false;
  /** A request came since the last check (see `rest`). */
  private requested = false;
  private check?: ReturnType<typeof setInterval>;

  constructor(prom: typeof PromClient, registry: PromClient.Registry) {
    const made: IntervalHistogram[] = [];
    const monitorEventLoopDelay = hooks.monitorEventLoopDelay;
    hooks.monitorEventLoopDelay = (options) => {
      const monitor = monitorEventLoopDelay(options);
      made.push(monitor);
      return monitor;
    };
    try {
      prom.collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: PRECISION_MS });
    } finally {
      hooks.monitorEventLoopDelay = monitorEventLoopDelay;
    }
    this.monitor = made[0];
    if (this.monitor) {
      this.monitor.disable();
      readsZeroWhenEmpty(this.monitor);
    }
  }

  /** A request came: the event loop is sampled until REST_AFTER_MS pass without one. */
  busy(): void {
    this.requested = true;
    if (this.sampling || !this.monitor) return;
    this.sampling = true;
    this.monitor.enable();
    this.check = setInterval(this.rest, REST_AFTER_MS);
    this.check.unref();
  }

  /** Stops sampling (until the next request, if any comes). */
  close(): void {
    clearInterval(this.check);
    this.monitor?.disable();
    this.sampling = false;
  }

  /** Every REST_AFTER_MS while sampling: none came since the last check, the process is at rest. */
  private readonly rest = (): void => {
    if (this.requested) this.requested = false;
    else this.close();
  };
}

/** An empty monitor's minimum, mean and deviation read 0 (no lag seen), not 2^63 ns and NaN. */
function readsZeroWhenEmpty(monitor: IntervalHistogram): void {
  const prototype = Object.getPrototypeOf(monitor) as object;
  for (const name of ['min', 'mean', 'stddev'] as const) {
    Object.defineProperty(monitor, name, {
      get: () => (monitor.count > 0 ? (Reflect.get(prototype, name, monitor) as number) : 0),
    });
  }
}
