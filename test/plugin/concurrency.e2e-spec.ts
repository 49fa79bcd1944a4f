import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { Body, Controller, HttpCode, Post } from '@nestjs/common';
import {
  CircuitBreaker,
  Concurrency,
  OrchestratorModule,
  OrchestratorService,
  Timeout,
} from 'nest-prompt-orchestrator';
import { Gate, PLATFORMS, postJson, startApp, waitFor, type RunningApp } from '../support/platforms.js';

/** Stands in for an upstream: records every call it receives and holds each one until the test opens the gate. */
class FakeUpstream {
  calls = 0;
  received: unknown[] = [];
  gate = new Gate();

  async held(body: unknown) {
    this.calls++;
    this.received.push(body);
    await this.gate.promise;
    return { ok: true, echo: body };
  }

  /** Answers quickly (well within a 50 ms limit), yet not synchronously, so that a time limit applies. */
  async fast(body: unknown) {
    this.calls++;
    this.received.push(body);
    await new Promise((resolve) => setTimeout(resolve, 5));
    return { ok: true, echo: body };
  }
}
const upstream = new FakeUpstream();

@Controller('work')
@Concurrency(16)
class WorkController {
  @Post()
  @HttpCode(200)
  work(@Body() body: unknown) {
    return upstream.held(body);
  }
}

@Controller('tight')
class TightController {
  @Post('overflow')
  @HttpCode(200)
  @Concurrency({ name: 'overflow', limit: 1, queueSize: 1 })
  overflow(@Body() body: unknown) {
    return upstream.held(body);
  }

  @Post('impatient')
  @HttpCode(200)
  @Concurrency({ name: 'impatient', limit: 1, maxWaitMs: 50 })
  impatient(@Body() body: unknown) {
    return upstream.held(body);
  }

  @Post('single')
  @HttpCode(200)
  @Concurrency({ name: 'single', limit: 1 })
  single(@Body() body: unknown) {
    return upstream.held(body);
  }

  /** Shares the `single` limiter, with a short time limit and a fast upstream. */
  @Post('single-fast')
  @HttpCode(200)
  @Concurrency({ name: 'single', limit: 1 })
  @Timeout(50)
  @CircuitBreaker('single-upstream')
  singleFast(@Body() body: unknown) {
    return upstream.fast(body);
  }

  /** A breaker-guarded route whose queue wait expires quickly. */
  @Post('guarded')
  @HttpCode(200)
  @CircuitBreaker('guarded-upstream')
  @Concurrency({ name: 'guarded', limit: 1, maxWaitMs: 30 })
  guarded(@Body() body: unknown) {
    return upstream.held(body);
  }

  /** Same breaker, no queue at all: one call in flight, every other refused as overload. */
  @Post('guarded-full')
  @HttpCode(200)
  @Concurrency({ name: 'guarded-full', limit: 1, queueSize: 0 })
  @CircuitBreaker('guarded-upstream')
  guardedFull(@Body() body: unknown) {
    return upstream.held(body);
  }
}

/**
 * Awaits an answer that must come while the upstream is still held: fails after `timeoutMs`
 * (instead of hanging until the gate opens) if the request was queued rather than refused.
 */
async function answeredWhileHeld<T>(request: Promise<T>, what: string, timeoutMs = 5_000): Promise<T> {
  let answer: { value: T } | undefined;
  void request.then((value) => (answer = { value }));
  await waitFor(() => answer !== undefined, timeoutMs, what);
  return answer!.value;
}

// Nest's error shape (the module's default errorShape), with the orchestrator's code.
const overloadBody = (code: string) => ({
  statusCode: 429,
  error: 'Too Many Requests',
  code,
  message: expect.any(String),
});

describe.each(PLATFORMS)('concurrency on %s', (platform) => {
  let running: RunningApp;
  let orchestrator: OrchestratorService;
  const limiter = (name: string) => orchestrator.health().limiters.find((l) => l.name === name);

  beforeEach(async () => {
    upstream.calls = 0;
    upstream.received = [];
    upstream.gate = new Gate();
    running = await startApp(platform, {
      imports: [OrchestratorModule.forRoot()],
      controllers: [WorkController, TightController],
    });
    orchestrator = running.app.get(OrchestratorService);
  });
  afterEach(async () => {
    upstream.gate.resolve();
    await running.close();
  });

  it('lets exactly 16 of 20 distinct requests reach the upstream, queues 4, then runs them once slots free', async () => {
    const requests = Array.from({ length: 20 }, (_, i) => postJson(`${running.url}/work`, { prompt: `distinct ${i}` }));
    await waitFor(
      () => upstream.calls === 16 && limiter('WorkController.work')?.queued === 4,
      10_000,
      '16 calls in flight and 4 queued',
    );
    expect(upstream.calls).toBe(16);
    expect(limiter('WorkController.work')).toEqual({
      name: 'WorkController.work',
      limit: 16,
      mode: 'fixed',
      ceiling: 16,
      inFlight: 16,
      queued: 4,
      queueSize: 1000,
      detached: 0,
    });

    upstream.gate.resolve();
    const answers = await Promise.all(requests);
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    expect(upstream.calls).toBe(20);
    const prompts = answers.map((a) => (a.json as { echo: { prompt: string } }).echo.prompt).sort();
    expect(prompts).toEqual(Array.from({ length: 20 }, (_, i) => `distinct ${i}`).sort());
    await waitFor(() => limiter('WorkController.work')?.inFlight === 0, 10_000, 'every slot released');
    expect(limiter('WorkController.work')).toMatchObject({ queued: 0 });
  });

  it('refuses at once with 429 when the queue is full', async () => {
    const first = postJson(`${running.url}/tight/overflow`, { n: 1 });
    await waitFor(() => upstream.calls === 1, 10_000, 'the first call');
    const second = postJson(`${running.url}/tight/overflow`, { n: 2 });
    await waitFor(() => limiter('overflow')?.queued === 1, 10_000, 'the second request queued');

    // Answered while the gate is still closed: the third request is not queued.
    const third = await answeredWhileHeld(
      postJson(`${running.url}/tight/overflow`, { n: 3 }),
      'the third request to be refused',
    );
    expect(third.status).toBe(429);
    expect(third.json).toEqual(overloadBody('overloaded'));
    expect(third.headers.get('retry-after')).toBe('1');
    expect(third.headers.get('x-should-retry')).toBe('false');
    expect(upstream.calls).toBe(1);

    upstream.gate.resolve();
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);
    expect(upstream.calls).toBe(2);
    expect(upstream.received).toEqual([{ n: 1 }, { n: 2 }]);
  });

  it('answers 429 when the wait for a slot exceeds maxWaitMs', async () => {
    const first = postJson(`${running.url}/tight/impatient`, { n: 1 });
    await waitFor(() => upstream.calls === 1, 10_000, 'the first call');
    const second = await answeredWhileHeld(postJson(`${running.url}/tight/impatient`, { n: 2 }), 'the wait to expire');
    expect(second.status).toBe(429);
    expect(second.json).toEqual(overloadBody('queue_timeout'));
    expect(second.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
    expect(second.headers.get('x-should-retry')).toBe('false');
    expect(limiter('impatient')).toMatchObject({ inFlight: 1, queued: 0 });
    expect(upstream.calls).toBe(1);

    upstream.gate.resolve();
    expect((await first).status).toBe(200);
    expect(upstream.calls).toBe(1);
  });

  it('drops a queued request whose client disconnects: it never reaches the upstream', async () => {
    const first = postJson(`${running.url}/tight/single`, { n: 1 });
    await waitFor(() => upstream.calls === 1, 10_000, 'the first call');
    const leaver = new AbortController();
    const leaving = postJson(`${running.url}/tight/single`, { n: 'gone' }, {}, leaver.signal).catch((e: Error) => e);
    await waitFor(() => limiter('single')?.queued === 1, 10_000, 'the request queued');

    leaver.abort();
    expect(await leaving).toMatchObject({ name: 'AbortError' });
    await waitFor(() => limiter('single')?.queued === 0, 10_000, 'the queue to drop the request');
    await waitFor(() => orchestrator.health().clientsGone === 1, 10_000, 'the server to see the client leave');

    upstream.gate.resolve();
    expect((await first).status).toBe(200);
    await waitFor(() => limiter('single')?.inFlight === 0, 10_000, 'the slot released');
    // A later request gets the slot: the one that left was never run.
    const later = await postJson(`${running.url}/tight/single`, { n: 3 });
    expect(later.status).toBe(200);
    expect(upstream.calls).toBe(2);
    expect(upstream.received).toEqual([{ n: 1 }, { n: 3 }]);
  });

  it('does not count the wait for a slot toward the time limit', async () => {
    const holder = postJson(`${running.url}/tight/single`, { n: 'holder' });
    await waitFor(() => upstream.calls === 1, 10_000, 'the holder call');
    const waitingSince = Date.now();
    const queued = postJson(`${running.url}/tight/single-fast`, { n: 'queued' });
    await waitFor(() => limiter('single')?.queued === 1, 10_000, 'the timed request queued');
    // Keep it queued for several times its 50 ms limit before the slot frees up.
    await waitFor(() => Date.now() - waitingSince >= 250, 10_000, 'a wait longer than the time limit');
    expect(limiter('single')).toMatchObject({ queued: 1 });

    upstream.gate.resolve();
    const answer = await queued;
    expect(answer.status).toBe(200);
    expect(answer.json).toEqual({ ok: true, echo: { n: 'queued' } });
    expect((await holder).status).toBe(200);
    expect(orchestrator.health().breakers.find((b) => b.name === 'single-upstream')).toMatchObject({
      state: 'closed',
      consecutiveFailures: 0,
    });
  });

  it('does not count queue timeouts or overload refusals toward the breaker', async () => {
    const holder = postJson(`${running.url}/tight/guarded`, { n: 'holder' });
    const fullHolder = postJson(`${running.url}/tight/guarded-full`, { n: 'holder' });
    await waitFor(() => upstream.calls === 2, 10_000, 'both holder calls');
    for (let i = 0; i < 6; i++) {
      const timedOut = await answeredWhileHeld(postJson(`${running.url}/tight/guarded`, { n: i }), 'a queue timeout');
      expect(timedOut.status).toBe(429);
      expect(timedOut.json).toEqual(overloadBody('queue_timeout'));
      const overloaded = await answeredWhileHeld(
        postJson(`${running.url}/tight/guarded-full`, { n: i }),
        'an overload refusal',
      );
      expect(overloaded.status).toBe(429);
      expect(overloaded.json).toEqual(overloadBody('overloaded'));
    }
    expect(upstream.calls).toBe(2);
    expect(orchestrator.health().breakers.find((b) => b.name === 'guarded-upstream')).toMatchObject({
      state: 'closed',
      consecutiveFailures: 0,
    });

    upstream.gate.resolve();
    expect((await holder).status).toBe(200);
    expect((await fullHolder).status).toBe(200);
    const next = await postJson(`${running.url}/tight/guarded`, { n: 'after' });
    expect(next.status).toBe(200);
    expect(upstream.calls).toBe(3);
  });
});
