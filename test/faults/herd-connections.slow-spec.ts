import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { HERD10K_REQUESTS, herd, openFilesLimit } from '../bench/herd10k.js';
import { MockControl } from '../bench/mock-control.js';
import { ensureBuilt, startGatewayProcess, startMockProcess, type AppProcess } from '../support/gateway-process.js';

/**
 * A herd of 10,000 identical requests at once, each on a connection it opens with the request (fresh clients, no
 * connection kept from before), at the gateway's default flags: every connection opens (the listen backlog takes
 * the burst), every caller gets the same answer, and the provider is called once. How long the slowest waits is a
 * benchmark's to say (`npm run bench -- herd10k`), not this test's.
 */

describe('a herd of 10,000 on new connections', () => {
  let provider: AppProcess;
  let gateway: AppProcess;
  beforeAll(async () => {
    await ensureBuilt();
    // Long enough that the whole herd arrives while its one call is in flight.
    provider = await startMockProcess(['--latency', '300']);
    gateway = await startGatewayProcess(['--upstream', provider.url]);
  }, 180_000);
  afterAll(() => {
    gateway?.kill();
    provider?.kill();
  });

  it('opens every connection, answers every caller the same, and calls the provider once', async () => {
    // This process and the gateway each hold one socket per request.
    expect(openFilesLimit()).toBeGreaterThanOrEqual(HERD10K_REQUESTS + 512);
    const control = new MockControl(provider.url);
    const before = (await control.stats()).total;
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: `herd on new connections ${process.pid} ${Date.now()}` }] });
    const result = await herd(gateway.url, HERD10K_REQUESTS, body);
    expect({ failedToOpen: result.failedToOpen, resets: result.resets, otherFailures: result.otherFailures, firstError: result.firstError }).toEqual({
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
