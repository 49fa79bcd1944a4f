import { describe, expect, it } from '@jest/globals';
import { Keyv } from 'keyv';
import * as prom from 'prom-client';
import { Orchestrator } from '../orchestrator.js';
import { OrchestratorMetrics } from './orchestrator-metrics.js';

/** The store gauge exists only where there is a store: an alert on `store_up == 0` must not fire without one. */
describe('orchestrator_store_up', () => {
  const scrape = async (orchestrator: Orchestrator) =>
    new OrchestratorMetrics(prom, orchestrator, { defaultMetrics: false }).registry.metrics();

  it('is absent without a shared window store', async () => {
    const orchestrator = new Orchestrator();
    expect(await scrape(orchestrator)).not.toContain('orchestrator_store_up');
    await orchestrator.close();
  });

  it('is 1 with a reachable one', async () => {
    const orchestrator = new Orchestrator({ windowStores: [new Keyv()] });
    expect(await scrape(orchestrator)).toMatch(/^orchestrator_store_up 1$/m);
    await orchestrator.close();
  });
});

describe('series present from the start', () => {
  it('every breaker change and every refusal reason of a known upstream is at 0 before any event; the first opening reads 1', async () => {
    const orchestrator = new Orchestrator({ breakers: { llm: { failureThreshold: 1, openMs: 60_000 } } });
    const policy = orchestrator.policy({ breaker: 'llm' }, 'chat');
    const metrics = new OrchestratorMetrics(prom, orchestrator, { defaultMetrics: false });
    const start = await metrics.text();
    expect(start).toMatch(/^orchestrator_breaker_transitions_total\{name="llm",from="closed",to="open"\} 0$/m);
    expect(start).toMatch(/^orchestrator_breaker_transitions_total\{name="llm",from="half_open",to="closed"\} 0$/m);
    for (const reason of ['circuit_open', 'overloaded', 'queue_timeout', 'shutting_down', 'no_upstream_available']) {
      expect(start).toContain(`orchestrator_refusals_total{upstream="llm",reason="${reason}"} 0`);
    }
    await expect(
      orchestrator.run(policy, () => Promise.reject(Object.assign(new Error('down'), { status: 503 }))),
    ).rejects.toThrow();
    expect(await metrics.text()).toMatch(
      /^orchestrator_breaker_transitions_total\{name="llm",from="closed",to="open"\} 1$/m,
    );
    metrics.close();
    await orchestrator.close();
  });

  it("prom-client's default gauges named like counters (nodejs_active_*_total) are not exported; their figures by type are", async () => {
    const orchestrator = new Orchestrator();
    const text = await new OrchestratorMetrics(prom, orchestrator).text();
    expect(text).not.toMatch(/^nodejs_active_\w+_total/m);
    expect(text).toMatch(/^# TYPE nodejs_active_handles gauge$/m);
    await orchestrator.close();
  });
});
