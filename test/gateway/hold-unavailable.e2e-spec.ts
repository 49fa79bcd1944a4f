import { afterEach, describe, expect, it } from '@jest/globals';
import { createServer } from 'node:net';
import { postJson, startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';
import { scrape, valueOf } from '../support/metrics-text.js';

/**
 * `--hold-unavailable`: while no llama.cpp server is in rotation (its /health
 * answers 503 while it loads its model, or it is not there at all), a request
 * waits for one instead of failing at once; one that comes back within the hold
 * serves it, none back within it (or a hold of 0) is a clear 503
 * `no_upstream_available` that calls nobody. Every wait is a condition read
 * through the gateway (its /health and its metrics), never a sleep.
 */

let gateway: GatewayUnderTest | undefined;
afterEach(async () => {
  await gateway?.close();
  gateway = undefined;
});

const start = async (flags: string[]) => {
  gateway = await startGateway({
    flags: ['--provider', 'llama', '--health-interval', '0.05', '--retries', '0', ...flags],
  });
  return gateway;
};

async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  for (const deadline = Date.now() + 10_000; !(await check());) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20)); // polling interval
  }
}

const metrics = (g: GatewayUnderTest) => scrape(`${g.gatewayUrl}/orchestrator/metrics`);
const held = async (g: GatewayUnderTest) => valueOf(await metrics(g), 'orchestrator_held_calls', { pool: 'upstream' });
const holds = async (g: GatewayUnderTest, outcome: string) =>
  valueOf(await metrics(g), 'orchestrator_holds_total', { pool: 'upstream', outcome });
const upstreamHealth = async (g: GatewayUnderTest) =>
  ((await (await fetch(`${g.gatewayUrl}/health`)).json()) as { upstreams: Array<{ health: string }> }).upstreams[0]
    .health;

/** The simulated server loads its model: /health 503, so the gateway's poll takes it out of rotation. */
async function loading(g: GatewayUnderTest): Promise<void> {
  g.provider.setMode('error503');
  await until('the server to be out of rotation', async () => (await upstreamHealth(g)) === 'loading');
}

const complete = (g: GatewayUnderTest, label: string, signal?: AbortSignal) =>
  postJson(`${g.gatewayUrl}/completion`, { prompt: uniquePrompt(label), n_predict: 4 }, {}, signal);
const completions = (g: GatewayUnderTest) => g.provider.stats().byRoute['/completion'] ?? 0;

describe('--hold-unavailable with --provider llama', () => {
  it('the server comes back within the hold: the held request is served, as if nothing happened', async () => {
    const g = await start(['--hold-unavailable', '30']);
    await loading(g);
    const answer = complete(g, 'held then served');
    await until('the request to be held', async () => (await held(g)) === 1);
    expect(completions(g)).toBe(0);
    g.provider.setMode('ok');
    const served = await answer;
    expect(served.status).toBe(200);
    expect(served.json).toMatchObject({ stop: true });
    expect(completions(g)).toBe(1);
    expect(await held(g)).toBe(0);
    expect(await holds(g, 'served')).toBe(1);
  });

  it("none back within the hold: 503 no_upstream_available in the route's own shape, with Retry-After, and no server called", async () => {
    const g = await start(['--hold-unavailable', '0.2']);
    await loading(g);
    const native = await complete(g, 'held then refused');
    expect(native.status).toBe(503);
    expect(native.headers.get('retry-after')).toBe('1');
    expect(native.headers.get('x-should-retry')).toBe('false');
    // llama.cpp's own shape on its own route (its code is the status), OpenAI's on the OpenAI route.
    expect(native.json).toEqual({
      error: { code: 503, type: 'unavailable_error', message: expect.stringContaining('No upstream') },
    });
    const chat = await postJson(`${g.gatewayUrl}/v1/chat/completions`, {
      model: 'm',
      messages: [{ role: 'user', content: uniquePrompt('refused chat') }],
    });
    expect(chat.status).toBe(503);
    expect(chat.json).toMatchObject({
      error: { code: 'no_upstream_available', type: 'service_unavailable', param: null },
    });
    // (The gateway still reads the server's /props now and then: what it is, not a model call.)
    expect(completions(g)).toBe(0);
    expect(g.provider.stats().byRoute['/v1/chat/completions'] ?? 0).toBe(0);
    expect(await holds(g, 'expired')).toBe(2);
    expect(valueOf(await metrics(g), 'orchestrator_refusals_total', { reason: 'no_upstream_available' })).toBe(2);
  });

  it('a server that is not there at all: the same 503 once the hold is over', async () => {
    // A port nothing listens on: the poll finds the server down.
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const address = probe.address() as { port: number };
        probe.close(() => resolve(address.port));
      });
    });
    const g = await start(['--upstream', `http://127.0.0.1:${port}`, '--hold-unavailable', '0.2']);
    await until('the server to be out of rotation', async () => (await upstreamHealth(g)) === 'down');
    const refused = await complete(g, 'nobody there');
    expect(refused.status).toBe(503);
    expect(refused.json).toMatchObject({ error: { code: 503, type: 'unavailable_error' } });
    expect(await holds(g, 'expired')).toBe(1);
  });

  it('--hold-unavailable 0 refuses at once, holding nothing', async () => {
    const g = await start(['--hold-unavailable', '0']);
    await loading(g);
    const refused = await complete(g, 'refused at once');
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(refused.json).toMatchObject({ error: { code: 503, type: 'unavailable_error' } });
    const samples = await metrics(g);
    expect(valueOf(samples, 'orchestrator_holds_total')).toBe(0);
    expect(valueOf(samples, 'orchestrator_refusals_total', { reason: 'no_upstream_available' })).toBe(1);
    expect(completions(g)).toBe(0);
  });

  it('a client that hangs up leaves the hold at once; at most --queue-size requests are held, more are refused at once', async () => {
    const g = await start(['--hold-unavailable', '30', '--queue-size', '1']);
    await loading(g);
    const gone = new AbortController();
    const leaving = complete(g, 'hangs up', gone.signal).catch(() => 'aborted');
    await until('the request to be held', async () => (await held(g)) === 1);
    gone.abort();
    expect(await leaving).toBe('aborted');
    await until('the hold to be left', async () => (await held(g)) === 0 && (await holds(g, 'left')) === 1);

    const first = complete(g, 'held first');
    await until('the next request to be held', async () => (await held(g)) === 1);
    const beyond = await complete(g, 'one too many');
    expect(beyond.status).toBe(503);
    expect(beyond.json).toMatchObject({ error: { code: 503, type: 'unavailable_error' } });
    g.provider.setMode('ok');
    expect((await first).status).toBe(200);
    // The request that hung up was never sent on: the one held after it is the only call.
    expect(completions(g)).toBe(1);
  });
});
