import { afterEach, describe, expect, it } from '@jest/globals';
import { Body, Controller, HttpCode, HttpException, Post } from '@nestjs/common';
import {
  CircuitBreaker,
  Dedup,
  OrchestratorMetrics,
  OrchestratorModule,
  OrchestratorObservabilityModule,
  OrchestratorService,
  type StructuredLogger,
} from 'nest-prompt-orchestrator';
import { Counter, type Registry } from 'prom-client';
import { Gate, PLATFORMS, postJson, startApp, waitFor, type RunningApp } from '../support/platforms.js';
import { scrape, valueOf } from '../support/metrics-text.js';

/**
 * OrchestratorObservabilityModule in an ordinary Nest app (no gateway): metrics
 * at the route it is given, breaker lines through a pino-shaped logger, and the
 * terminus-style health routes, on both HTTP platforms.
 */

let calls = 0;
let failing = false;
let gate = new Gate();

@Controller('quotes')
class QuotesController {
  @Post()
  @HttpCode(200)
  @Dedup()
  @CircuitBreaker('quotes-feed')
  async quote(@Body() body: { symbol: string }) {
    calls++;
    await gate.promise;
    if (failing) throw new HttpException('feed down', 503);
    return { symbol: body.symbol, price: 42 };
  }
}

/** Keeps the lines, as pino would write them. */
function capturingLogger() {
  const lines: Array<{ level: string; fields: Record<string, unknown>; message: string }> = [];
  const logger: StructuredLogger = {
    info: (fields, message) => lines.push({ level: 'info', fields: fields as Record<string, unknown>, message }),
    warn: (fields, message) => lines.push({ level: 'warn', fields: fields as Record<string, unknown>, message }),
  };
  return { lines, logger };
}

describe.each(PLATFORMS)('OrchestratorObservabilityModule on %s', (platform) => {
  let running: RunningApp | undefined;
  afterEach(async () => {
    await running?.close();
    running = undefined;
    calls = 0;
    failing = false;
    gate = new Gate();
  });

  it('counts a herd, logs the breaker opening, serves health, and lets the app add its own metrics', async () => {
    const { lines, logger } = capturingLogger();
    running = await startApp(platform, {
      imports: [
        OrchestratorModule.forRoot({ breakers: { 'quotes-feed': { failureThreshold: 2, openMs: 60_000 } } }),
        OrchestratorObservabilityModule.forRoot({
          metrics: { path: '/internal/metrics', defaultMetrics: false },
          logger,
        }),
      ],
      controllers: [QuotesController],
    });
    const url = running.url;
    const herd = Array.from({ length: 10 }, () => postJson(`${url}/quotes`, { symbol: 'ACME' }));
    // The gate opens once the whole herd is in: one call started, nine joined it (on a busy machine that can take
    // far longer than any fixed wait; opened early, the late ones would be answered from the window instead).
    const orchestrator = running.app.get(OrchestratorService);
    await waitFor(
      () => calls === 1 && orchestrator.health().dedup.joined === 9,
      10_000,
      'one call and 9 requests joined to it',
    );
    gate.resolve();
    await Promise.all(herd);
    expect(calls).toBe(1);
    let samples = await scrape(`${url}/internal/metrics`);
    expect(
      valueOf(samples, 'orchestrator_requests_total', {
        route: 'QuotesController.quote',
        upstream: 'quotes-feed',
        outcome: 'miss',
      }),
    ).toBe(1);
    expect(valueOf(samples, 'orchestrator_requests_total', { outcome: 'joined' })).toBe(9);
    expect(valueOf(samples, 'orchestrator_upstream_calls_saved_total', { upstream: 'quotes-feed' })).toBe(9);
    expect(valueOf(samples, 'process_cpu_seconds_total')).toBe(0); // defaultMetrics: false

    failing = true;
    for (const symbol of ['X', 'Y']) expect((await postJson(`${url}/quotes`, { symbol })).status).toBe(503);
    expect((await postJson(`${url}/quotes`, { symbol: 'Z' })).status).toBe(503);
    samples = await scrape(`${url}/internal/metrics`);
    expect(valueOf(samples, 'orchestrator_breaker_state', { name: 'quotes-feed' })).toBe(2);
    expect(
      valueOf(samples, 'orchestrator_breaker_transitions_total', { name: 'quotes-feed', from: 'closed', to: 'open' }),
    ).toBe(1);
    expect(valueOf(samples, 'orchestrator_refusals_total', { upstream: 'quotes-feed', reason: 'circuit_open' })).toBe(
      1,
    );
    expect(lines).toEqual([
      {
        level: 'warn',
        fields: { event: 'breaker_transition', breaker: 'quotes-feed', from: 'closed', to: 'open' },
        message: expect.stringContaining('opened'),
      },
    ]);

    const live = await fetch(`${url}/health/live`);
    expect(live.status).toBe(200);
    const ready = (await (await fetch(`${url}/health/ready`)).json()) as Record<string, any>;
    expect(ready).toMatchObject({ status: 'ok', details: { breakers: { status: 'up', 'quotes-feed': 'open' } } });

    // The app's own metric, in the same registry, on the same route.
    const metrics = running.app.get(OrchestratorMetrics);
    new Counter({ name: 'app_quotes_total', help: 'quotes served', registers: [metrics.registry as Registry] }).inc(3);
    expect(valueOf(await scrape(`${url}/internal/metrics`), 'app_quotes_total')).toBe(3);
  });

  it('serves nothing it was told not to', async () => {
    running = await startApp(platform, {
      imports: [
        OrchestratorModule.forRoot(),
        OrchestratorObservabilityModule.forRoot({ metrics: false, health: false }),
      ],
      controllers: [QuotesController],
    });
    expect((await fetch(`${running.url}/metrics`)).status).toBe(404);
    expect((await fetch(`${running.url}/health/ready`)).status).toBe(404);
    expect(running.app.get(OrchestratorMetrics)).toBeNull();
  });
});
