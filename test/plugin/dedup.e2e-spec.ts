import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { Body, Controller, Headers, Post } from '@nestjs/common';
import { Dedup, OrchestratorModule, OrchestratorService } from 'nest-prompt-orchestrator';
import { Gate, PLATFORMS, postJson, startApp, waitFor, type RunningApp } from '../support/platforms.js';

/** Stands in for a paid upstream: counts its calls and holds each one until the test opens the gate. */
class FakeUpstream {
  calls = 0;
  gate = new Gate();
  failNext?: Error;
}
const upstream = new FakeUpstream();

@Controller('ask')
class AskController {
  @Post()
  @Dedup({ windowMs: 60_000 })
  async ask(@Body() body: Record<string, unknown>, @Headers('authorization') auth?: string) {
    upstream.calls++;
    const call = upstream.calls;
    await upstream.gate.promise;
    if (upstream.failNext) throw upstream.failNext;
    return { call, echo: body, tenant: auth ?? null };
  }
}

describe.each(PLATFORMS)('dedup on %s', (platform) => {
  let running: RunningApp;
  let orchestrator: OrchestratorService;

  beforeEach(async () => {
    upstream.calls = 0;
    upstream.gate = new Gate();
    upstream.failNext = undefined;
    running = await startApp(platform, {
      imports: [OrchestratorModule.forRoot({ dedup: { windowMs: 60_000 } })],
      controllers: [AskController],
    });
    orchestrator = running.app.get(OrchestratorService);
  });
  afterEach(async () => {
    upstream.gate.resolve();
    await running.close();
  });

  it('runs the handler once for 200 concurrent identical requests: 1 miss, 199 joined', async () => {
    const requests = Array.from({ length: 200 }, () => postJson(`${running.url}/ask`, { q: 'same' }));
    await waitFor(() => orchestrator.health().dedup.joined === 199, 10_000, '199 joined');
    expect(upstream.calls).toBe(1);
    upstream.gate.resolve();
    const answers = await Promise.all(requests);
    expect(answers.every((a) => a.status === 201)).toBe(true);
    const outcomes = answers.map((a) => a.headers.get('x-orchestrator-dedup'));
    expect(outcomes.filter((o) => o === 'miss')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'joined')).toHaveLength(199);
    expect(new Set(answers.map((a) => a.text)).size).toBe(1);
    expect(upstream.calls).toBe(1);

    const again = await postJson(`${running.url}/ask`, { q: 'same' });
    expect(again.headers.get('x-orchestrator-dedup')).toBe('cached');
    expect(again.text).toBe(answers[0].text);
    expect(upstream.calls).toBe(1);
  });

  it('keys on the canonical body: field order does not matter, other bodies and credentials do', async () => {
    upstream.gate.resolve();
    const a = await postJson(`${running.url}/ask`, { q: 'x', model: 'm', opts: { a: 1, b: 2 } });
    const b = await postJson(`${running.url}/ask`, { opts: { b: 2, a: 1 }, model: 'm', q: 'x' });
    expect(a.headers.get('x-orchestrator-dedup')).toBe('miss');
    expect(b.headers.get('x-orchestrator-dedup')).toBe('cached');
    const c = await postJson(`${running.url}/ask`, { q: 'y', model: 'm', opts: { a: 1, b: 2 } });
    expect(c.headers.get('x-orchestrator-dedup')).toBe('miss');
    const tenantA = await postJson(`${running.url}/ask`, { q: 'z' }, { authorization: 'Bearer key-a' });
    const tenantB = await postJson(`${running.url}/ask`, { q: 'z' }, { authorization: 'Bearer key-b' });
    expect(tenantA.headers.get('x-orchestrator-dedup')).toBe('miss');
    expect(tenantB.headers.get('x-orchestrator-dedup')).toBe('miss');
    expect((tenantB.json as { tenant: string }).tenant).toBe('Bearer key-b');
    expect(upstream.calls).toBe(4);
  });

  it('makes a new call once the window has passed', async () => {
    jest.useFakeTimers({
      doNotFake: [
        'nextTick',
        'setImmediate',
        'setTimeout',
        'setInterval',
        'clearTimeout',
        'clearInterval',
        'queueMicrotask',
      ],
    });
    try {
      upstream.gate.resolve();
      const first = await postJson(`${running.url}/ask`, { q: 'w' });
      expect(first.headers.get('x-orchestrator-dedup')).toBe('miss');
      jest.setSystemTime(Date.now() + 60_001);
      const later = await postJson(`${running.url}/ask`, { q: 'w' });
      expect(later.headers.get('x-orchestrator-dedup')).toBe('miss');
      expect(upstream.calls).toBe(2);
    } finally {
      jest.useRealTimers();
    }
  });

  it('fails every joined caller with the same error, caches nothing, and calls afresh next time', async () => {
    upstream.failNext = Object.assign(new Error('upstream exploded'), { status: 502 });
    const requests = Array.from({ length: 10 }, () => postJson(`${running.url}/ask`, { q: 'boom' }));
    await waitFor(() => orchestrator.health().dedup.joined === 9, 10_000, '9 joined');
    upstream.gate.resolve();
    const answers = await Promise.all(requests);
    expect(answers.map((a) => a.status)).toEqual(Array(10).fill(500));
    expect(upstream.calls).toBe(1);
    upstream.failNext = undefined;
    const next = await postJson(`${running.url}/ask`, { q: 'boom' });
    expect(next.status).toBe(201);
    expect(next.headers.get('x-orchestrator-dedup')).toBe('miss');
    expect(upstream.calls).toBe(2);
    expect(orchestrator.health().inFlight).toBe(0);
  });

  it('survives the first caller hanging up: joined callers get the answer, and with everyone gone it still lands in the window', async () => {
    const leaver = new AbortController();
    const first = postJson(`${running.url}/ask`, { q: 'leave' }, {}, leaver.signal).catch((e: Error) => e);
    await waitFor(() => upstream.calls === 1, 10_000, 'the call to start');
    const joined = postJson(`${running.url}/ask`, { q: 'leave' });
    await waitFor(() => orchestrator.health().dedup.joined === 1, 10_000, 'a joined caller');
    leaver.abort();
    expect(await first).toMatchObject({ name: 'AbortError' });
    await waitFor(() => orchestrator.health().clientsGone === 1, 10_000, 'the server to see the first caller leave');
    upstream.gate.resolve();
    const answer = await joined;
    expect(answer.status).toBe(201);
    expect((answer.json as { call: number }).call).toBe(1);

    // Everyone leaves a second call: it still completes and the retry is answered from the window.
    upstream.gate = new Gate();
    const alone = new AbortController();
    const gone = postJson(`${running.url}/ask`, { q: 'abandoned' }, {}, alone.signal).catch((e: Error) => e);
    await waitFor(() => upstream.calls === 2, 10_000, 'the second call to start');
    alone.abort();
    await gone;
    await waitFor(() => orchestrator.health().clientsGone === 2, 10_000, 'the server to see the last caller leave');
    upstream.gate.resolve();
    await waitFor(() => orchestrator.health().inFlight === 0, 10_000, 'the abandoned call to finish');
    const retry = await postJson(`${running.url}/ask`, { q: 'abandoned' });
    expect(retry.headers.get('x-orchestrator-dedup')).toBe('cached');
    expect((retry.json as { call: number }).call).toBe(2);
    expect(upstream.calls).toBe(2);
  });
});
