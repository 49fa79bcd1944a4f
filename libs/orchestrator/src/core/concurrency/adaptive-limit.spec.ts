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

const average = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;

describe('AdaptiveLimit', () => {
  it('grows while latency holds: 200 callers of a 50 ms upstream get 200 in flight within seconds, not the initial 32', () => {
    const sim = new Simulation(200, 10_000, 50);
    expect(sim.limit.limit).toBe(32);
    sim.run(5_000);
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

  it('never grows a limit nobody reaches: light traffic proves nothing', () => {
    const sim = new Simulation(3, 10_000, 50);
    sim.run(10_000);
    expect(sim.limit.limit).toBe(32);
  });

  it('shrinks at once on an overload answer, once per window however many arrive', () => {
    let now = 0;
    const changes: number[] = [];
    const limit = new AdaptiveLimit(512, { initialLimit: 100 }, () => now, (l) => changes.push(l));
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

  it('re-learns an upstream that became slower for everyone, then grows back to its capacity', () => {
    const sim = new Simulation(200, 40, 50);
    sim.run(10_000);
    sim.baseMs = 200;
    sim.run(2_000);
    expect(sim.limit.limit).toBeLessThan(20);
    sim.run(60_000);
    expect(sim.limit.uncontendedMs).toBeGreaterThanOrEqual(200);
    expect(sim.limit.limit).toBeGreaterThan(40 * 0.8);
  });

  it("does not read the process's own slowness (its event loop's lag) as the upstream queueing", () => {
    let now = 0;
    let lag = 0;
    const limit = new AdaptiveLimit(512, { initialLimit: 40 }, () => now, undefined, () => lag);
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
