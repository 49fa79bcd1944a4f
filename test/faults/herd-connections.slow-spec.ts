import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { HERD10K_REQUESTS, herd, openFilesLimit } from '../bench/herd10k.js';
import { MockControl } from '../bench/mock-control.js';
import { ensureBuilt, startGatewayProcess, startMockProcess, type AppProcess } from '../support/gateway-process.js';

/**
 * A herd of 10,000 identical requests at once, each on a connection it opens with the request (fresh clients, no
 * connection kept from before), at the gateway's default flags: every connection opens (the listen backlog takes
 * the burst), every caller gets the same answer, and the provider is called once. How long the slowest waits is a
 * benchmark's to say (`npm run bench -- herd10k`), not this test's.
 */

/** The accept queue the kernel gave the listening socket on `port` (Send-Q of a listening socket in `ss -ltn`). */
function listenBacklog(port: number): number {
  const lines = execFileSync('ss', ['-ltnH', `sport = :${port}`], { encoding: 'utf8' })
    .trim()
    .split('\n');
  return Number(lines[0].trim().split(/\s+/)[2]);
}

describe('a herd of 10,000 on new connections', () => {
  let provider: AppProcess;
  let gateway: AppProcess;
  beforeAll(async () => {
    await ensureBuilt();
    // Long enough that the whole herd arrives while its one call is in flight.
    provider = await startMockProcess(['--latency', '300']);
    gateway = await startGatewayProcess(['--upstream', provider.url]);
  }, 180_000);
  afterAll(async () => {
    await gateway?.stop();
    await provider?.stop();
  });

  it('listens with an accept queue as deep as the kernel allows', () => {
    // Node's default (511) overflows under a herd of fresh connections: dropped SYNs are retried a second later, or
    // the connection is never opened or is reset. Whether it overflows in a given run depends on how fast the
    // gateway gets to accept; the queue it was given does not.
    const somaxconn = Number(readFileSync('/proc/sys/net/core/somaxconn', 'utf8'));
    expect(listenBacklog(Number(new URL(gateway.url).port))).toBe(Math.min(somaxconn, 65_535));
  });

  it('opens every connection, answers every caller the same, and calls the provider once', async () => {
    // This process and the gateway each hold one socket per request.
    expect(openFilesLimit()).toBeGreaterThanOrEqual(HERD10K_REQUESTS + 512);
    const control = new MockControl(provider.url);
    const before = (await control.stats()).total;
    const body = JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: `herd on new connections ${process.pid} ${Date.now()}` }],
    });
    const result = await herd(gateway.url, HERD10K_REQUESTS, body);
    expect({
      failedToOpen: result.failedToOpen,
      resets: result.resets,
      otherFailures: result.otherFailures,
      firstError: result.firstError,
    }).toEqual({
      failedToOpen: 0,
      resets: 0,
      otherFailures: 0,
      firstError: undefined,
    });
    expect(result.answered).toBe(HERD10K_REQUESTS);
    expect(result.differing).toBe(0);
    expect((await control.stats()).total - before).toBe(1);
  }, 180_000);
});
