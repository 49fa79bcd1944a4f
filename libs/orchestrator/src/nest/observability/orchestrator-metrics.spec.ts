import { describe, expect, it } from '@jest/globals';
import { Keyv } from 'keyv';
import * as prom from 'prom-client';
import { Orchestrator } from '../../core/orchestrator.js';
import { OrchestratorMetrics } from './orchestrator-metrics.js';

/** The store gauge exists only where there is a store: an alert on `store_up == 0` must not fire without one. */
describe('orchestrator_store_up', () => {
  const scrape = async (orchestrator: Orchestrator) => new OrchestratorMetrics(prom, orchestrator, { defaultMetrics: false }).registry.metrics();

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
