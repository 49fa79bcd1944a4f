import { describe, expect, it } from '@jest/globals';
import { Counter, Registry } from 'prom-client';
import { parseMetrics, valueOf } from '../support/metrics-text.js';
import { PrimaryHub, type HubWorker } from '../../apps/gateway/src/cluster/primary-hub.js';
import type { GatherReply, ToWorker } from '../../apps/gateway/src/cluster/messages.js';

/** A worker of `--workers 2` as the hub sees it, with a registry of its own standing for its metrics. */
function worker(id: number, registry: Registry) {
  const inbox: ToWorker[] = [];
  const handle: HubWorker = {
    id,
    process: { pid: 3_000 + id },
    isConnected: () => true,
    send: (message) => inbox.push(message) > 0,
  };
  return { handle, inbox, registry };
}

/** Worker `asker` asks for the port's metrics; every worker answers with its own; the text the asker gets. */
async function portScrape(hub: PrimaryHub, workers: Array<ReturnType<typeof worker>>): Promise<string> {
  hub.receive(workers[0].handle, { gw: 'gather', c: 1, what: 'metrics' });
  for (const w of workers) {
    const collect = w.inbox.find((m) => m.gw === 'collect');
    if (collect?.gw !== 'collect') throw new Error('the hub did not ask every worker');
    hub.receive(w.handle, { gw: 'part', g: collect.g, data: await w.registry.getMetricsAsJSON() });
  }
  for (let i = 0; i < 50; i++) {
    const reply = workers[0].inbox.find((m) => m.gw === 're');
    if (reply?.gw === 're') return (reply.v as Extract<GatherReply, { what: 'metrics' }>).text;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error('no aggregated metrics');
}

describe("the port's metrics under --workers", () => {
  it('caps model labels for the whole port (each worker within its own cap, their union is not), keeping every token', async () => {
    const workers = [1, 2].map((id) => {
      const registry = new Registry();
      const tokens = new Counter({
        name: 'gateway_tokens_total',
        help: 'tokens',
        labelNames: ['direction', 'model'],
        registers: [registry],
      });
      // 40 distinct models on each worker, none shared: 80 for the port, against a cap of 50.
      for (let m = 0; m < 40; m++) tokens.inc({ direction: 'in', model: `model-${id}-${m}` }, 10);
      return worker(id, registry);
    });
    const hub = new PrimaryHub({ log: () => undefined });
    for (const w of workers) hub.serve(w.handle);
    const samples = parseMetrics(await portScrape(hub, workers)).filter((s) => s.name === 'gateway_tokens_total');
    const models = new Set(samples.map((s) => s.labels.model));
    expect(models.size).toBe(51);
    expect(models.has('other')).toBe(true);
    expect(valueOf(samples, 'gateway_tokens_total')).toBe(800);
    expect(valueOf(samples, 'gateway_tokens_total', { model: 'other' })).toBe(300);
  });
});
