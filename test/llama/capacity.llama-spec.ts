import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { startLlamaServer, type LlamaServer } from '../support/llama-server.js';
import { gatewayInFront, observe, sleep, until, type GatewayInFront } from './support.js';

/**
 * Capacity against two real llama-servers of two slots each, behind one
 * gateway (`--upstream A --upstream B`): abandoned generations free their
 * slots; a request's time limit starts when it gets a slot, not while it
 * waits; a server killed mid-run, or started late, changes who answers, not
 * whether every request is answered. These suites kill and restart the
 * servers they start, so they never use LLAMA_SERVER_URL.
 */

const PARALLEL = ['--parallel', '2'];
/** An abandoned stream's length: short of the context (2048 per slot), so it runs to the end if never cancelled. */
const LONG_TOKENS = 2000;
const long = (i: number, n: number, stream = false) => ({
  prompt: `Story number ${i}:`,
  n_predict: n,
  ignore_eos: true,
  temperature: 0,
  stream,
});

interface UpstreamHealth {
  name: string;
  health: string;
  inFlight: number;
  slots?: number;
}
const upstreamsOf = async (gateway: GatewayInFront): Promise<UpstreamHealth[]> =>
  JSON.parse((await observe(gateway.url, { path: '/health' })).text).upstreams;

describe('capacity: two llama-servers of two slots each behind one gateway', () => {
  let a: LlamaServer;
  let b: LlamaServer;
  let gateway: GatewayInFront | undefined;

  beforeAll(async () => {
    [a, b] = await Promise.all([
      startLlamaServer({ ctx: 4096, args: PARALLEL, metrics: true, allowExternal: false }),
      startLlamaServer({ ctx: 4096, args: PARALLEL, metrics: true, allowExternal: false }),
    ]);
  }, 60_000);
  afterEach(async () => {
    await gateway?.close();
    gateway = undefined;
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
  });

  /** A counter or gauge of one server's /metrics (`llamacpp:<name>`). */
  const metric = async (server: LlamaServer, name: string): Promise<number> => {
    const text = (await observe(server.url, { path: '/metrics' })).text;
    const value = new RegExp(`^llamacpp:${name} (\\S+)$`, 'm').exec(text)?.[1];
    if (value === undefined) throw new Error(`no llamacpp:${name} in:\n${text}`);
    return Number(value);
  };
  const processing = (server: LlamaServer) => metric(server, 'requests_processing');
  /** Tokens both servers generated so far (a cancelled generation counts what it generated before it stopped). */
  const tokensPredicted = async () =>
    (await Promise.all([a, b].map((server) => metric(server, 'tokens_predicted_total')))).reduce((x, y) => x + y, 0);

  const front = async (flags: string[] = []) => {
    gateway = await gatewayInFront(a.url, ['--upstream', b.url, ...flags]);
    // The health check has read both servers' slots (a gateway that reports no upstreams is not waited for).
    await until('both servers report their slots', async () => {
      const upstreams = await upstreamsOf(gateway!);
      return upstreams === undefined || upstreams.every((u) => u.health === 'up' && u.slots === 2);
    });
    return gateway;
  };

  it("learns each server's slots and reports each upstream in /health and readiness", async () => {
    const g = await front();
    const upstreams = await upstreamsOf(g);
    expect(upstreams).toHaveLength(2);
    expect(upstreams.map((u) => u.slots)).toEqual([2, 2]);
    const ready = await observe(g.url, { path: '/health/ready' });
    expect(ready.status).toBe(200);
    expect(JSON.parse(ready.text).details.upstreams.status).toBe('up');
  }, 60_000);

  it('4 abandoned long streams free their slots: their generations stop early, and the next short request is answered', async () => {
    const g = await front();
    const predictedBefore = await tokensPredicted();
    const clients = [0, 1, 2, 3].map(async (i) => {
      const abort = new AbortController();
      const response = await fetch(`${g.url}/completion`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(long(i, LONG_TOKENS, true)),
        signal: abort.signal,
      });
      const reader = response.body!.getReader();
      await reader.read();
      await sleep(300);
      abort.abort();
      await reader.cancel().catch(() => undefined);
    });
    await Promise.all(clients.map((c) => c.catch(() => undefined)));
    const short = await observe(g.url, { path: '/completion', body: { prompt: 'Hi', n_predict: 4, temperature: 0 } });
    expect(short.status).toBe(200);
    // Every slot idle again, then what the servers generated: a generation the gateway did not cancel runs to its
    // end, so with none cancelled the four would have produced their whole length.
    await until(
      'both servers are idle',
      async () => (await Promise.all([a, b].map(processing))).every((n) => n === 0),
      30_000,
    );
    const generated = (await tokensPredicted()) - predictedBefore;
    expect(generated).toBeLessThan(4 * LONG_TOKENS);
  }, 60_000);

  it('40 distinct long requests with a short --timeout all succeed: the clock starts when a request gets its slot', async () => {
    const g = await front(['--timeout', '4']);
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) => observe(g.url, { path: '/completion', body: long(100 + i, 600) })),
    );
    expect(answers.map((r) => r.status)).toEqual(Array(40).fill(200));
    for (const answer of answers) expect(JSON.parse(answer.text).tokens_predicted).toBe(600);
  }, 120_000);

  it('one server killed mid-run: every request is still answered, by the other', async () => {
    const g = await front();
    const requests = Array.from({ length: 16 }, (_, i) =>
      observe(g.url, { path: '/completion', body: long(200 + i, 300) }),
    );
    await sleep(400);
    process.kill(b.pid!, 'SIGKILL');
    const answers = await Promise.all(requests);
    expect(answers.map((r) => r.status)).toEqual(Array(16).fill(200));
    await until('the killed server is out of rotation', async () => (await upstreamsOf(g))[1].health === 'down');
    // Still ready: one server serves.
    expect((await observe(g.url, { path: '/health/ready' })).status).toBe(200);
    const after = await observe(g.url, { path: '/completion', body: long(300, 8) });
    expect(after.status).toBe(200);
  }, 120_000);

  it('a server started later joins the rotation', async () => {
    // B is dead (killed above, or now): the gateway starts with only A serving.
    if (b.pid !== undefined) {
      try {
        process.kill(b.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    gateway = await gatewayInFront(a.url, ['--upstream', b.url]);
    const g = gateway;
    await until('B is seen down', async () => (await upstreamsOf(g))?.[1]?.health === 'down');
    await b.restart();
    await until('B joins the rotation with its slots', async () => {
      const second = (await upstreamsOf(g))[1];
      return second.health === 'up' && second.slots === 2;
    });
    // Four long requests at once: two slots on each server, so both serve.
    const requests = [0, 1, 2, 3].map((i) => observe(g.url, { path: '/completion', body: long(400 + i, 1500) }));
    let most = [0, 0];
    await until('both servers run generations', async () => {
      const inFlight = (await upstreamsOf(g)).map((u) => u.inFlight);
      most = most.map((m, i) => Math.max(m, inFlight[i]));
      return most[0] > 0 && most[1] > 0;
    });
    expect((await Promise.all(requests)).map((r) => r.status)).toEqual([200, 200, 200, 200]);
  }, 120_000);
});
