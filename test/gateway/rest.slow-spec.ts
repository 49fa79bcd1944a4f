import { afterEach, describe, expect, it } from '@jest/globals';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureBuilt, startGatewayProcess, startMockProcess, type AppProcess } from '../support/gateway-process.js';

/**
 * A gateway at rest wakes for nothing of its own: once its last request is
 * done and what that request set going has run out, no timer of the gateway,
 * the plugin or their libraries fires and no event-loop monitor samples.
 * Counted in the gateway process itself (a preload records every
 * setTimeout / setInterval callback and every enabled event-loop-delay
 * monitor, with where it was made), so that a busy machine changes nothing in
 * the verdict. Node's own timers (node:http's check for stalled connections,
 * once a second) are not seen by the preload.
 */

interface Wakeups {
  fired: Array<{ at: number; made: string }>;
  monitors: Array<{ made: string; enabled: Array<[number, number]> }>;
}

const PRELOAD = join(process.cwd(), 'test/support/wakeups-preload.mjs');
/** What a request leaves behind runs out within the breaker's failure window (10 s by default: its buckets rotate until every count has left it). */
const SETTLE_MS = 11_000;
/** The stretch of rest looked at: a timer repeating every second or faster fires in it several times. */
const REST_MS = 3_000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('a gateway at rest', () => {
  const started: AppProcess[] = [];
  let dir: string | undefined;
  afterEach(async () => {
    await Promise.all(started.splice(0).map((app) => app.stop()));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('fires no timer and samples no event loop once its last request has settled', async () => {
    await ensureBuilt();
    dir = mkdtempSync(join(tmpdir(), 'gateway-rest-'));
    const file = join(dir, 'wakeups.json');
    const mock = await startMockProcess(['--latency', '0']);
    started.push(mock);
    const gateway = await startGatewayProcess(['--upstream', mock.url], { WAKEUPS_FILE: file }, undefined, [
      '--import',
      PRELOAD,
    ]);
    started.push(gateway);

    // A request through the whole path (limiter, breaker, window, logs, status board), then the routes that read them.
    const answer = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-rest' },
      body: JSON.stringify({ model: 'mock-model', messages: [{ role: 'user', content: 'one request, then rest' }] }),
    });
    expect(answer.status).toBe(200);
    await answer.arrayBuffer();
    for (const path of ['/health', '/orchestrator/metrics']) await (await fetch(`${gateway.url}${path}`)).arrayBuffer();

    await sleep(SETTLE_MS);
    const from = Date.now();
    await sleep(REST_MS);
    const to = Date.now();
    gateway.child.kill('SIGTERM');
    await gateway.exited;

    const wakeups = JSON.parse(readFileSync(file, 'utf8')) as Wakeups;
    const firedAtRest = wakeups.fired.filter(({ at }) => at >= from && at <= to).map(({ made }) => made);
    // prom-client's own monitor (`nodejs_eventloop_lag_*`) among them: it samples while requests come.
    const sampling = wakeups.monitors
      .filter(({ enabled }) => enabled.some(([on, off]) => on <= to && off >= from))
      .map(({ made }) => made);
    // Where each was made, so that a failure names the timer.
    expect(firedAtRest).toEqual([]);
    expect(sampling).toEqual([]);
    // The preload saw the gateway's timers at all (else an empty list would prove nothing).
    expect(wakeups.fired.length).toBeGreaterThan(0);
    expect(wakeups.monitors.some(({ made }) => made.includes('prom-client'))).toBe(true);
  }, 120_000);
});
