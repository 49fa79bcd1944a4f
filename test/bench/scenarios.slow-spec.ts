import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { RunMetrics } from './metrics.js';
import { closeControlConnections } from './mock-control.js';
import { requireBuild, stopAllChildren } from './processes.js';
import type { TargetCheck } from './targets.js';
import { runTimeline, type TimelineOutcome } from './timeline.js';

/**
 * The benchmark's timeline scenarios at --scale 0.1, run by the harness's own code (the mock provider and the
 * gateway as child processes from dist/, the official openai SDK as the client). Only the COUNT targets are
 * asserted (provider calls, refusals the SDK retried); timing targets stay in `npm run bench`.
 */
const SCALE = 0.1;

function metricsOf(outcome: TimelineOutcome, role: string): RunMetrics {
  const index = outcome.result.runs.findIndex((run) => run.variant.role === role);
  if (index < 0) throw new Error(`no run with role ${role}`);
  return outcome.metrics[index];
}

function missedCounts(checks: TargetCheck[]): string[] {
  return checks
    .filter((c) => c.kind === 'count' && !c.pass)
    .map((c) => `${c.run}: ${c.name} ${c.target}, got ${c.actual}`);
}

describe('benchmark scenarios at scale 0.1 (count targets)', () => {
  beforeAll(() => {
    // The scenarios start dist/apps/*, built by Jest's global setup (test/support/global-setup.mjs).
    requireBuild();
  });

  afterAll(async () => {
    await stopAllChildren();
    await closeControlConnections();
  });

  it('herd: 200 identical requests make 1 provider call through the gateway (200 direct)', async () => {
    const outcome = await runTimeline('herd', SCALE, 'both');
    const direct = metricsOf(outcome, 'direct');
    const gateway = metricsOf(outcome, 'defaults');
    // The harness really counts: straight to the provider, every request is a call.
    expect(direct.providerCalls).toBe(200);
    expect(gateway.providerCalls).toBe(1);
    expect(gateway.outcomes.ok + gateway.outcomes.joined + gateway.outcomes.cached).toBe(200);
    expect(gateway.outcomes.joined + gateway.outcomes.cached).toBe(199);
    expect(missedCounts(outcome.checks)).toEqual([]);
  }, 90_000);

  it('distinct: 20 prompts make 20 provider calls, at the defaults and at --concurrency 32', async () => {
    const outcome = await runTimeline('distinct', SCALE, 'both');
    for (const role of ['direct', 'defaults', 'concurrency32']) {
      const m = metricsOf(outcome, role);
      expect({ role, calls: m.providerCalls, ok: m.outcomes.ok }).toEqual({ role, calls: 20, ok: 20 });
    }
    expect(missedCounts(outcome.checks)).toEqual([]);
  }, 90_000);

  it('outage503: at most 5 calls reach the failing provider; refusals are never retried by the SDK', async () => {
    const outcome = await runTimeline('outage503', SCALE, 'gateway');
    const m = metricsOf(outcome, 'defaults');
    expect(m.requests).toBe(75);
    // The failure really happened, and the breaker really refused.
    expect(m.providerCallsFailing).toBeGreaterThanOrEqual(1);
    expect(m.outcomes.refused).toBeGreaterThanOrEqual(1);
    expect(m.providerCallsFailing).toBeLessThanOrEqual(5);
    expect(m.refusalsRetried).toBe(0);
    expect(m.retriedAfterNoRetry).toBe(0);
    expect(m.outcomes.ok).toBeGreaterThanOrEqual(1);
    expect(missedCounts(outcome.checks)).toEqual([]);
  }, 120_000);

  it('outagehang: at most 9 calls reach the hung provider at --timeout 5 (scaled); refusals are never retried', async () => {
    const outcome = await runTimeline('outagehang', SCALE, 'gateway');
    const short = metricsOf(outcome, 'timeout5');
    expect(short.providerCallsFailing).toBeGreaterThanOrEqual(1);
    expect(short.outcomes.timeout).toBeGreaterThanOrEqual(1);
    expect(short.providerCallsFailing).toBeLessThanOrEqual(9);
    for (const role of ['defaults', 'timeout5']) {
      const m = metricsOf(outcome, role);
      expect({ role, refusalsRetried: m.refusalsRetried, retriedAfterNoRetry: m.retriedAfterNoRetry }).toEqual({
        role,
        refusalsRetried: 0,
        retriedAfterNoRetry: 0,
      });
    }
    expect(missedCounts(outcome.checks)).toEqual([]);
  }, 150_000);
});
