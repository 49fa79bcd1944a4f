import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import type { ToWorker } from '../../apps/gateway/src/cluster/messages.js';
import { PrimaryHub, type HubWorker } from '../../apps/gateway/src/cluster/primary-hub.js';
import { sseData, uniquePrompt } from '../support/gateway-harness.js';
import { ensureBuilt, startGatewayProcess, type AppProcess } from '../support/gateway-process.js';
import { parseMetrics, valueOf } from '../support/metrics-text.js';
import { GatedUpstream } from '../support/gated-upstream.js';
import { isRunning } from '../support/children.js';
import { Gate } from '../support/platforms.js';
import { redisServerMissing, startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';
import { createClient } from '@keyv/redis';

/**
 * `--workers 2` without `--redis`: two gateway processes on one port behave as
 * one gateway. A herd spread over both makes one provider call (streams too,
 * late joiners on the other worker included), a metrics scrape and /health
 * describe both workers whichever answers, and signals to the primary never
 * drop a request in flight.
 *
 * Between the gateway and the simulated provider sits a gate (below): it holds
 * the provider's answer until the test has seen, through the gateway, that
 * every request of the herd has arrived, so that no timing stands in for it.
 * First, in this process: the events cross in the plugin's wire format, and
 * the primary's bookkeeping, message by message.
 */

const KEY = 'sk-workers-suite';

const chat = (content: string, stream = false) =>
  JSON.stringify({ model: 'mock-model', stream, temperature: 0, messages: [{ role: 'user', content }] });

interface Answer {
  status: number;
  outcome: string | null;
  text: string;
}

async function ask(url: string, body: string, key = KEY): Promise<Answer> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body,
  });
  return {
    status: response.status,
    outcome: response.headers.get('x-orchestrator-dedup'),
    text: await response.text(),
  };
}

/**
 * A request on a connection of its own (node:cluster hands each new connection to the next worker in turn), with
 * what steers a client's retries and the whole body: a follower's answer is compared to its leader's.
 */
/** `askWholeOnNewConnection`'s status, and the error code of an OpenAI-shaped error body. */
async function askOnNewConnection(url: string, body: string): Promise<{ status: number; code?: string }> {
  const answer = await askWholeOnNewConnection(url, body);
  try {
    return { status: answer.status, code: (JSON.parse(answer.text) as { error?: { code?: string } }).error?.code };
  } catch {
    return { status: answer.status };
  }
}

function askWholeOnNewConnection(
  url: string,
  body: string,
): Promise<{
  status: number;
  outcome: string | null;
  retryAfter: string | null;
  shouldRetry: string | null;
  text: string;
}> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}/v1/chat/completions`,
      { method: 'POST', agent: false, headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` } },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (text += chunk));
        response.on('end', () => {
          const header = (name: string) => {
            const value = response.headers[name];
            return typeof value === 'string' ? value : null;
          };
          resolve({
            status: response.statusCode ?? 0,
            outcome: header('x-orchestrator-dedup'),
            retryAfter: header('retry-after'),
            shouldRetry: header('x-should-retry'),
            text,
          });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** A request whose answer is read as it comes: `started` resolves once the first SSE event has reached the client. */
function askStreaming(url: string, body: string): { started: Promise<void>; done: Promise<Answer> } {
  const started = new Gate();
  const done = (async () => {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body,
    });
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    for (;;) {
      const { value, done: finished } = await reader.read();
      if (finished) break;
      text += decoder.decode(value, { stream: true });
      if (text.includes('data:')) started.resolve();
    }
    started.resolve();
    return { status: response.status, outcome: response.headers.get('x-orchestrator-dedup'), text };
  })();
  done.catch((error: unknown) => started.reject(error));
  return { started: started.promise, done };
}

interface WorkerHealth {
  pid: number;
  state: string;
  inFlight: number;
  dedup: { miss: number; joined: number; cached: number };
  coordination?: string | null;
}

interface Health {
  dedup: { inFlight: number; callersWaiting: number; miss: number; joined: number; cached: number };
  coordination: { state: string } | null;
  workers?: { configured: number; count: number; reporting: number; answeredBy: number; list: WorkerHealth[] };
}

async function health(url: string): Promise<Health> {
  // With --keys-file, /health wants a key like any route.
  return (await (await fetch(`${url}/health`, { headers: { authorization: `Bearer ${KEY}` } })).json()) as Health;
}

/** The built gateway as a process, `--workers` and all: two Nest apps booting at once on a saturated machine take long. */
const startGateway = (args: string[]) => startGatewayProcess(args, {}, 120_000);

/** Polls `condition` until it holds; the failure names what was last seen. */
async function until<T>(
  what: string,
  read: () => Promise<T>,
  condition: (value: T) => boolean,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (condition(value)) return value;
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}; last seen: ${JSON.stringify(value).slice(0, 2_000)}`);
    await new Promise((resolve) => setTimeout(resolve, 25)); // polling interval
  }
}

/** Requests the gateway has attached to a call (led or joined) since `before`, across the workers. */
const attached = (now: Health, before: Health) =>
  now.dedup.miss + now.dedup.joined - (before.dedup.miss + before.dedup.joined);

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('--workers: what crosses between the workers and their primary', () => {
  it("the leader's span goes with its claim: a worker that follows it is told, so its requests link to the leader", () => {
    const inbox = (id: number) => {
      const messages: ToWorker[] = [];
      const handle: HubWorker = {
        id,
        process: { pid: 2_000 + id },
        isConnected: () => true,
        send: (m) => messages.push(JSON.parse(JSON.stringify(m)) as ToWorker) > 0,
      };
      return { handle, answer: () => messages.filter((m) => m.gw === 're').at(-1)?.v };
    };
    const hub = new PrimaryHub({ maxFlightBytes: 1 << 20, log: () => undefined });
    const [a, b] = [1, 2].map(inbox);
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    hub.receive(a.handle, { gw: 'claim', c: 1, key: 'traced', trace: traceparent });
    expect(a.answer()).toEqual({ role: 'lead', flight: 1 });
    hub.receive(b.handle, { gw: 'claim', c: 1, key: 'traced' });
    expect(b.answer()).toEqual({ role: 'follow', flight: 1, events: [], trace: traceparent });
    // An untraced leader: nothing to link to, nothing sent.
    hub.receive(a.handle, { gw: 'claim', c: 2, key: 'plain' });
    hub.receive(b.handle, { gw: 'claim', c: 2, key: 'plain' });
    expect(b.answer()).toEqual({ role: 'follow', flight: 2, events: [] });
  });

  it("the primary, message by message: one lead per key, a late follower gets every event so far, a call too large to keep is not joined late, a dead leader's followers are told; one failure count and one prober", () => {
    const worker = (id: number) => {
      const inbox: ToWorker[] = [];
      const handle: HubWorker = {
        id,
        process: { pid: 1_000 + id },
        isConnected: () => true,
        send: (message) => inbox.push(JSON.parse(JSON.stringify(message)) as ToWorker) > 0,
      };
      return {
        handle,
        inbox,
        answer: () => inbox.filter((m) => m.gw === 're').at(-1)?.v,
        events: () => inbox.filter((m) => m.gw === 'event'),
      };
    };
    const head = JSON.stringify({ kind: 'head', head: { contentType: 'text/event-stream' } });
    const chunk = JSON.stringify({ kind: 'chunk', chunk: 'data: 0123456789\n\n' });
    const lines: string[] = [];
    // Room for the head and one chunk: the second chunk is one too many to keep.
    const hub = new PrimaryHub({ maxFlightBytes: head.length + chunk.length, log: (line) => lines.push(line) });
    const [a, b, c] = [1, 2, 3].map(worker);

    hub.receive(a.handle, { gw: 'claim', c: 1, key: 'k' });
    expect(a.answer()).toEqual({ role: 'lead', flight: 1 });
    hub.receive(a.handle, { gw: 'publish', flight: 1, event: head });
    hub.receive(b.handle, { gw: 'claim', c: 7, key: 'k' });
    expect(b.answer()).toEqual({ role: 'follow', flight: 1, events: [head] });
    hub.receive(a.handle, { gw: 'publish', flight: 1, event: chunk });
    hub.receive(a.handle, { gw: 'publish', flight: 1, event: chunk });
    // The follower already there gets each event live, kept or not.
    expect(b.events()).toEqual([
      { gw: 'event', follower: 7, event: chunk },
      { gw: 'event', follower: 7, event: chunk },
    ]);
    hub.receive(c.handle, { gw: 'claim', c: 1, key: 'k' });
    expect(c.answer()).toEqual({ role: 'alone' });
    expect(lines).toHaveLength(1);
    hub.receive(a.handle, { gw: 'publish', flight: 1, event: '{"kind":"end"}', last: true });
    expect(b.events().at(-1)).toEqual({ gw: 'event', follower: 7, event: '{"kind":"end"}' });
    expect(hub.flightCount).toBe(0);

    hub.receive(c.handle, { gw: 'claim', c: 2, key: 'k' });
    expect(c.answer()).toEqual({ role: 'lead', flight: 2 });
    hub.receive(b.handle, { gw: 'claim', c: 8, key: 'k' });
    expect(b.answer()).toEqual({ role: 'follow', flight: 2, events: [] });
    hub.gone(c.handle);
    expect(b.events().at(-1)).toEqual({ gw: 'event', follower: 8, event: '{"kind":"gone"}' });
    expect(hub.flightCount).toBe(0);

    hub.receive(a.handle, { gw: 'fail', c: 2, name: 'upstream' });
    expect(a.answer()).toBe(1);
    hub.receive(b.handle, { gw: 'fail', c: 9, name: 'upstream' });
    expect(b.answer()).toBe(2);
    // Told once, at the start of the run: a success anywhere must end it.
    expect([...a.inbox, ...b.inbox].filter((m) => m.gw === 'failing')).toHaveLength(2);
    hub.receive(b.handle, { gw: 'announce', c: 10, name: 'upstream', state: { state: 'open', openMs: 30_000 } });
    expect(a.inbox.at(-1)).toEqual({ gw: 'breaker', name: 'upstream', state: { state: 'open', openMs: 30_000 } });
    hub.receive(a.handle, { gw: 'prober', c: 3, name: 'upstream' });
    expect(a.answer()).toBe(true);
    hub.receive(b.handle, { gw: 'prober', c: 11, name: 'upstream' });
    expect(b.answer()).toBe(false);
    hub.gone(a.handle);
    hub.receive(b.handle, { gw: 'prober', c: 12, name: 'upstream' });
    expect(b.answer()).toBe(true);
    // A worker that starts now learns the port's breaker is open.
    const d = worker(4);
    hub.receive(d.handle, { gw: 'watch', c: 1, name: 'upstream' });
    expect(d.answer()).toEqual({ state: 'open', openMs: 30_000 });
  });
});

describe('--workers 2 without --redis: one gateway on one port', () => {
  let provider: MockProvider;
  let upstream: GatedUpstream;
  let redis: OwnedRedis | undefined;
  const gateways: AppProcess[] = [];
  /** Every worker seen: a worker is the gateway's child, not the suite's, so the suite waits for it to go too. */
  const workers: number[] = [];
  /** The gateways stopped (each waited for), then their workers gone: once the primary is gone, its workers leave. */
  const stopGateways = async () => {
    await Promise.all(gateways.splice(0).map((gateway) => gateway.stop()));
    await until(
      'the workers to exit after their primary',
      async () => workers.filter(isRunning),
      (left) => left.length === 0,
      60_000,
    );
    workers.length = 0;
  };

  beforeAll(async () => {
    await ensureBuilt();
  }, 180_000);
  afterEach(async () => {
    await stopGateways();
    await upstream?.close();
    await provider?.close();
    await redis?.close();
    redis = undefined;
  });
  afterAll(async () => {
    await stopGateways();
  });

  /** Provider, gate and a `--workers 2` gateway whose two workers both answer. */
  const start = async (flags: string[] = [], mock: Parameters<typeof startMockProvider>[0] = {}) => {
    provider = await startMockProvider({ streamChunkDelayMs: 20, ...mock });
    upstream = new GatedUpstream(provider.url);
    await upstream.start();
    const gateway = await startGateway(['--upstream', upstream.url, '--workers', '2', ...flags]);
    gateways.push(gateway);
    // (A gateway whose /health has no workers section cannot tell; it is tested as it is.)
    const ready = await until(
      'both workers to report in /health',
      () => health(gateway.url),
      (h) => h.workers === undefined || h.workers.reporting === 2,
      120_000,
    );
    if (ready.workers) expect(ready.workers.list).toHaveLength(2);
    const workerPids = ready.workers?.list.map((w) => w.pid) ?? [];
    workers.push(...workerPids);
    return { gateway, workerPids };
  };

  it('a herd of 300 over both workers: 1 provider call, one identical answer; then streams, metrics and /health for the whole port', async () => {
    const { gateway, workerPids } = await start();
    const url = gateway.url;

    // --- the herd: held at the gate until all 300 are attached to a call, across both workers ---
    const before = await health(url);
    upstream.hold();
    const body = chat(uniquePrompt('workers herd'));
    const herd = Array.from({ length: 300 }, () => ask(url, body));
    const arrived = await until(
      'the herd of 300 to arrive',
      async () => ({ health: await health(url), upstreamCalls: upstream.calls }),
      ({ health: h }) => attached(h, before) === 300,
      60_000,
    );
    const perWorker = arrived.health.workers!.list;
    upstream.release();
    const answers = await Promise.all(herd);
    expect(upstream.calls).toBe(1);
    expect(provider.stats().byRoute['/v1/chat/completions']).toBe(1);
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    expect(new Set(answers.map((a) => a.text)).size).toBe(1);
    expect(answers.filter((a) => a.outcome === 'miss')).toHaveLength(1);
    expect(answers.filter((a) => a.outcome === 'joined')).toHaveLength(299);
    // Both workers took part: the one that did not call followed the other's call.
    const share = (now: WorkerHealth[], then: Health) =>
      now.map((w) => {
        const was = then.workers!.list.find((b) => b.pid === w.pid)!;
        return w.dedup.miss + w.dedup.joined - (was.dedup.miss + was.dedup.joined);
      });
    expect(share(perWorker, before).every((n) => n > 0)).toBe(true);

    // --- 50 identical streams: one starts, its first chunk reaches its client, then 49 join (on either worker) ---
    const midway = await health(url);
    const prompt = uniquePrompt('workers stream with a few more words to send one by one');
    upstream.pauseStreams();
    const first = askStreaming(url, chat(prompt, true));
    await first.started;
    const rest = Array.from({ length: 49 }, () => askStreaming(url, chat(prompt, true)).done);
    const joined = await until(
      '49 streams to join the one in flight',
      async () => ({ health: await health(url), upstreamCalls: upstream.calls }),
      ({ health: h }) => attached(h, midway) === 50,
      60_000,
    );
    // The worker that did not lead joined the call midway: the primary gave it the events so far, then the rest.
    expect(share(joined.health.workers!.list, midway).every((n) => n > 0)).toBe(true);
    upstream.resume();
    const streams = await Promise.all([first.done, ...rest]);
    expect(upstream.calls).toBe(2);
    const sequences = streams.map((s) => sseData(s.text));
    expect(streams.every((s) => s.status === 200)).toBe(true);
    expect(new Set(sequences.map((s) => JSON.stringify(s))).size).toBe(1);
    expect(sequences[0].at(-1)).toBe('[DONE]');
    const content = sequences[0]
      .filter((d) => d !== '[DONE]')
      .map(
        (d) => (JSON.parse(d) as { choices: Array<{ delta: { content?: string } }> }).choices[0]?.delta.content ?? '',
      )
      .join('');
    expect(content).toBe(`Echo: ${prompt}`);

    // --- every scrape describes the whole port, whichever worker answers it ---
    const scrapes = [];
    for (let i = 0; i < 6; i++) {
      const response = await fetch(`${url}/orchestrator/metrics`);
      expect(response.status).toBe(200);
      scrapes.push(parseMetrics(await response.text()));
    }
    for (const samples of scrapes) {
      expect(valueOf(samples, 'orchestrator_requests_total')).toBe(350);
      expect(valueOf(samples, 'orchestrator_requests_total', { outcome: 'miss' })).toBe(2);
      expect(valueOf(samples, 'orchestrator_requests_total', { outcome: 'joined' })).toBe(348);
      expect(valueOf(samples, 'orchestrator_upstream_calls_total', { result: 'ok' })).toBe(2);
      expect(valueOf(samples, 'gateway_workers', { state: 'reporting' })).toBe(2);
    }

    // --- /health lists both workers, with totals that are their sums, whichever answers ---
    expect(new Set(workerPids).size).toBe(2);
    expect(workerPids).not.toContain(gateway.pid);
    const seenBy = new Set<number>();
    for (let i = 0; i < 6; i++) {
      const h = await health(url);
      seenBy.add(h.workers!.answeredBy);
      expect(h.workers!.configured).toBe(2);
      expect(h.workers!.count).toBe(2);
      expect(h.workers!.list.map((w) => w.pid).sort()).toEqual([...workerPids].sort());
      expect(h.workers!.list.every((w) => w.state === 'ok' && w.inFlight === 0)).toBe(true);
      expect(h.dedup.miss).toBe(2);
      expect(h.dedup.joined).toBe(348);
      expect(h.dedup.callersWaiting).toBe(0);
      expect(h.workers!.list.reduce((n, w) => n + w.dedup.joined, 0)).toBe(348);
      expect(h.coordination).toEqual({ state: 'ok' });
      expect(h.workers!.list.every((w) => w.coordination === 'ok')).toBe(true);
    }
    expect([...seenBy].every((pid) => workerPids.includes(pid))).toBe(true);

    // --- the status page's summary counts both workers too ---
    const snapshot = (await (await fetch(`${url}/orchestrator/snapshot`)).json()) as {
      totals: { miss: number; joined: number };
      workers?: unknown[];
    };
    expect(snapshot.totals.miss).toBe(2);
    expect(snapshot.totals.joined).toBe(348);
    expect(snapshot.workers).toHaveLength(2);
  }, 360_000);

  it('an outage: the failures of both workers count together (at most 5 calls in all), one prober, and both recover together', async () => {
    const { gateway, workerPids } = await start(['--retries', '0', '--probe-interval', '0.2', '--breaker-open', '30']);
    upstream.attributeTo([...workerPids, gateway.pid]);
    provider.setMode('error503');
    const refusals: Array<string | undefined> = [];
    for (let i = 0; i < 20; i++) {
      const answer = await askOnNewConnection(gateway.url, chat(uniquePrompt(`outage ${i}`)));
      expect(answer.status).toBe(503);
      refusals.push(answer.code);
    }
    expect(provider.stats().byRoute['/v1/chat/completions']).toBeLessThanOrEqual(5);
    // Once open, every worker refuses (connections alternate between them).
    expect(refusals.slice(-10).every((code) => code === 'circuit_open')).toBe(true);
    // One prober for the port, told by which process sent each probe: ten more probes (each worker would have sent
    // some of them if each probed), all from one worker but the one that confirmed the outage before it opened.
    const seen = upstream.sent('/v1/models').total;
    await until(
      'ten more health probes',
      async () => upstream.sent('/v1/models'),
      (probes) => probes.total >= seen + 10,
      60_000,
    );
    const probes = upstream.sent('/v1/models');
    expect(probes.unknownSender).toBe(0);
    expect(probes.notByTheMost).toBeLessThanOrEqual(1);
    provider.setMode('ok');
    await until(
      'the breaker to close',
      () => askOnNewConnection(gateway.url, chat(uniquePrompt('after'))),
      (a) => a.status === 200,
      10_000,
    );
    const after = await Promise.all(
      Array.from({ length: 6 }, (_, i) => askOnNewConnection(gateway.url, chat(uniquePrompt(`recovered ${i}`)))),
    );
    expect(after.map((a) => a.status)).toEqual(after.map(() => 200));
  }, 300_000);

  it("a leading worker's error reaches the other worker's followers as the leader got it: the provider's 503 (Retry-After), and the gateway's own timeout", async () => {
    // No retries and a breaker that stays closed: each error below is the answer of one call.
    const { gateway } = await start(['--retries', '0', '--breaker-failures', '100', '--timeout', '4']);
    const url = gateway.url;
    /** The leader's call held at the gate until 4 more requests (on new connections: both workers) follow it; then `failure` answers it. */
    const herd = async (body: string, failure: () => void) => {
      const before = await health(url);
      const callsBefore = upstream.calls;
      upstream.hold();
      const leader = askWholeOnNewConnection(url, body);
      await until(
        "the leader's call to reach the gate",
        async () => upstream.heldCount,
        (held) => held === 1,
      );
      const followers = Array.from({ length: 4 }, () => askWholeOnNewConnection(url, body));
      const arrived = await until(
        'the 4 followers to join',
        () => health(url),
        (h) => attached(h, before) === 5,
      );
      failure();
      const answers = { leader: await leader, followers: await Promise.all(followers) };
      upstream.release();
      expect(upstream.calls - callsBefore).toBe(1);
      expect([answers.leader, ...answers.followers].map((a) => a.outcome).sort()).toEqual([
        'joined',
        'joined',
        'joined',
        'joined',
        'miss',
      ]);
      // Both workers took part: the one that did not call followed the other's.
      const share = arrived.workers!.list.map((w) => {
        const was = before.workers!.list.find((b) => b.pid === w.pid)!;
        return w.dedup.miss + w.dedup.joined - (was.dedup.miss + was.dedup.joined);
      });
      expect(share.every((n) => n > 0)).toBe(true);
      return [answers.leader, ...answers.followers].map(({ status, retryAfter, shouldRetry, text }) => ({
        status,
        retryAfter,
        shouldRetry,
        text,
      }));
    };

    const unavailable = await herd(chat(uniquePrompt('worker leader 503')), () => {
      provider.setMode('error503', { retryAfterSeconds: 7 });
      upstream.release();
    });
    expect(unavailable[0]).toMatchObject({ status: 503, retryAfter: '7', shouldRetry: 'false' });
    expect(new Set(unavailable.map((a) => JSON.stringify(a))).size).toBe(1);

    provider.setMode('ok');
    // The gateway's own error: the held call runs out of its time limit (--timeout 4) at the gate.
    const timedOut = await herd(chat(uniquePrompt('worker leader times out')), () => undefined);
    expect(timedOut[0]).toMatchObject({ status: 504, shouldRetry: 'false' });
    expect(JSON.parse(timedOut[0].text)).toMatchObject({ error: { code: 'upstream_timeout' } });
    expect(new Set(timedOut.map((a) => JSON.stringify(a))).size).toBe(1);
  }, 300_000);

  it("the leading worker killed before its answer: the other worker's callers get one answer from a single takeover call", async () => {
    const { gateway } = await start();
    const before = await health(gateway.url);
    upstream.hold();
    const body = chat(uniquePrompt('leader dies'));
    const herd = Array.from({ length: 20 }, () =>
      ask(gateway.url, body).catch(() => ({ status: 0, outcome: null, text: '' })),
    );
    const arrived = await until(
      '20 requests to join one call',
      () => health(gateway.url),
      (h) => attached(h, before) === 20,
    );
    const grew = (w: WorkerHealth, field: 'miss' | 'joined') =>
      w.dedup[field] - before.workers!.list.find((b) => b.pid === w.pid)!.dedup[field];
    const leader = arrived.workers!.list.find((w) => grew(w, 'miss') === 1)!;
    const follower = arrived.workers!.list.find((w) => w !== leader)!;
    expect(grew(follower, 'joined')).toBeGreaterThan(0);
    process.kill(leader.pid, 'SIGKILL');
    await until(
      'the follower to take the call over',
      async () => upstream.calls,
      (n) => n === 2,
    );
    upstream.release();
    const answers = await Promise.all(herd);
    const served = answers.filter((a) => a.status !== 0);
    // Every caller of the surviving worker is answered, all alike; the dead worker's callers lost their connection.
    expect(served).toHaveLength(grew(follower, 'joined'));
    expect(served.every((a) => a.status === 200)).toBe(true);
    expect(new Set(served.map((a) => a.text)).size).toBe(1);
    expect(upstream.calls).toBe(2);
    // The primary replaced the dead worker.
    await until(
      'a new worker to serve',
      () => health(gateway.url),
      (h) => h.workers?.reporting === 2 && !h.workers.list.some((w) => w.pid === leader.pid),
    );
  }, 300_000);

  it("a worker killed after a scrape: the port's counters keep what it had counted (an upstream call it made is still counted)", async () => {
    const { gateway } = await start();
    const url = gateway.url;
    // Each on a connection of its own: node:cluster hands them to the workers in turn, so both make calls.
    for (let i = 0; i < 6; i++) expect((await askOnNewConnection(url, chat(uniquePrompt('counted')))).status).toBe(200);
    const calls = async () =>
      valueOf(
        parseMetrics(await (await fetch(`${url}/orchestrator/metrics`)).text()),
        'orchestrator_upstream_calls_total',
        { result: 'ok' },
      );
    expect(await calls()).toBe(6);
    const h = await health(url);
    const victim = h.workers!.list.find((w) => w.dedup.miss > 0)!;
    process.kill(victim.pid, 'SIGKILL');
    // (A kept-alive connection to the victim fails once: read again.)
    await until(
      'a new worker to serve',
      () => health(url).catch(() => undefined),
      (now) => now?.workers?.reporting === 2 && !now.workers.list.some((w) => w.pid === victim.pid),
      120_000,
    );
    // The victim's calls stay counted, whichever worker answers the scrape.
    for (let i = 0; i < 4; i++) expect(await calls()).toBe(6);
    expect((await askOnNewConnection(url, chat(uniquePrompt('after the kill')))).status).toBe(200);
    expect(await calls()).toBe(7);
  }, 300_000);

  it("the leading worker killed in the middle of a stream: the other worker's callers get a leader_lost error event, never an answer stitched from a second call", async () => {
    const { gateway } = await start();
    const before = await health(gateway.url);
    const prompt = uniquePrompt('leader dies mid-stream with a few more words to send');
    upstream.pauseStreams();
    const first = askStreaming(gateway.url, chat(prompt, true));
    await first.started;
    const rest = Array.from({ length: 9 }, () => askStreaming(gateway.url, chat(prompt, true)));
    const arrived = await until(
      '10 streams on one call',
      () => health(gateway.url),
      (h) => attached(h, before) === 10,
    );
    const leader = arrived.workers!.list.find(
      (w) => w.dedup.miss - before.workers!.list.find((b) => b.pid === w.pid)!.dedup.miss === 1,
    )!;
    // The followers have the first chunk: a takeover could only stitch two calls together.
    await Promise.all(rest.map((r) => r.started.catch(() => undefined)));
    process.kill(leader.pid, 'SIGKILL');
    // Let the provider go on: a (wrong) takeover call would then complete, and show below.
    upstream.resume();
    const outcomes = await Promise.all(
      [first, ...rest].map((r) =>
        r.done.then(
          (a) => a.text,
          () => 'cut',
        ),
      ),
    );
    expect(outcomes.some((text) => text.includes('[DONE]'))).toBe(false);
    expect(upstream.calls).toBe(1);
    // The dead worker's callers lost their connection; the other worker's were told why, in their stream.
    const told = outcomes.filter((text) => text !== 'cut');
    expect(told.length).toBeGreaterThan(0);
    expect(told.every((text) => sseData(text).some((d) => d.includes('"code":"leader_lost"')))).toBe(true);
  }, 300_000);

  it("with --redis, Redis stays the coordinator of the workers' calls; /health still lists both", async () => {
    const missing = redisServerMissing();
    if (missing) throw new Error(missing);
    redis = await startOwnedRedis();
    const { gateway } = await start(['--redis', redis.url]);
    // Each worker has its own Redis connection: a herd led by one whose coordination is down would make a second call.
    const before = await until(
      'Redis coordination in both workers',
      () => health(gateway.url),
      (h) =>
        h.coordination?.state === 'ok' &&
        h.workers?.reporting === 2 &&
        h.workers.list.every((w) => w.coordination === 'ok'),
    );
    upstream.hold();
    const body = chat(uniquePrompt('workers with redis'));
    const herd = Array.from({ length: 40 }, () => ask(gateway.url, body));
    await until(
      'the herd of 40 to arrive',
      () => health(gateway.url),
      (h) => attached(h, before) === 40,
    );
    upstream.release();
    const answers = await Promise.all(herd);
    expect(answers.every((a) => a.status === 200)).toBe(true);
    expect(new Set(answers.map((a) => a.text)).size).toBe(1);
    expect(upstream.calls).toBe(1);
    // The call's events went through Redis (a stream per call), not through the primary.
    const client = createClient({ url: redis.url });
    await client.connect();
    try {
      expect(await client.keys('npo:{f:*}:stream')).toHaveLength(1);
    } finally {
      await client.quit();
    }
  }, 300_000);

  it('SIGHUP to the primary without --keys-file: the workers live on and the 10 requests in flight are all answered', async () => {
    const { gateway, workerPids } = await start();
    upstream.hold();
    const inFlight = Array.from({ length: 10 }, (_, i) => ask(gateway.url, chat(uniquePrompt(`hangup ${i}`))));
    await until(
      '10 calls to reach the gate',
      async () => upstream.heldCount,
      (n) => n === 10,
    );
    process.kill(gateway.pid, 'SIGHUP');
    // The primary says what it did with it (the unfixed gateway's workers die of it instead).
    await until(
      'the primary to handle SIGHUP',
      async () => gateway.output(),
      (out) => /SIGHUP|exited/.test(out),
    );
    upstream.release();
    const answers = await Promise.all(inFlight);
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    expect(gateway.output()).not.toMatch(/worker \d+ exited/);
    expect(workerPids.every(alive)).toBe(true);
    expect((await health(gateway.url)).workers!.list.map((w) => w.pid).sort()).toEqual([...workerPids].sort());
  }, 300_000);

  it('SIGHUP with --keys-file: the workers reload the keys, requests in flight are all answered', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'npo-workers-'));
    const keys = join(dir, 'keys.json');
    writeFileSync(keys, JSON.stringify({ [KEY]: { name: 'suite', admin: true } }));
    const { gateway, workerPids } = await start(['--keys-file', keys]);
    upstream.hold();
    const inFlight = Array.from({ length: 10 }, (_, i) => ask(gateway.url, chat(uniquePrompt(`reload ${i}`))));
    await until(
      '10 calls to reach the gate',
      async () => upstream.heldCount,
      (n) => n === 10,
    );
    process.kill(gateway.pid, 'SIGHUP');
    await until(
      'the primary to pass SIGHUP on',
      async () => gateway.output(),
      (out) => /SIGHUP|exited/.test(out),
    );
    upstream.release();
    const answers = await Promise.all(inFlight);
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    expect(gateway.output()).not.toMatch(/worker \d+ exited/);
    expect(workerPids.every(alive)).toBe(true);
  }, 300_000);

  it('SIGTERM (then SIGINT and SIGTERM again) to the primary: every request in flight is answered, then the workers and the primary exit', async () => {
    const { gateway, workerPids } = await start();
    const before = await health(gateway.url);
    upstream.hold();
    const body = chat(uniquePrompt('drain herd'));
    const inFlight = [
      ...Array.from({ length: 12 }, () => ask(gateway.url, body)),
      ...Array.from({ length: 6 }, (_, i) => ask(gateway.url, chat(uniquePrompt(`drain ${i}`)))),
    ];
    await until(
      '18 requests to be in flight',
      async () => ({ health: await health(gateway.url), upstreamCalls: upstream.calls }),
      ({ health: h }) => attached(h, before) === 18,
    );
    process.kill(gateway.pid, 'SIGTERM');
    await until(
      'the drain to start',
      async () => gateway.output(),
      (out) => /draining/.test(out),
    );
    // Impatient operators: more signals must not turn the drain into a cut.
    process.kill(gateway.pid, 'SIGINT');
    process.kill(gateway.pid, 'SIGTERM');
    await until(
      'the primary to see the repeated signals',
      async () => gateway.output(),
      (out) =>
        (out.match(/already draining/g) ?? []).length === 2 ||
        gateway.child.exitCode !== null ||
        gateway.child.signalCode !== null,
    );
    upstream.release();
    const answers = await Promise.all(
      inFlight.map((p) => p.catch((error: Error) => ({ status: 0, outcome: null, text: error.message }))),
    );
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    expect(new Set(answers.slice(0, 12).map((a) => a.text)).size).toBe(1);
    expect(upstream.calls).toBe(7);
    expect(await gateway.exited).toBe(0);
    expect(workerPids.some(alive)).toBe(false);
  }, 300_000);
});
