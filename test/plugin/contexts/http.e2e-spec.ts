import { afterAll, beforeAll, beforeEach, describe, expect, it } from '@jest/globals';
import { BadRequestException, Body, Controller, Get, HttpCode, Post } from '@nestjs/common';
import {
  CallSignal,
  CallTimeout,
  CircuitBreaker,
  Dedup,
  Fallback,
  Orchestrate,
  OrchestratorModule,
  OrchestratorService,
} from 'nest-prompt-orchestrator';
import { PLATFORMS, postJson, send, startApp, waitFor, type RunningApp } from '../../support/platforms.js';
import { Backend, callersWaiting, pending } from './backend.js';

const backend = new Backend();

@Controller('fallback')
class FallbackController {
  @Post('flaky')
  @HttpCode(200)
  @CircuitBreaker({ failureThreshold: 2, openMs: 60_000 })
  @Fallback((cause: unknown) => ({ fallback: true, cause: (cause as Error).message }))
  flaky(@Body() body: unknown) {
    return backend.call(body);
  }

  @Post('slow')
  @HttpCode(200)
  @Orchestrate({ timeout: 50, fallback: { fallback: 'too slow' } })
  slow(@CallSignal() signal: AbortSignal) {
    return backend.hang(signal);
  }

  @Post('invalid')
  @HttpCode(200)
  @CallTimeout(1_000)
  @Fallback('never for a bad request')
  invalid() {
    throw new BadRequestException('name is required');
  }
}

describe.each(PLATFORMS)('@Fallback on HTTP routes (%s)', (platform) => {
  let running: RunningApp;
  beforeAll(async () => {
    running = await startApp(platform, { imports: [OrchestratorModule.forRoot()], controllers: [FallbackController] });
  });
  afterAll(() => running?.close());
  beforeEach(() => backend.reset());

  it('answers with the fallback when the route fails, and while its breaker is open', async () => {
    backend.mode = 'down';
    for (const n of [1, 2, 3]) {
      const answer = await postJson(`${running.url}/fallback/flaky`, { n });
      expect(answer.status).toBe(200);
      expect(answer.json).toMatchObject({ fallback: true });
    }
    expect(backend.calls).toBe(2);
  });

  it('answers with the fallback when the time limit passes, the signal aborted', async () => {
    const answer = await postJson(`${running.url}/fallback/slow`, {});
    expect(answer.json).toEqual({ fallback: 'too slow' });
    expect(backend.signals[0].aborted).toBe(true);
  });

  it('lets a bad request through as a 400', async () => {
    const answer = await postJson(`${running.url}/fallback/invalid`, {});
    expect(answer.status).toBe(400);
    expect(answer.text).toContain('name is required');
  });
});

@Controller('identified')
class IdentifiedController {
  @Get()
  @Dedup()
  answer() {
    return backend.call('same question');
  }
}

describe.each(PLATFORMS)("the module's identify option over HTTP (%s)", (platform) => {
  let running: RunningApp;
  beforeAll(async () => {
    running = await startApp(platform, {
      imports: [
        OrchestratorModule.forRoot({
          identify: (context) =>
            context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers['x-user'],
        }),
      ],
      controllers: [IdentifiedController],
    });
  });
  afterAll(async () => {
    backend.gate.resolve();
    await running?.close();
  });
  beforeEach(() => backend.reset());

  it('keys by the identity it returns instead of the credential headers', async () => {
    backend.mode = 'held';
    const ask = (user: string, token: string) =>
      send(`${running.url}/identified`, { headers: { 'x-user': user, authorization: `Bearer ${token}` } });
    const answers = pending([ask('u1', 'a'), ask('u1', 'b'), ask('u2', 'a')]);
    await waitFor(
      () => backend.calls === 2 && callersWaiting(running.app.get(OrchestratorService)) === 3,
      5_000,
      'two calls, three callers',
    );
    backend.gate.resolve();
    const [first, second, other] = (await Promise.all(answers)).map((a) => (a.json as { call: number }).call);
    expect(first).toBe(second);
    expect(other).not.toBe(first);
  });
});
