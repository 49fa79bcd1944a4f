import { describe, expect, it } from '@jest/globals';
import { Counter, Gauge, Registry } from 'prom-client';
import type { ToWorker } from './messages.js';
import { PrimaryHub, type HubWorker } from './primary-hub.js';

/** A worker as the hub sees it, with what the hub sent it. */
function worker(id: number) {
  const inbox: ToWorker[] = [];
  const handle: HubWorker = {
    id,
    process: { pid: 3_000 + id },
    isConnected: () => true,
    send: (m) => inbox.push(JSON.parse(JSON.stringify(m)) as ToWorker) > 0,
  };
  return { handle, inbox };
}

/** What a worker sends for a scrape: its registry as JSON, with `calls` upstream calls made and a gauge. */
async function figures(calls: number, inFlight: number): Promise<unknown> {
  const registry = new Registry();
  new Counter({
    name: 'orchestrator_upstream_calls_total',
    help: 'calls',
    labelNames: ['result'],
    registers: [registry],
  }).inc({ result: 'ok' }, calls);
  new Gauge({ name: 'orchestrator_in_flight', help: 'in flight', registers: [registry] }).set(inFlight);
  return registry.getMetricsAsJSON();
}

/** One scrape asked by `asker`, each worker in `answers` answering with its figures; the port's text. */
async function scrape(
  hub: PrimaryHub,
  asker: ReturnType<typeof worker>,
  answers: Array<[ReturnType<typeof worker>, unknown]>,
): Promise<string> {
  const c = Math.floor(Math.random() * 1e9);
  hub.receive(asker.handle, { gw: 'gather', c, what: 'metrics' });
  for (const [w, data] of answers) {
    const collect = w.inbox.filter((m) => m.gw === 'collect').at(-1) as { g: number };
    hub.receive(w.handle, { gw: 'part', g: collect.g, data });
  }
  for (let i = 0; i < 100; i++) {
    const reply = asker.inbox.find((m) => m.gw === 're' && m.c === c) as { v: { text: string } } | undefined;
    if (reply) return reply.v.text;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error('no scrape reply');
}

const value = (text: string, line: RegExp) => Number(line.exec(text)?.[1]);
const CALLS = /^orchestrator_upstream_calls_total\{result="ok"\} (\d+)$/m;
const IN_FLIGHT = /^orchestrator_in_flight (\d+)$/m;

describe('PrimaryHub metrics', () => {
  it("a worker that exits leaves its last counters in the port's figures (counters never go down); its gauges go", async () => {
    const hub = new PrimaryHub({ log: () => undefined });
    const [a, b] = [1, 2].map(worker);
    hub.serve(a.handle);
    hub.serve(b.handle);
    const first = await scrape(hub, a, [
      [a, await figures(3, 1)],
      [b, await figures(2, 5)],
    ]);
    expect(value(first, CALLS)).toBe(5);
    expect(value(first, IN_FLIGHT)).toBe(6);

    hub.gone(b.handle);
    const replacement = worker(3);
    hub.serve(replacement.handle);
    const second = await scrape(hub, a, [
      [a, await figures(4, 0)],
      [replacement, await figures(1, 0)],
    ]);
    // 4 + 1 from the live workers, and the 2 calls the exited worker made.
    expect(value(second, CALLS)).toBe(7);
    expect(value(second, IN_FLIGHT)).toBe(0);

    // A second exit adds to the first.
    hub.gone(replacement.handle);
    const third = await scrape(hub, a, [[a, await figures(4, 0)]]);
    expect(value(third, CALLS)).toBe(7);
  });
});
