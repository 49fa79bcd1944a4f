import { afterEach, describe, expect, it } from '@jest/globals';
import { Body, Controller, Post } from '@nestjs/common';
import {
  Concurrency,
  Dedup,
  OrchestratorModule,
  OrchestratorService,
  type OrchestratorModuleOptions,
} from 'nest-prompt-orchestrator';
import { Gate, PLATFORMS, postJson, startApp, waitFor, type RunningApp } from '../support/platforms.js';

/**
 * Plain plugin routes: who shares an answer (credentials by default, an app's
 * own tenant resolver otherwise), callers in control of reuse through
 * Cache-Control, answers kept out of the window on request, and abandoned
 * calls that never hold a live caller's slot.
 */

let calls = 0;
let gate = new Gate();
/** Holds the /slow calls that ask to be held (`hold: true`) until the test lets them go. */
let slowGate = new Gate();

@Controller('ask')
class AskController {
  @Post()
  @Dedup({ windowMs: 60_000, store: (request) => (request.body as { keep?: boolean }).keep !== false })
  async ask(@Body() body: Record<string, unknown>) {
    const call = ++calls;
    await gate.promise;
    return { call, echo: body };
  }
}

@Controller('slow')
class SlowController {
  @Post()
  @Dedup({ windowMs: 60_000 })
  @Concurrency({ limit: 1, detachedLimit: 1 })
  async slow(@Body() body: { ms?: number; hold?: boolean; n: number }) {
    const call = ++calls;
    await (body.hold ? slowGate.promise : new Promise((resolve) => setTimeout(resolve, body.ms)));
    return { call, n: body.n };
  }
}

describe.each(PLATFORMS)('tenants and reuse on plain routes (%s)', (platform) => {
  let running: RunningApp | undefined;
  afterEach(async () => {
    gate.resolve();
    slowGate.resolve();
    await running?.close();
    running = undefined;
  });
  const start = async (options: OrchestratorModuleOptions = {}) => {
    calls = 0;
    gate = new Gate();
    gate.resolve();
    slowGate = new Gate();
    running = await startApp(platform, {
      imports: [OrchestratorModule.forRoot(options)],
      controllers: [AskController, SlowController],
    });
    return running.url;
  };
  const outcome = (r: { headers: Headers }) => r.headers.get('x-orchestrator-dedup');

  describe('who shares an answer', () => {
    it('by default, callers with different session cookies (or keys) never share; the same cookie does', async () => {
      const url = await start();
      const a = await postJson(`${url}/ask`, { q: 'cookie' }, { cookie: 'session=alice' });
      const b = await postJson(`${url}/ask`, { q: 'cookie' }, { cookie: 'session=bob' });
      const a2 = await postJson(`${url}/ask`, { q: 'cookie' }, { cookie: 'session=alice' });
      const basicA = await postJson(`${url}/ask`, { q: 'cookie' }, { authorization: 'Basic eA==', 'x-api-key': 'k1' });
      const basicB = await postJson(`${url}/ask`, { q: 'cookie' }, { authorization: 'Basic eA==', 'x-api-key': 'k2' });
      expect([a, b, a2, basicA, basicB].map(outcome)).toEqual(['miss', 'miss', 'cached', 'miss', 'miss']);
      expect(calls).toBe(4);
    });

    it('users told apart by a header the default does not read share answers, until a tenant resolver says who they are', async () => {
      let url = await start();
      const shared = await postJson(`${url}/ask`, { q: 'header' }, { 'x-tenant-id': 'acme' });
      const leaked = await postJson(`${url}/ask`, { q: 'header' }, { 'x-tenant-id': 'globex' });
      expect([shared, leaked].map(outcome)).toEqual(['miss', 'cached']); // the default cannot know
      await running!.close();

      url = await start({ tenant: (request) => request.headers['x-tenant-id'] as string | undefined });
      const acme = await postJson(`${url}/ask`, { q: 'header' }, { 'x-tenant-id': 'acme' });
      const globex = await postJson(`${url}/ask`, { q: 'header' }, { 'x-tenant-id': 'globex' });
      const acme2 = await postJson(`${url}/ask`, { q: 'header' }, { 'x-tenant-id': 'acme' });
      expect([acme, globex, acme2].map(outcome)).toEqual(['miss', 'miss', 'cached']);
      expect(globex.json.call).not.toBe(acme.json.call);
    });
  });

  describe('callers control reuse with Cache-Control', () => {
    it('no-cache: a fresh answer, which then replaces the stored one', async () => {
      const url = await start();
      const first = await postJson(`${url}/ask`, { q: 'fresh' });
      const fresh = await postJson(`${url}/ask`, { q: 'fresh' }, { 'cache-control': 'no-cache' });
      const after = await postJson(`${url}/ask`, { q: 'fresh' });
      expect([first, fresh, after].map(outcome)).toEqual(['miss', 'miss', 'cached']);
      expect(fresh.json.call).toBe(2);
      expect(after.json.call).toBe(2);
      const zero = await postJson(`${url}/ask`, { q: 'fresh' }, { 'cache-control': 'max-age=0' });
      expect(outcome(zero)).toBe('miss');
    });

    it('no-store: the answer is not kept', async () => {
      const url = await start();
      const first = await postJson(`${url}/ask`, { q: 'private' }, { 'cache-control': 'no-store' });
      const second = await postJson(`${url}/ask`, { q: 'private' });
      expect([first, second].map(outcome)).toEqual(['miss', 'miss']);
      expect(calls).toBe(2);
    });

    it('max-age=N: a stored answer older than N seconds is not used; a cached answer says its Age', async () => {
      const url = await start();
      await postJson(`${url}/ask`, { q: 'aging' });
      const young = await postJson(`${url}/ask`, { q: 'aging' }, { 'cache-control': 'max-age=60' });
      expect(outcome(young)).toBe('cached');
      expect(Number(young.headers.get('age'))).toBeGreaterThanOrEqual(0);
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      const aged = await postJson(`${url}/ask`, { q: 'aging' });
      expect(Number(aged.headers.get('age'))).toBeGreaterThanOrEqual(1);
      const tooOld = await postJson(`${url}/ask`, { q: 'aging' }, { 'cache-control': 'max-age=1' });
      expect(outcome(tooOld)).toBe('miss');
      expect(tooOld.headers.get('age')).toBeNull();
    });

    it("a route's store() keeps an answer out of the window, while identical requests in flight still share it", async () => {
      const url = await start();
      const orchestrator = running!.app.get(OrchestratorService);
      gate = new Gate();
      const both = [
        postJson(`${url}/ask`, { q: 'sampled', keep: false }),
        postJson(`${url}/ask`, { q: 'sampled', keep: false }),
      ];
      await waitFor(() => orchestrator.health().dedup.joined === 1, 5_000, 'the second request to join the first');
      gate.resolve();
      const [a, b] = await Promise.all(both);
      expect([a, b].map(outcome).sort()).toEqual(['joined', 'miss']);
      const later = await postJson(`${url}/ask`, { q: 'sampled', keep: false });
      expect(outcome(later)).toBe('miss');
      expect(calls).toBe(2);
    });
  });

  it('an abandoned call moves to the detached budget: the next live caller gets the slot at once, and the answer still lands', async () => {
    const url = await start();
    const orchestrator = running!.app.get(OrchestratorService);
    const leaving = new AbortController();
    // The abandoned call is held until the live one is answered: a live call queued behind it would never be.
    const abandoned = postJson(`${url}/slow`, { hold: true, n: 1 }, {}, leaving.signal).catch(() => 'left');
    await waitFor(() => calls === 1, 60_000, 'the abandoned call to start');
    leaving.abort();
    await abandoned;
    const live = await postJson(`${url}/slow`, { ms: 10, n: 2 });
    expect(live.status).toBe(201);
    expect(orchestrator.health().limiters.find((l) => l.name === 'SlowController.slow')?.detached).toBe(1);
    slowGate.resolve();
    await waitFor(() => orchestrator.health().inFlight === 0, 60_000, 'the abandoned call to finish');
    const replay = await postJson(`${url}/slow`, { hold: true, n: 1 });
    expect(outcome(replay)).toBe('cached');
  });
});
