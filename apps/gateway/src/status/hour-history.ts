import type { RequestOutcome } from 'nest-prompt-orchestrator/core';

const MINUTES = 60;
/** Latency buckets: 1 ms to about 2 minutes, each 25% wider than the last (a percentile is off by at most that). */
const BOUNDS: number[] = [];
for (let bound = 1; bound < 150_000; bound *= 1.25) BOUNDS.push(bound);

type Outcome = RequestOutcome | 'unrouted';

/** One minute of finished requests: counts, and a latency histogram (never the latencies themselves). */
interface Minute {
  at: number;
  requests: number;
  outcomes: Record<Outcome, number>;
  /** 5xx answers and the gateway's refusals (429/503 of its own). */
  errors: number;
  latency: Uint32Array;
}

/** Percentiles of a latency histogram, in ms (the upper bound of the bucket the rank falls in). */
function percentiles(histogram: Uint32Array, total: number): { p50: number; p95: number; p99: number } | undefined {
  if (total === 0) return undefined;
  const ranks = [0.5, 0.95, 0.99].map((q) => Math.ceil(q * total));
  const found: number[] = [];
  let seen = 0;
  for (let i = 0; i < histogram.length && found.length < ranks.length; i++) {
    seen += histogram[i];
    while (found.length < ranks.length && seen >= ranks[found.length])
      found.push(BOUNDS[i] ?? BOUNDS[BOUNDS.length - 1]);
  }
  const round = (ms: number) => Math.round(ms * 10) / 10;
  return { p50: round(found[0]), p95: round(found[1]), p99: round(found[2]) };
}

/**
 * The last hour of finished requests, minute by minute: how they were
 * answered and how long they took. Kept in memory and bounded (60 minutes of
 * about 60 numbers each), whatever the traffic.
 */
export class HourHistory {
  private readonly minutes: Minute[] = [];

  record(outcome: Outcome, status: number, ms: number, now = Date.now()): void {
    const minute = this.minuteAt(now);
    minute.requests++;
    minute.outcomes[outcome]++;
    if (status >= 500 || status === 429) minute.errors++;
    let i = 0;
    while (i < BOUNDS.length - 1 && ms > BOUNDS[i]) i++;
    minute.latency[i]++;
  }

  /** Per minute (oldest first) and for the whole hour: requests, outcomes, errors, latency percentiles. */
  summary(now = Date.now()) {
    const start = Math.floor(now / 60_000) * 60_000 - (MINUTES - 1) * 60_000;
    const kept = this.minutes.filter((m) => m.at >= start);
    const hour = new Uint32Array(BOUNDS.length);
    const outcomes: Record<Outcome, number> = { miss: 0, joined: 0, cached: 0, none: 0, unrouted: 0 };
    let requests = 0;
    let errors = 0;
    for (const m of kept) {
      requests += m.requests;
      errors += m.errors;
      for (const k of Object.keys(outcomes) as Outcome[]) outcomes[k] += m.outcomes[k];
      for (let i = 0; i < hour.length; i++) hour[i] += m.latency[i];
    }
    return {
      minutes: kept.map((m) => ({
        at: m.at,
        requests: m.requests,
        errors: m.errors,
        ...m.outcomes,
        ...percentiles(m.latency, m.requests),
      })),
      hour: { requests, errors, outcomes, latencyMs: percentiles(hour, requests) ?? null },
    };
  }

  private minuteAt(now: number): Minute {
    const at = Math.floor(now / 60_000) * 60_000;
    const last = this.minutes[this.minutes.length - 1];
    if (last?.at === at) return last;
    const minute: Minute = {
      at,
      requests: 0,
      errors: 0,
      outcomes: { miss: 0, joined: 0, cached: 0, none: 0, unrouted: 0 },
      latency: new Uint32Array(BOUNDS.length),
    };
    this.minutes.push(minute);
    while (this.minutes.length > MINUTES) this.minutes.shift();
    return minute;
  }
}
