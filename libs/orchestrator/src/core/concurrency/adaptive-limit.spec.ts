import { describe, expect, it } from '@jest/globals';
import { AdaptiveLimit } from './adaptive-limit.js';

/**
 * A simulated upstream on a simulated clock: `clients` callers keep one call
 * each in flight, at most `limit` of them at once; the upstream answers in
 * `baseMs` up to `capacity` calls at once, and proportionally slower beyond
 * (as a server sharing `capacity` workers would).
 */
class Simulation {
  now = 0;
  readonly limit: AdaptiveLimit;
  baseMs: number;
  latencies: number[] = [];

  constructor(
    private readonly clients: number,
    private readonly capacity: number,
    baseMs: number,
    ceiling = 512,
  ) {
    this.baseMs = baseMs;
    this.limit = new AdaptiveLimit(ceiling, {}, () => this.now);
  }

  latency(inFlight: number): number {
    return this.baseMs * Math.max(1, inFlight / this.capacity);
  }

  /** Runs for `ms` of simulated time, in 10 ms steps; returns the limits seen, one per step. */
  run(ms: number): number[] {
    const seen: number[] = [];
    let carry = 0;
    for (let t = 0; t < ms; t += 10) {
      this.now += 10;
      const inFlight = Math.min(this.limit.limit, this.clients);
      const latency = this.latency(inFlight);
      carry += (inFlight * 10) / latency;
      for (; carry >= 1; carry--) {
        this.limit.sample(latency, inFlight);
        this.latencies.push(latency);
      }
      seen.push(this.limit.limit);
    }
    return seen;
  }
}

/**
 * The same on an event clock, as the gateway sees a provider: each call's latency is fixed when it arrives (by the
 * calls in flight then), and the limiter hands a finished call's slot to the next caller before the finished call's
 * sample is taken (so the calls in flight a sample reports include its successor, as `call.ts` reports them).
 */
function eventRun(
  capacity: number,
  clients: number,
  ms: number,
  baseMs = 50,
): { limits: number[]; latencies: number[] } {
  let now = 0;
  const limit = new AdaptiveLimit(512, {}, () => now);
  let inFlight = 0;
  let waiting = clients;
  const running: Array<{ endsAt: number; startedAt: number }> = [];
  const admit = () => {
    while (waiting > 0 && inFlight < limit.limit) {
      waiting--;
      inFlight++;
      running.push({ endsAt: now + baseMs * Math.max(1, inFlight / capacity), startedAt: now });
    }
  };
  const limits: number[] = [];
  const latencies: number[] = [];
  admit();
  while (now < ms) {
    running.sort((a, b) => a.endsAt - b.endsAt);
    const call = running.shift()!;
    now = call.endsAt;
    inFlight--;
    waiting++;
    admit();
    limit.sample(now - call.startedAt, inFlight + 1);
    latencies.push(now - call.startedAt);
    limits.push(limit.limit);
  }
  return { limits, latencies };
}

const average = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;

describe('AdaptiveLimit', () => {
  it('grows while latency holds: 200 callers of a 50 ms upstream get 200 in flight within a second, not the initial 32', () => {
    const sim = new Simulation(200, 10_000, 50);
    expect(sim.limit.limit).toBe(32);
    sim.run(1_000);
    expect(sim.limit.limit).toBeGreaterThanOrEqual(200);
  });

  it('settles near the capacity of an upstream whose latency climbs beyond it, with latency near the uncontended one', () => {
    const sim = new Simulation(200, 40, 50);
    sim.run(10_000);
    sim.latencies = [];
    const limits = sim.run(10_000);
    const settled = average(limits);
    expect(settled).toBeGreaterThan(40 * 0.8);
    expect(settled).toBeLessThan(40 * 1.5);
    expect(Math.max(...sim.latencies)).toBeLessThan(50 * 1.5);
    expect(sim.limit.uncontendedMs).toBe(50);
  });

  it('settles near the capacity of a provider that fixes each latency on arrival, from far below and from slow start', () => {
    for (const capacity of [20, 60]) {
      const { limits, latencies } = eventRun(capacity, 200, 20_000);
      const settled = limits.slice(limits.length / 2).sort((a, b) => a - b);
      const median = settled[settled.length >> 1];
      expect(median).toBeGreaterThanOrEqual(capacity * 0.75);
      expect(median).toBeLessThanOrEqual(capacity * 1.5);
      const late = latencies.slice(latencies.length / 2).sort((a, b) => a - b);
      expect(late[Math.floor(late.length * 0.5)]).toBeLessThanOrEqual(50 * 1.5);
    }
  });

  it('grows from just under the knee no further than an upstream at its capacity would take to the tolerance', () => {
    let now = 0;
    const limit = new AdaptiveLimit(512, { initialLimit: 22, slowStart: false }, () => now);
    // Ten calls 20 ms apart, all started after the limit last moved; the calls in flight they report stay put (no
    // slope of latency to calls is measured: only the latency's level decides).
    const window = (latencyMs: number) => {
      now += 200;
      for (let i = 0; i < 10; i++) {
        now += 20;
        limit.sample(latencyMs, 24);
      }
    };
    window(50);
    // At the uncontended latency: a whole square root (22 + 4.7).
    expect(limit.limit).toBe(26);
    // 6% slower at 26: an upstream whose capacity is 24.5 would be at 1.15x with 28 in flight, not 31 (26 + 5.1).
    window(53);
    expect(limit.limit).toBe(28);
  });

  it('never grows a limit nobody reaches: light traffic proves nothing', () => {
    const sim = new Simulation(3, 10_000, 50);
    sim.run(10_000);
    expect(sim.limit.limit).toBe(32);
  });

  it('shrinks at once on an overload answer, once per window however many arrive', () => {
    let now = 0;
    const changes: number[] = [];
    const limit = new AdaptiveLimit(
      512,
      { initialLimit: 100 },
      () => now,
      (l) => changes.push(l),
    );
    for (let i = 0; i < 50; i++) limit.drop();
    expect(limit.limit).toBe(50);
    now += 100;
    limit.drop();
    expect(limit.limit).toBe(25);
    expect(changes).toEqual([50, 25]);
  });

  it('keeps within its floor and its ceiling', () => {
    let now = 0;
    const limit = new AdaptiveLimit(40, { initialLimit: 100, minLimit: 2 }, () => now);
    expect(limit.limit).toBe(40);
    for (let i = 0; i < 20; i++) {
      now += 100;
      limit.drop();
    }
    expect(limit.limit).toBe(2);
  });

  it('finds an upstream whose capacity is below the initial limit: the latency it first sees is not uncontended', () => {
    // Started at 32 against a capacity of 20, the first window's 80 ms is congested already; without a probe that
    // 80 ms would count as uncontended, and the limit would settle near 2x the capacity.
    const sim = new Simulation(200, 20, 50);
    sim.run(10_000);
    sim.latencies = [];
    const limits = sim.run(10_000);
    expect(sim.limit.uncontendedMs).toBe(50);
    const settled = average(limits);
    expect(settled).toBeGreaterThanOrEqual(20 * 0.75);
    expect(settled).toBeLessThanOrEqual(20 * 1.5);
    expect(Math.max(...sim.latencies)).toBeLessThanOrEqual(50 * 1.5);
  });

  it('probes at most once per probeIntervalMs, and only on congestion', () => {
    let now = 0;
    const limits: number[] = [];
    const limit = new AdaptiveLimit(
      512,
      { initialLimit: 40, probeIntervalMs: 30_000, slowStart: false },
      () => now,
      (l) => limits.push(l),
    );
    const window = (latency: number, inFlight = limit.limit) => {
      now += 2 * latency;
      for (let i = 0; i < 8; i++) limit.sample(latency, inFlight);
    };
    window(50);
    expect(limit.probing).toBe(false);
    // Congested: the limit drops to a quarter while one window of calls started under it is measured.
    window(100);
    expect(limit.probing).toBe(true);
    expect(limit.limit).toBe(11);
    window(60);
    expect(limit.probing).toBe(false);
    expect(limit.uncontendedMs).toBe(60);
    expect(limit.limit).toBe(41);
    // Congested again (90 ms against 60 x 1.25) within the interval: plain backoff, no probe.
    window(90);
    expect(limit.probing).toBe(false);
    expect(limit.limit).toBe(37);
    now += 30_000;
    // Still congested, and the latency fell with the calls in flight (an upstream at its capacity): probed again.
    window(82);
    expect(limit.probing).toBe(true);
  });

  it('grows past a latency that rises much less than its calls in flight (a busy machine, not a full upstream)', () => {
    // Latency climbs with the load on the machine, not with the upstream's queue: 40% slower at 200 calls in flight.
    // Each call more still buys most of its share of throughput, so the limit lets all 200 callers in.
    const sim = new Simulation(200, 10_000, 50);
    sim.latency = (inFlight) => 50 * (1 + (0.4 * inFlight) / 200);
    sim.run(10_000);
    const limits = sim.run(5_000);
    expect(Math.min(...limits)).toBeGreaterThanOrEqual(180);
  });

  it('judges a window only by calls that started under the limit in force', () => {
    let now = 0;
    const limit = new AdaptiveLimit(512, { initialLimit: 40, slowStart: false }, () => now);
    now += 100;
    for (let i = 0; i < 8; i++) limit.sample(50, 40);
    expect(limit.limit).toBe(46);
    // Slow calls that started before the limit moved say nothing about 46: the window does not close on them.
    now += 150;
    for (let i = 0; i < 20; i++) limit.sample(400, 46);
    expect(limit.limit).toBe(46);
    expect(limit.probing).toBe(false);
  });

  it('re-learns an upstream that became slower for everyone, then grows back to its capacity', () => {
    const sim = new Simulation(200, 40, 50);
    sim.run(10_000);
    sim.baseMs = 200;
    // Congested against 50 ms: the limit backs off, and the next probe (within probeIntervalMs) measures 200 ms.
    sim.run(2_000);
    expect(sim.limit.limit).toBeLessThan(40);
    sim.run(35_000);
    expect(sim.limit.uncontendedMs).toBe(200);
    sim.run(25_000);
    expect(sim.limit.uncontendedMs).toBe(200);
    expect(sim.limit.limit).toBeGreaterThan(40 * 0.8);
    expect(sim.limit.limit).toBeLessThan(40 * 1.5);
  });

  it("does not read the process's own slowness (its event loop's lag) as the upstream queueing", () => {
    let now = 0;
    let lag = 0;
    const limit = new AdaptiveLimit(
      512,
      { initialLimit: 40, slowStart: false },
      () => now,
      undefined,
      () => lag,
    );
    const window = (latency: number) => {
      now += 100;
      for (let i = 0; i < 8; i++) limit.sample(latency, 40);
    };
    window(50);
    expect(limit.limit).toBe(46);
    // The process falls behind by 60 ms per callback: every sample is 60 ms later, the upstream is not slower.
    lag = 60;
    for (let i = 0; i < 5; i++) window(110);
    expect(limit.limit).toBeGreaterThan(46);
    expect(limit.uncontendedMs).toBe(50);
    // A lag estimate larger than the delay it stands for never makes the uncontended latency look lower than it is.
    lag = 500;
    window(50);
    expect(limit.uncontendedMs).toBe(50);
  });

  it('refuses settings that cannot work', () => {
    expect(() => new AdaptiveLimit(10, { minLimit: 20 })).toThrow(/minLimit/);
    expect(() => new AdaptiveLimit(10, { tolerance: 0.5 })).toThrow(/tolerance/);
    expect(() => new AdaptiveLimit(10, { backoff: 1 })).toThrow(/backoff/);
  });
});
