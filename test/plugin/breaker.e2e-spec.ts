import { afterEach, describe, expect, it } from '@jest/globals';
import { Body, Controller, HttpCode, HttpException, Post } from '@nestjs/common';
import {
  CallSignal,
  CircuitBreaker,
  OrchestratorModule,
  OrchestratorService,
  Timeout,
  type OrchestratorModuleOptions,
} from 'nest-prompt-orchestrator';
import { Gate, PLATFORMS, postJson, startApp, waitFor, type RunningApp } from '../support/platforms.js';

type Mode = 'ok' | 'down' | 'bad-request' | 'held';

/** Stands in for an upstream: counts its calls, fails as told, and can hold calls on a gate. */
class FakeUpstream {
  calls = 0;
  mode: Mode = 'ok';
  gate = new Gate();
  /** The AbortSignal each call of the hanging route received. */
  signals: AbortSignal[] = [];
  healthy = false;
  probes = 0;

  reset() {
    this.calls = 0;
    this.mode = 'ok';
    this.gate = new Gate();
    this.signals = [];
    this.healthy = false;
    this.probes = 0;
  }

  async call(body: unknown) {
    this.calls++;
    const call = this.calls;
    if (this.mode === 'down') throw new HttpException('down', 503);
    if (this.mode === 'bad-request') throw new HttpException('bad request', 400);
    if (this.mode === 'held') await this.gate.promise;
    return { call, echo: body };
  }
}
const upstream = new FakeUpstream();

@Controller('breaker')
class BreakerController {
  @Post('flaky')
  @HttpCode(200)
  @CircuitBreaker('flaky')
  flaky(@Body() body: unknown) {
    return upstream.call(body);
  }

  /** Never answers on its own: only the call's AbortSignal (or the test's gate) ends it. */
  @Post('hang')
  @HttpCode(200)
  @CircuitBreaker('hung')
  @Timeout(50)
  hang(@CallSignal() signal: AbortSignal) {
    upstream.calls++;
    upstream.signals.push(signal);
    return new Promise((resolve, reject) => {
      signal.addEventListener('abort', () => reject(Object.assign(new Error('aborted'), { name: 'AbortError' })));
      void upstream.gate.promise.then(() => resolve({ late: true }));
    });
  }

  @Post('probed')
  @HttpCode(200)
  @CircuitBreaker('probed')
  probed(@Body() body: unknown) {
    return upstream.call(body);
  }

  @Post('brief')
  @HttpCode(200)
  @CircuitBreaker({ name: 'brief', openMs: 100 })
  brief(@Body() body: unknown) {
    return upstream.call(body);
  }
}

const moduleOptions: OrchestratorModuleOptions = {
  breakers: {
    probed: {
      healthProbe: async () => {
        upstream.probes++;
        if (!upstream.healthy) throw new Error('still down');
        return true;
      },
      probeIntervalMs: 20,
      openMs: 60_000,
    },
  },
};

function expectCircuitOpen(answer: Awaited<ReturnType<typeof postJson>>) {
  expect(answer.status).toBe(503);
  expect(answer.json).toEqual({
    statusCode: 503,
    error: 'Service Unavailable',
    code: 'circuit_open',
    message: expect.any(String),
  });
  const retryAfter = answer.headers.get('retry-after');
  expect(retryAfter).toMatch(/^\d+$/);
  expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
  expect(answer.headers.get('x-should-retry')).toBe('false');
}

/** Sends requests one after another until one is answered with `status`, polling like `waitFor`. */
async function requestUntil(send: () => ReturnType<typeof postJson>, status: number, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const answer = await send();
    if (answer.status === status) return answer;
    if (Date.now() > deadline) throw new Error(`no request was answered ${status} within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe.each(PLATFORMS)('circuit breaker on %s', (platform) => {
  let running: RunningApp;
  let orchestrator: OrchestratorService;

  const start = async () => {
    upstream.reset();
    running = await startApp(platform, {
      imports: [OrchestratorModule.forRoot(moduleOptions)],
      controllers: [BreakerController],
    });
    orchestrator = running.app.get(OrchestratorService);
  };
  const breaker = (name: string) => orchestrator.health().breakers.find((b) => b.name === name);

  afterEach(async () => {
    upstream.gate.resolve();
    await running?.close();
  });

  it('refuses the 6th request after 5 upstream 503s without calling the upstream, with 503 circuit_open and no-retry headers', async () => {
    await start();
    upstream.mode = 'down';
    for (let i = 1; i <= 5; i++) {
      const failure = await postJson(`${running.url}/breaker/flaky`, { i });
      expect(failure.status).toBe(503);
      // The upstream's own error, relayed: not a refusal.
      expect(failure.json).toMatchObject({ statusCode: 503, message: 'down' });
      expect(upstream.calls).toBe(i);
    }
    upstream.mode = 'ok';
    const refused = await postJson(`${running.url}/breaker/flaky`, { i: 6 });
    expectCircuitOpen(refused);
    expect(upstream.calls).toBe(5);
    expect(breaker('flaky')).toMatchObject({ state: 'open' });

    const again = await postJson(`${running.url}/breaker/flaky`, { i: 7 });
    expectCircuitOpen(again);
    expect(upstream.calls).toBe(5);
  });

  it("never opens on the caller's own 4xx errors", async () => {
    await start();
    upstream.mode = 'bad-request';
    for (let i = 1; i <= 10; i++) {
      const answer = await postJson(`${running.url}/breaker/flaky`, { i });
      expect(answer.status).toBe(400);
      expect(answer.json).toMatchObject({ statusCode: 400, message: 'bad request' });
    }
    expect(upstream.calls).toBe(10);
    expect(breaker('flaky')).toMatchObject({ state: 'closed', consecutiveFailures: 0 });
    upstream.mode = 'ok';
    const ok = await postJson(`${running.url}/breaker/flaky`, { i: 11 });
    expect(ok.status).toBe(200);
    expect(upstream.calls).toBe(11);
  });

  it('counts timeouts as failures: 5 timed-out calls (504, each aborted through its signal) open the breaker', async () => {
    await start();
    for (let i = 1; i <= 5; i++) {
      const answer = await postJson(`${running.url}/breaker/hang`, { i });
      expect(answer.status).toBe(504);
      expect(answer.json).toMatchObject({ statusCode: 504, error: 'Gateway Timeout', code: 'upstream_timeout' });
      expect(answer.headers.get('x-should-retry')).toBe('false');
      expect(upstream.calls).toBe(i);
    }
    expect(upstream.signals).toHaveLength(5);
    for (const signal of upstream.signals) {
      expect(signal).toBeInstanceOf(AbortSignal);
      expect(signal.aborted).toBe(true);
    }
    expect(new Set(upstream.signals).size).toBe(5); // each call has its own signal

    const refused = await postJson(`${running.url}/breaker/hang`, { i: 6 });
    expectCircuitOpen(refused);
    expect(upstream.calls).toBe(5);
  });

  it('closes as soon as the health probe succeeds, long before the 60 s open period', async () => {
    await start();
    upstream.mode = 'down';
    for (let i = 1; i <= 5; i++) expect((await postJson(`${running.url}/breaker/probed`, { i })).status).toBe(503);
    upstream.mode = 'ok';
    expectCircuitOpen(await postJson(`${running.url}/breaker/probed`, { i: 6 }));

    // Failing probes keep it open.
    await waitFor(() => upstream.probes >= 3, 10_000, 'three failed probes');
    expectCircuitOpen(await postJson(`${running.url}/breaker/probed`, { i: 7 }));
    expect(breaker('probed')).toMatchObject({ state: 'open', openMs: 60_000 });
    expect(upstream.calls).toBe(5);

    upstream.healthy = true;
    const through = await requestUntil(() => postJson(`${running.url}/breaker/probed`, { i: 8 }), 200);
    expect(through.json).toMatchObject({ call: 6 });
    expect(breaker('probed')).toMatchObject({ state: 'closed', consecutiveFailures: 0 });
    expect(upstream.calls).toBe(6);
  });

  it('lets exactly one probe request through after a short open period while concurrent ones are refused', async () => {
    await start();
    upstream.mode = 'down';
    for (let i = 1; i <= 5; i++) expect((await postJson(`${running.url}/breaker/brief`, { i })).status).toBe(503);
    expectCircuitOpen(await postJson(`${running.url}/breaker/brief`, { i: 6 }));
    expect(upstream.calls).toBe(5);

    upstream.mode = 'held';
    await waitFor(() => breaker('brief')?.state === 'half_open', 10_000, 'the open period to pass');
    const settled: Awaited<ReturnType<typeof postJson>>[] = [];
    const concurrent = Array.from({ length: 5 }, (_, i) =>
      postJson(`${running.url}/breaker/brief`, { probe: i }).then((answer) => {
        settled.push(answer);
        return answer;
      }),
    );
    await waitFor(() => upstream.calls === 6 && settled.length === 4, 10_000, 'one probe held and four refusals');
    // The four others were refused while the probe was still held at the gate.
    for (const answer of settled) expectCircuitOpen(answer);
    expect(upstream.calls).toBe(6);

    upstream.gate.resolve();
    const answers = await Promise.all(concurrent);
    expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
    expect(answers.filter((a) => a.status === 503)).toHaveLength(4);
    expect(upstream.calls).toBe(6);
    expect(breaker('brief')).toMatchObject({ state: 'closed' });
  });
});
