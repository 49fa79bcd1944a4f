import { describe, expect, it, jest } from '@jest/globals';
import { Keyv } from 'keyv';
import perfHooks from 'node:perf_hooks';
import * as prom from 'prom-client';
import { Orchestrator } from '../orchestrator.js';
import { REST_AFTER_MS } from './default-metrics.js';
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

describe("prom-client's event-loop monitor (nodejs_eventloop_lag_*)", () => {
  /** Every monitor made while `run` runs, and whether each is enabled now (its enable/disable calls followed). */
  const watchMonitors = async <T>(run: () => Promise<T>) => {
    const hooks = perfHooks as unknown as { monitorEventLoopDelay: typeof perfHooks.monitorEventLoopDelay };
    const original = hooks.monitorEventLoopDelay;
    const monitors: Array<{ enabled: boolean }> = [];
    hooks.monitorEventLoopDelay = (options) => {
      const monitor = original(options);
      const state = { enabled: false };
      monitors.push(state);
      const enable = monitor.enable.bind(monitor);
      const disable = monitor.disable.bind(monitor);
      monitor.enable = () => ((state.enabled = true), enable());
      monitor.disable = () => ((state.enabled = false), disable());
      return monitor;
    };
    try {
      return { result: await run(), monitors };
    } finally {
      hooks.monitorEventLoopDelay = original;
    }
  };

  it('samples while requests come and stops once they have not for REST_AFTER_MS; at rest a scrape reads 0', async () => {
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask', 'performance', 'hrtime'] });
    const orchestrator = new Orchestrator();
    try {
      const { result: metrics, monitors } = await watchMonitors(
        async () => new OrchestratorMetrics(prom, orchestrator),
      );
      expect(monitors).toHaveLength(1);
      const [monitor] = monitors;
      expect(monitor.enabled).toBe(false);
      const atRest = await metrics.text();
      expect(atRest).toMatch(/^nodejs_eventloop_lag_min_seconds 0$/m);
      expect(atRest).toMatch(/^nodejs_eventloop_lag_mean_seconds 0$/m);

      const policy = orchestrator.policy({}, 'chat');
      await orchestrator.run(policy, async () => 'answer');
      expect(monitor.enabled).toBe(true);
      // Requests keep coming: it keeps sampling.
      jest.advanceTimersByTime(REST_AFTER_MS);
      await orchestrator.run(policy, async () => 'answer');
      jest.advanceTimersByTime(REST_AFTER_MS);
      expect(monitor.enabled).toBe(true);
      // None for REST_AFTER_MS: it stops.
      jest.advanceTimersByTime(REST_AFTER_MS);
      expect(monitor.enabled).toBe(false);
      metrics.close();
    } finally {
      jest.useRealTimers();
      await orchestrator.close();
    }
  });
});
