import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { ExampleModule } from '../../apps/example/src/example.module.js';
import { RatesFeed } from '../../apps/example/src/rates-feed.js';
import { send, startApp, waitFor, type RunningApp } from '../support/platforms.js';

describe('the exchange-rates example', () => {
  let running: RunningApp;
  let feed: RatesFeed;
  const get = (path: string) => send(`${running.url}${path}`);
  const setMode = (mode: string) =>
    send(`${running.url}/feed/mode`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ mode }),
    });

  beforeEach(async () => {
    running = await startApp('express', { imports: [ExampleModule] });
    feed = running.app.get(RatesFeed);
    feed.latencyMs = 300;
  });
  afterEach(async () => {
    feed.mode = 'ok';
    await running.close();
  });

  it('answers 50 identical requests with one feed call, then from the window', async () => {
    const answers = await Promise.all(Array.from({ length: 50 }, () => get('/rates/EUR')));
    expect(answers.every((a) => a.status === 200)).toBe(true);
    expect(new Set(answers.map((a) => a.text)).size).toBe(1);
    const outcomes = answers.map((a) => a.headers.get('x-orchestrator-dedup'));
    expect(outcomes.filter((o) => o === 'miss')).toHaveLength(1);
    expect(outcomes.every((o) => o === 'miss' || o === 'joined' || o === 'cached')).toBe(true);
    const again = await get('/rates/EUR');
    expect(again.headers.get('x-orchestrator-dedup')).toBe('cached');
    expect(again.json.rates.USD).toBeGreaterThan(0);
    expect((await get('/feed')).json.calls).toBe(1);
  });

  it('converts through OrchestratorService.run(): conversions from one currency share a feed call', async () => {
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => get(`/convert?from=EUR&to=USD&amount=${i + 1}`)),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    const rate = answers[0].json.converted;
    expect(answers[9].json.converted).toBeCloseTo(rate * 10, 1);
    expect(feed.stats().calls).toBe(1);
    expect((await get('/convert?from=EUR&to=XXX&amount=1')).status).toBe(400);
  });

  it('survives a feed outage: 5 failures open the breaker, refusals are immediate, the health probe lets traffic resume', async () => {
    expect((await setMode('down')).status).toBe(200);
    for (const base of ['EUR', 'USD', 'GBP', 'JPY', 'CHF']) expect((await get(`/rates/${base}`)).status).toBe(502);
    const refused = await get('/rates/EUR');
    expect(refused.status).toBe(503);
    expect(refused.headers.get('x-should-retry')).toBe('false');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect((await get('/convert?from=EUR&to=USD&amount=1')).status).toBe(503); // same breaker for run()
    expect(feed.stats().calls).toBe(5); // the refusals never reached the feed

    // Traffic resumes because the health probe found the feed answering again (not because the open period ran out).
    const ping = feed.ping.bind(feed);
    let pingsAnsweredOk = 0;
    feed.ping = async (signal) => {
      const ok = await ping(signal);
      if (ok) pingsAnsweredOk++;
      return ok;
    };
    await setMode('ok');
    let status = (await get('/rates/EUR')).status;
    while (status !== 200) {
      expect(status).toBe(503);
      await new Promise((resolve) => setTimeout(resolve, 50)); // polling interval
      status = (await get('/rates/EUR')).status;
    }
    expect(pingsAnsweredOk).toBeGreaterThanOrEqual(1);
  });

  it('cancels a hung feed call after the 2 s timeout', async () => {
    await setMode('hang');
    // The feed never answers: only the time limit can end this request.
    const answer = await get('/rates/JPY');
    expect(answer.status).toBe(504);
    expect(answer.json.code).toBe('upstream_timeout');
    await waitFor(() => feed.stats().aborted === 1, 60_000, 'the feed call to be aborted');
    expect(feed.stats().inFlight).toBe(0);
  });

  it('keeps 4 feed calls in flight, 20 waiting, and answers the rest 429 at once', async () => {
    // The feed holds its calls until all 30 requests are placed (4 at the feed, 6 refused), so that a slow machine
    // cannot free a slot early and let a 25th in.
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let atFeed = 0;
    const latest = feed.latest.bind(feed);
    feed.latencyMs = 0;
    feed.latest = async (base, signal) => {
      atFeed++;
      await gate;
      return latest(base, signal);
    };
    const bases = Array.from({ length: 30 }, (_, i) => `C${String(i).padStart(2, '0')}`);
    let refused = 0;
    const pending = bases.map((base) =>
      get(`/rates/${base}`).then((answer) => {
        if (answer.status === 429) refused++;
        return answer;
      }),
    );
    await waitFor(() => atFeed === 4 && refused === 6, 60_000, '4 calls at the feed and 6 refusals');
    release();
    const answers = await Promise.all(pending);
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(24);
    expect(statuses.filter((s) => s === 429)).toHaveLength(6);
    expect(answers.find((a) => a.status === 429)?.headers.get('retry-after')).toBeTruthy();
    expect(atFeed).toBe(24);
    expect(feed.stats().maxInFlight).toBe(4);
  });
});
