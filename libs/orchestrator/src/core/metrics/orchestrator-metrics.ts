import type * as PromClient from 'prom-client';
import type { BreakerState } from '../breaker/circuit-breaker.js';
import type { HoldOutcome, RefusalReason, RequestOutcome, UpstreamResult } from '../observer.js';
import type { LimiterSnapshot } from '../concurrency/concurrency.registry.js';
import type { Orchestrator } from '../orchestrator.js';
import { loadOptional } from '../optional-dependency.js';
import { BatchedHistogram, TalliedCounter } from './batched-metrics.js';
import { DefaultMetrics } from './default-metrics.js';

/** A prom-client `Registry`, as far as this package uses it (its own types stay out of the public API). */
export interface MetricsRegistry {
  metrics(): Promise<string>;
  readonly contentType: string;
}

export interface OrchestratorMetricsOptions {
  /** Route of the scrape endpoint. Default `/metrics`. */
  path?: string;
  /** The prom-client `Registry` to register in (e.g. to add the app's own metrics). Default: a new one. */
  registry?: MetricsRegistry;
  /** Prefix of every metric name. Default `orchestrator_`. */
  prefix?: string;
  /** Also register prom-client's default process metrics (CPU, memory, event loop lag). Default true. */
  defaultMetrics?: boolean;
  /** Buckets of the upstream latency histogram, in seconds. */
  latencyBuckets?: number[];
  /** Buckets of the queue wait histogram, in seconds. */
  queueWaitBuckets?: number[];
}

const BREAKER_VALUE: Record<BreakerState, number> = { closed: 0, half_open: 1, open: 2 };
/** Every change a breaker can make: each is exposed at 0 from the start, so that `increase()` sees the first one. */
const BREAKER_TRANSITIONS: ReadonlyArray<readonly [BreakerState, BreakerState]> = [
  ['closed', 'open'],
  ['open', 'half_open'],
  ['open', 'closed'],
  ['half_open', 'closed'],
  ['half_open', 'open'],
];
const TRANSITION_LABELS = BREAKER_TRANSITIONS.map(([from, to]) => ({ from, to }));
const REFUSAL_REASONS: readonly RefusalReason[] = [
  'circuit_open',
  'overloaded',
  'queue_timeout',
  'shutting_down',
  'no_upstream_available',
];
const REFUSAL_LABELS = REFUSAL_REASONS.map((reason) => ({ reason }));
/**
 * prom-client's default gauges whose names end in `_total`, which the exposition format keeps for counters
 * (`promtool check metrics` rejects them): the same figures are there by type, without the suffix
 * (`nodejs_active_handles{type}` and kin).
 */
const MISNAMED_DEFAULT_METRICS = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
];

/** Children of a labelled metric, bound once per label combination (label values here are few and fixed). */
class Children<C> {
  private readonly byFirst = new Map<string, Map<string, Map<string, C>>>();

  constructor(private readonly bind: (a: string, b: string, c: string) => C) {}

  get(a: string, b = '', c = ''): C {
    let second = this.byFirst.get(a);
    if (!second) this.byFirst.set(a, (second = new Map<string, Map<string, C>>()));
    let third = second.get(b);
    if (!third) second.set(b, (third = new Map<string, C>()));
    let child = third.get(c);
    if (!child) third.set(c, (child = this.bind(a, b, c)));
    return child;
  }

  /** Drops the children of `a` (their series were removed: a later count binds new ones). */
  forget(a: string): void {
    this.byFirst.delete(a);
  }
}

/**
 * Keeps one series per known name and each of `rest` in `counter`, at 0 until counted (so that `increase()` sees
 * the first count), and removes those of names no longer known (an upstream removed leaves no series behind).
 */
function seriesOfKnown(
  counter: PromClient.Counter,
  label: string,
  known: Iterable<string>,
  rest: ReadonlyArray<Record<string, string>>,
  shown: Set<string>,
  forget?: (name: string) => void,
): void {
  const now = new Set(known);
  for (const name of shown) {
    if (now.has(name)) continue;
    for (const labels of rest) counter.remove({ [label]: name, ...labels });
    shown.delete(name);
    forget?.(name);
  }
  for (const name of now) {
    shown.add(name);
    for (const labels of rest) counter.inc({ [label]: name, ...labels }, 0);
  }
}

/**
 * The orchestrator's Prometheus metrics, on prom-client (loaded by
 * `OrchestratorObservabilityModule` only when metrics are on). Counters and
 * histograms are fed by `Orchestrator.observe`, each label combination bound
 * once; gauges (breaker state, in flight, queued, window size, store) are
 * read from `health()` at scrape time, so they cost nothing per request.
 * No label ever carries a request's own data (prompt, key, id): only route,
 * upstream and breaker names, and fixed outcome words.
 */
export class OrchestratorMetrics {
  /** The registry scraped at the metrics route; register the app's own metrics in it too. */
  readonly registry: MetricsRegistry;
  private readonly unsubscribe: () => void;
  private readonly defaults?: DefaultMetrics;

  /** Loads prom-client (an optional peer dependency of this package) and starts observing `orchestrator`. */
  static async create(
    orchestrator: Orchestrator,
    options: OrchestratorMetricsOptions = {},
  ): Promise<OrchestratorMetrics> {
    return new OrchestratorMetrics(await loadOptional('prom-client', 'metrics'), orchestrator, options);
  }

  /** `prom` is the prom-client module (typed loosely so that apps without it still compile against this package). */
  constructor(promClient: object, orchestrator: Orchestrator, options: OrchestratorMetricsOptions = {}) {
    const prom = promClient as typeof PromClient;
    const registry = (options.registry as PromClient.Registry | undefined) ?? new prom.Registry();
    this.registry = registry;
    const p = options.prefix ?? 'orchestrator_';
    const registers = [registry];
    if (options.defaultMetrics ?? true) {
      // Its event-loop monitor samples while requests come, not at rest (see `DefaultMetrics`).
      this.defaults = new DefaultMetrics(prom, registry);
      for (const name of MISNAMED_DEFAULT_METRICS) registry.removeSingleMetric(name);
    }
    const defaults = this.defaults;
    // The upstreams known now (breakers, limiters, pools): their counters start at 0 (see `BREAKER_TRANSITIONS`).
    const knownUpstreams = () => {
      const health = orchestrator.health();
      const names = new Set<string>(health.breakers.map((b) => b.name));
      for (const l of health.limiters) names.add(l.name);
      for (const pool of orchestrator.upstreams.all()) names.add(pool.name);
      return names;
    };

    // Counted on every request: tallied (see core/metrics/batched-metrics.ts); the rarer events below go to prom-client at once.
    const requests = new TalliedCounter(prom, {
      name: `${p}requests_total`,
      help: 'Requests under an orchestrator policy, by route, upstream and how they were answered (miss, joined, cached; none: not deduplicated).',
      labelNames: ['route', 'upstream', 'outcome'],
      registers,
    });
    const saved = new TalliedCounter(prom, {
      name: `${p}upstream_calls_saved_total`,
      help: 'Upstream calls not made: requests that joined a call in flight or were answered from the window.',
      labelNames: ['upstream'],
      registers,
    });
    const calls = new TalliedCounter(prom, {
      name: `${p}upstream_calls_total`,
      help: 'Attempts that reached the upstream, by result (ok, error, timeout); retries included.',
      labelNames: ['upstream', 'result'],
      registers,
    });
    const latency = new BatchedHistogram({
      name: `${p}upstream_latency_seconds`,
      help: "Time from an attempt's start to its answer (a stream's first chunk) or its failure.",
      labelNames: ['upstream', 'result'],
      buckets: options.latencyBuckets ?? [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    const transitionNames = new Set<string>();
    const refusalNames = new Set<string>();
    const transitions = new prom.Counter({
      name: `${p}breaker_transitions_total`,
      help: 'Circuit breaker state changes made here (not those applied from another replica or worker: summed, each counts once); every possible change of every breaker is present from 0.',
      labelNames: ['name', 'from', 'to'],
      registers,
      collect() {
        const breakers = orchestrator.health().breakers.map((b) => b.name);
        seriesOfKnown(this, 'name', breakers, TRANSITION_LABELS, transitionNames);
      },
    });
    const refusals = new prom.Counter({
      name: `${p}refusals_total`,
      help: 'Calls answered without reaching the upstream: circuit_open, overloaded (queue full), queue_timeout, shutting_down, no_upstream_available (none in rotation). Every reason of every known upstream is present from 0.',
      labelNames: ['upstream', 'reason'],
      registers,
      collect() {
        seriesOfKnown(this, 'upstream', knownUpstreams(), REFUSAL_LABELS, refusalNames, (name) =>
          refusalChildren.forget(name),
        );
      },
    });
    const timeouts = new prom.Counter({
      name: `${p}timeouts_total`,
      help: 'Attempts cut by their time limit, by phase (total, first_chunk, idle).',
      labelNames: ['upstream', 'phase'],
      registers,
    });
    const retries = new prom.Counter({
      name: `${p}retries_total`,
      help: 'Attempts retried.',
      labelNames: ['upstream'],
      registers,
    });
    const queueWait = new BatchedHistogram({
      name: `${p}queue_wait_seconds`,
      help: 'Time a call waited for a concurrency slot (0 when one was free).',
      labelNames: ['upstream'],
      buckets: options.queueWaitBuckets ?? [0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60],
      registers,
    });
    const holds = new prom.Counter({
      name: `${p}holds_total`,
      help: 'Calls held while no upstream of their pool was in rotation, by how the hold ended: served (one came back), expired (refused: no_upstream_available), left (every caller gone).',
      labelNames: ['pool', 'outcome'],
      registers,
    });
    const storeChanges = new prom.Counter({
      name: `${p}store_transitions_total`,
      help: "The answer window's shared store became unreachable (degraded) or reachable again (ok).",
      labelNames: ['state'],
      registers,
    });

    const gauge = (name: string, help: string, labelNames: string[], collect: (g: PromClient.Gauge) => void) =>
      new prom.Gauge({
        name: `${p}${name}`,
        help,
        labelNames,
        registers,
        collect() {
          // Rebuilt at each scrape: a breaker or limiter released since (an upstream removed) leaves no stale series.
          if (labelNames.length > 0) this.reset();
          collect(this);
        },
      });
    gauge('breaker_state', 'Circuit breaker state: 0 closed, 1 half-open, 2 open.', ['name'], (g) => {
      for (const b of orchestrator.health().breakers) g.set({ name: b.name }, BREAKER_VALUE[b.state]);
    });
    gauge('breaker_consecutive_failures', 'Consecutive failures counted by the breaker.', ['name'], (g) => {
      for (const b of orchestrator.health().breakers) g.set({ name: b.name }, b.consecutiveFailures);
    });
    const limiterGauge = (name: string, help: string, read: (l: LimiterSnapshot) => number) =>
      gauge(name, help, ['limiter'], (g) => {
        for (const l of orchestrator.health().limiters) g.set({ limiter: l.name }, read(l));
      });
    limiterGauge('in_flight', 'Upstream calls holding a concurrency slot.', (l) => l.inFlight);
    limiterGauge('queued', 'Calls waiting for a concurrency slot.', (l) => l.queued);
    limiterGauge('queue_size', 'Calls allowed to wait at once; more are refused as overloaded.', (l) => l.queueSize);
    limiterGauge('concurrency_limit', 'Upstream calls allowed in flight at once.', (l) => l.limit);
    limiterGauge(
      'detached_in_flight',
      'Calls still running with no caller left (their answer goes to the window).',
      (l) => l.detached,
    );
    gauge(
      'held_calls',
      'Calls held now, waiting for an upstream of their pool to come into rotation (identical requests share one).',
      ['pool'],
      (g) => {
        for (const pool of orchestrator.upstreams.all()) if (pool.hold) g.set({ pool: pool.name }, pool.held);
      },
    );
    gauge('dedup_in_flight', 'Deduplicated calls in flight (each may have many callers).', [], (g) =>
      g.set(orchestrator.health().inFlight),
    );
    gauge('window_entries', 'Answers kept in the in-memory window.', [], (g) =>
      g.set(orchestrator.health().window.entries),
    );
    gauge('window_bytes', 'Bytes the in-memory window holds.', [], (g) => g.set(orchestrator.health().window.bytes));
    gauge('window_max_bytes', 'Bytes the in-memory window may hold.', [], (g) =>
      g.set(orchestrator.health().window.maxBytes),
    );
    // Registered only with a shared store: an unset gauge without labels reads 0, which a StoreDegraded alert takes for an outage.
    if (orchestrator.health().window.store) {
      gauge(
        'store_up',
        "1 when the window's shared store is reachable, 0 while degraded (absent without one).",
        [],
        (g) => {
          const store = orchestrator.health().window.store;
          if (store) g.set(store.state === 'ok' ? 1 : 0);
        },
      );
    }

    const requestChildren = new Children((route, upstream, outcome) => requests.tally(route, upstream, outcome));
    const savedChildren = new Children((upstream) => saved.tally(upstream));
    const callChildren = new Children((upstream, result) => calls.tally(upstream, result));
    const latencyChildren = new Children((upstream, result) => latency.tally(upstream, result));
    const refusalChildren = new Children((upstream, reason) => refusals.labels(upstream, reason));
    const timeoutChildren = new Children((upstream, phase) => timeouts.labels(upstream, phase));
    const retryChildren = new Children((upstream) => retries.labels(upstream));
    const waitChildren = new Children((upstream) => queueWait.tally(upstream));
    const holdChildren = new Children((pool, outcome) => holds.labels(pool, outcome));

    this.unsubscribe = orchestrator.observe({
      request(route: string, upstream: string, outcome: RequestOutcome) {
        defaults?.busy();
        requestChildren.get(route, upstream, outcome).inc();
        if (outcome === 'joined' || outcome === 'cached') savedChildren.get(upstream).inc();
      },
      breakerTransition(name: string, from: BreakerState, to: BreakerState, _at: number, remote?: boolean) {
        // A change applied from another replica's or worker's word is counted where it was made: summed over a
        // fleet (or a port's workers), each change counts once.
        if (!remote) transitions.labels(name, from, to).inc();
      },
      refused(upstream: string, reason: RefusalReason) {
        refusalChildren.get(upstream, reason).inc();
      },
      timedOut(upstream: string, phase: string) {
        timeoutChildren.get(upstream, phase).inc();
      },
      retried(upstream: string) {
        retryChildren.get(upstream).inc();
      },
      queueWait(upstream: string, ms: number) {
        waitChildren.get(upstream).observe(ms / 1000);
      },
      held(pool: string, outcome: HoldOutcome) {
        holdChildren.get(pool, outcome).inc();
      },
      upstreamCall(upstream: string, ms: number, result: UpstreamResult) {
        callChildren.get(upstream, result).inc();
        latencyChildren.get(upstream, result).observe(ms / 1000);
      },
      storeState(state: string) {
        storeChanges.labels(state).inc();
      },
    });
  }

  /** The exposition text (what the metrics route answers). */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  /** Stops observing the orchestrator (and sampling its event loop). */
  close(): void {
    this.unsubscribe();
    this.defaults?.close();
  }
}
