import type * as PromClient from 'prom-client';

/**
 * Why these exist: prom-client's `inc` and `observe` hash their label values
 * into a key on every call, even through a child bound with `labels()`, and a
 * request of the gateway made four of them. Here a
 * request adds to plain numbers kept per label combination, and prom-client
 * learns the totals when the registry is read (a scrape), so the registry, its
 * text format and `AggregatorRegistry` (workers) see ordinary metrics.
 */

/** Increments of one label combination of a counter, added up until the registry is read. */
export class Tally {
  private pending = 0;

  constructor(private readonly child: { inc(n: number): void }) {}

  inc(n = 1): void {
    this.pending += n;
  }

  flush(): void {
    if (this.pending === 0) return;
    this.child.inc(this.pending);
    this.pending = 0;
  }
}

/** A prom-client Counter fed through tallies (see the file's comment), one per label combination asked for. */
export class TalliedCounter<L extends string> {
  readonly counter: PromClient.Counter<L>;
  private readonly tallies = new Map<string, Tally>();

  constructor(prom: typeof PromClient, config: PromClient.CounterConfiguration<L>) {
    const tallies = this.tallies;
    this.counter = new prom.Counter<L>({
      ...config,
      collect() {
        for (const tally of tallies.values()) tally.flush();
      },
    });
  }

  /** The tally of one label combination (values in the order of `labelNames`); keep it rather than asking per increment. */
  tally(...values: string[]): Tally {
    const key = values.join('\u0000');
    let tally = this.tallies.get(key);
    if (!tally) this.tallies.set(key, (tally = new Tally(this.counter.labels(...values))));
    return tally;
  }
}

/** One label combination of a `BatchedHistogram`: its bucket counts (not cumulative), sum and count. */
export class BucketTally {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    readonly labels: Readonly<Record<string, string>>,
    private readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length);
  }

  observe(value: number): void {
    this.sum += value;
    this.count++;
    const bounds = this.bounds;
    // Buckets are few (about ten): the first bound the value fits under.
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]) {
        this.counts[i]++;
        return;
      }
    }
  }
}

interface MetricValue {
  value: number;
  labels: Record<string, string | number>;
  metricName: string;
}

/**
 * A Prometheus histogram that prom-client's registry reads like one of its
 * own (`get()` in the same shape: cumulative `_bucket` lines up to `+Inf`,
 * `_sum`, `_count`), observed through `BucketTally`s that cost a few
 * comparisons and additions (see the file's comment).
 */
export class BatchedHistogram<L extends string> {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly bounds: number[];
  private readonly tallies = new Map<string, BucketTally>();

  constructor(config: {
    name: string;
    help: string;
    labelNames: readonly L[];
    buckets: readonly number[];
    registers: PromClient.Registry[];
  }) {
    this.name = config.name;
    this.help = config.help;
    this.labelNames = config.labelNames;
    this.bounds = [...config.buckets].sort((a, b) => a - b);
    for (const registry of config.registers) registry.registerMetric(this as unknown as PromClient.Metric);
  }

  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly L[];

  /** The tally of one label combination (values in the order of `labelNames`); keep it rather than asking per observation. */
  tally(...values: string[]): BucketTally {
    const key = values.join('\u0000');
    let tally = this.tallies.get(key);
    if (!tally) {
      const labels: Record<string, string> = {};
      this.labelNames.forEach((name, i) => (labels[name] = values[i] ?? ''));
      this.tallies.set(key, (tally = new BucketTally(labels, this.bounds)));
    }
    return tally;
  }

  get(): Promise<{ name: string; help: string; type: 'histogram'; aggregator: 'sum'; values: MetricValue[] }> {
    const values: MetricValue[] = [];
    for (const tally of this.tallies.values()) {
      let cumulative = 0;
      this.bounds.forEach((bound, i) => {
        cumulative += tally.counts[i];
        values.push({ value: cumulative, labels: { ...tally.labels, le: bound }, metricName: `${this.name}_bucket` });
      });
      values.push({ value: tally.count, labels: { ...tally.labels, le: '+Inf' }, metricName: `${this.name}_bucket` });
      values.push({ value: tally.sum, labels: { ...tally.labels }, metricName: `${this.name}_sum` });
      values.push({ value: tally.count, labels: { ...tally.labels }, metricName: `${this.name}_count` });
    }
    return Promise.resolve({ name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values });
  }

  reset(): void {
    for (const tally of this.tallies.values()) {
      tally.counts.fill(0);
      tally.sum = 0;
      tally.count = 0;
    }
  }
}
