import { afterEach, describe, expect, it } from '@jest/globals';
import { startLlamaServer, type LlamaServer, type LlamaServerOptions } from '../support/llama-server.js';
import { gatewayInFront, observe, sleep, until, type GatewayInFront } from './support.js';

/**
 * Free slots as the server reports them, against real llama-servers: slots busy with requests that did not come
 * through the gateway, slots a call the gateway aborted still holds, and calls kept running for the window
 * (`--keep-abandoned`) are not free, so a request the gateway cannot place waits in the gateway's queue (where its
 * time limit has not started), never in the server's own (`llamacpp:requests_deferred` stays 0). Every server here
 * is started with `--metrics`, so that the test can watch that queue. These suites start their own servers (with
 * their own slots and flags), so they never use LLAMA_SERVER_URL.
 */

// 2,000 tokens fill most of a slot's context (the model was trained on 2,048): about 2 s alone here, more when the
// slots run side by side; a short request takes a few milliseconds.
const long = (label: string, stream = false) => ({
  prompt: `Story ${label}:`,
  n_predict: 2000,
  ignore_eos: true,
  temperature: 0,
  stream,
});
const short = (label: string) => ({ prompt: `Hi ${label}`, n_predict: 8, temperature: 0 });
/** `until`, asking every 25 ms: slot counts change within a generation's first tokens. */
const untilSoon = (what: string, check: () => Promise<boolean>, timeoutMs?: number) =>
  until(what, check, timeoutMs, 25);

interface UpstreamHealth {
  health: string;
  slots?: number;
  slotsBusyElsewhere?: number;
  inFlight: number;
  queued: number;
}
const upstreamOf = async (gateway: GatewayInFront): Promise<UpstreamHealth> =>
  JSON.parse((await observe(gateway.url, { path: '/health' })).text).upstreams[0];
const detachedOf = async (gateway: GatewayInFront): Promise<number> =>
  JSON.parse((await observe(gateway.url, { path: '/health' })).text).limiters.find(
    (l: { name: string }) => l.name === 'upstream',
  ).detached;

/** The server's own gauges (Prometheus text): slots processing, and requests waiting in its queue for one. */
async function gauges(server: LlamaServer): Promise<{ processing: number; deferred: number }> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const gauge = (name: string) => Number(new RegExp(`^llamacpp:${name}\\s+(\\S+)`, 'm').exec(text)?.[1]);
  return { processing: gauge('requests_processing'), deferred: gauge('requests_deferred') };
}

/** Watches the server's queue (and the gateway's) until stopped: the most requests each ever held. */
function watchQueues(server: LlamaServer, gateway: GatewayInFront) {
  let stopped = false;
  const most = { deferred: 0, queuedInGateway: 0 };
  const watching = (async () => {
    while (!stopped) {
      const [{ deferred }, upstream] = await Promise.all([gauges(server), upstreamOf(gateway)]);
      most.deferred = Math.max(most.deferred, deferred);
      most.queuedInGateway = Math.max(most.queuedInGateway, upstream.queued);
      await sleep(20);
    }
  })();
  return async () => {
    stopped = true;
    await watching;
    return most;
  };
}

/** A request straight to the server (not through the gateway); `ended` counts the answers read to their end. */
async function direct(server: LlamaServer, body: unknown, ended = { count: 0 }): Promise<{ status: number }> {
  const response = await fetch(`${server.url}/completion`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  await response.text();
  ended.count++;
  return { status: response.status };
}

describe('slots as the server reports them', () => {
  let server: LlamaServer | undefined;
  let gateway: GatewayInFront | undefined;

  afterEach(async () => {
    await gateway?.close();
    gateway = undefined;
    await server?.close();
    server = undefined;
  });

  /** A server of `parallel` slots and the gateway in front of it, once the gateway has read the server's load. */
  async function start(parallel: number, options: LlamaServerOptions, flags: string[]) {
    server = await startLlamaServer({
      ctx: 2048 * parallel,
      metrics: true,
      allowExternal: false,
      ...options,
      args: ['--parallel', String(parallel)],
    });
    gateway = await gatewayInFront(server.url, flags);
    const g = gateway;
    await untilSoon("the gateway has read the server's slots and load", async () => {
      const upstream = await upstreamOf(g);
      return upstream.health === 'up' && upstream.slots === parallel && upstream.slotsBusyElsewhere === 0;
    });
    return { server, gateway: g };
  }

  it.each([
    ['/slots', { slots: true }],
    ['/metrics (the server runs with --no-slots)', { slots: false }],
  ])(
    'slots busy with requests sent straight to the server, read from %s, are not free: a request with a short --timeout waits in the gateway and succeeds once one frees',
    async (_source, options) => {
      const { server: s, gateway: g } = await start(2, options, ['--timeout', '1']);
      // Another client fills both slots with generations of several seconds.
      const othersEnded = { count: 0 };
      const others = [direct(s, long('elsewhere 1'), othersEnded), direct(s, long('elsewhere 2'), othersEnded)];
      await untilSoon(
        'the gateway sees both slots busy elsewhere',
        async () => (await upstreamOf(g)).slotsBusyElsewhere === 2,
      );

      const stop = watchQueues(s, g);
      const answer = await observe(g.url, { path: '/completion', body: short('through the gateway') });
      const endedBeforeAnswer = othersEnded.count;
      const most = await stop();
      const ended = await Promise.all(others);

      // Before, it went straight into the server's queue, where its 1 s ran out behind the others' generations (504).
      expect(answer.status).toBe(200);
      expect(JSON.parse(answer.text).tokens_predicted).toBe(8);
      expect(most.deferred).toBe(0);
      expect(most.queuedInGateway).toBeGreaterThanOrEqual(1);
      // It was sent only once a slot was free: after the first of the others' generations ended.
      expect(ended.map((e) => e.status)).toEqual([200, 200]);
      expect(endedBeforeAnswer).toBeGreaterThanOrEqual(1);
    },
    60_000,
  );

  it('a call the gateway timed out still holds its slot in the server: the next request waits in the gateway, not in the server', async () => {
    const { server: s, gateway: g } = await start(1, {}, ['--timeout', '1']);
    const stop = watchQueues(s, g);
    const timedOut = await observe(g.url, { path: '/completion', body: long('timed out') });
    expect(timedOut.status).toBe(504);
    // The premise: the server notices a closed connection of a plain (not streamed) request only later.
    const right = await gauges(s);
    const next = await observe(g.url, { path: '/completion', body: short('next') });
    const most = await stop();

    expect(right.processing).toBe(1);
    // Before, the gateway counted the slot free at once: the next request waited in the server's queue, its 1 s
    // running there (requests_deferred 1).
    expect(most.deferred).toBe(0);
    expect(next.status).toBe(200);
    expect(most.queuedInGateway).toBeGreaterThanOrEqual(1);
  }, 60_000);

  it('--keep-abandoned: calls kept for the window never make a live short request queue inside the server, nor wait for a kept generation', async () => {
    const { server: s, gateway: g } = await start(2, {}, ['--keep-abandoned']);
    // Two clients start long streams through the gateway and leave after the first chunk.
    await Promise.all(
      [1, 2].map(async (i) => {
        const abort = new AbortController();
        const response = await fetch(`${g.url}/completion`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(long(`abandoned ${i}`, true)),
          signal: abort.signal,
        });
        const reader = response.body!.getReader();
        await reader.read();
        abort.abort();
        await reader.cancel().catch(() => undefined);
      }),
    );
    const stop = watchQueues(s, g);
    const live = await observe(g.url, { path: '/completion', body: short('live') });
    const most = await stop();
    // Kept work still runs in the server when the live request has its answer (it was kept, not dropped).
    const keptAfter = await detachedOf(g);
    const busyAfter = (await gauges(s)).processing;

    expect(live.status).toBe(200);
    expect(most.deferred).toBe(0);
    // Answered while the kept generation still runs: what the short request waited for was the slot freed by the call
    // dropped over the keeping budget, not the end of a long generation.
    expect(keptAfter).toBe(1);
    expect(busyAfter).toBeGreaterThanOrEqual(1);
  }, 60_000);
});
