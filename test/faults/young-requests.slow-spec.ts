import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { ensureBuilt, startGatewayProcess, startMockProcess, type AppProcess } from '../support/gateway-process.js';

/**
 * A request's objects die young: they are gone by the next scavenge or the one after, and only what the window keeps of
 * an answer reaches the old generation. Also after a full GC under load: while a V8 `Map` held the calls in flight (and
 * a `Set` the responses), the first full GC under load made every later request's objects survive two scavenges and be
 * promoted, until the next full GC, which started it again (see `KeyTable`). The real gateway process, under
 * load from 32 connections, with V8's own account of each scavenge (`--trace-gc-nvp`); a signal runs the full GC
 * mid-load. `npm run test:loaded` runs it beside two busy processes too, where V8's pretenuring promoted whole
 * requests until the gateway ran without it (see `runtime-flags.ts`).
 */

const CONNECTIONS = 32;
/** Requests before anything is measured: the code optimised, the window filled a little. */
const WARM = 3_000;
/** Requests after the full GC before the measure: the next scavenge promotes what the full GC left in the young generation. */
const SETTLE = 1_500;
/** Requests in each measured stretch (several scavenges: one every 400-500 requests). */
const MEASURED = 3_000;
/** Bytes promoted per request after the full GC, at most: a kept answer is 300-500; a request's whole graph is 5,000+. */
const MAX_PROMOTED_PER_REQUEST = 2_000;
const FULL_GC_ON_SIGNAL = fileURLToPath(new URL('../support/full-gc-on-signal.cjs', import.meta.url));

/** Bytes V8 promoted in the scavenges it reported in `text` (`--trace-gc-nvp` lines), and how many of them there were. */
function promoted(text: string): { bytes: number; scavenges: number; fullGcs: number } {
  let bytes = 0;
  let scavenges = 0;
  let fullGcs = 0;
  for (const line of text.split('\n')) {
    const gc = / gc=(\w+) /.exec(line)?.[1];
    if (gc === 's') {
      scavenges++;
      bytes += Number(/ promoted=(\d+)/.exec(line)?.[1] ?? 0);
    } else if (gc !== undefined) fullGcs++;
  }
  return { bytes, scavenges, fullGcs };
}

describe('requests die young under load', () => {
  let provider: AppProcess;
  let gateway: AppProcess;
  beforeAll(async () => {
    await ensureBuilt();
    provider = await startMockProcess(['--latency', '0', '--jitter', '0']);
    gateway = await startGatewayProcess(['--upstream', provider.url, '--no-request-log'], {}, undefined, [
      '--expose-gc',
      '--trace-gc-nvp',
      '--require',
      FULL_GC_ON_SIGNAL,
    ]);
  }, 180_000);
  afterAll(async () => {
    await gateway?.stop();
    await provider?.stop();
  });

  it(`after a full GC under load, a distinct request promotes at most ${MAX_PROMOTED_PER_REQUEST} bytes`, async () => {
    const pool = new Pool(gateway.url, { connections: CONNECTIONS });
    let sent = 0;
    let failed = 0;
    const send = async (until: number) => {
      while (sent < until) {
        const n = sent++;
        const body = JSON.stringify({
          model: 'mock-model',
          messages: [{ role: 'user', content: `young requests ${process.pid} ${n}` }],
        });
        const { statusCode, body: answer } = await pool.request({
          method: 'POST',
          path: '/v1/chat/completions',
          headers: { 'content-type': 'application/json', authorization: 'Bearer sk-young-requests' },
          body,
        });
        await answer.text();
        if (statusCode !== 200) failed++;
      }
    };
    const load = (until: number) => Promise.all(Array.from({ length: CONNECTIONS }, () => send(until)));
    /** Bytes promoted per request, and the collections V8 reported, over `requests` more requests. */
    const measure = async (requests: number) => {
      const mark = gateway.output().length;
      const from = sent;
      await load(sent + requests);
      const gcs = promoted(gateway.output().slice(mark));
      return { ...gcs, perRequest: gcs.bytes / (sent - from) };
    };
    try {
      await load(WARM);
      const before = await measure(MEASURED);
      // Under load: the calls and responses in flight are moved to the old generation by the full GC.
      const signalled = gateway.output().length;
      const during = load(sent + 200);
      await new Promise((resolve) => setTimeout(resolve, 20));
      process.kill(gateway.pid, 'SIGUSR2');
      await during;
      await load(sent + SETTLE);
      const forced = promoted(gateway.output().slice(signalled));
      const after = await measure(MEASURED);
      process.stdout.write(
        `young requests: promoted ${before.perRequest.toFixed(0)} B per request before the full GC (${before.scavenges} scavenges), ` +
          `${after.perRequest.toFixed(0)} B after it (${after.scavenges} scavenges, ${after.fullGcs} full GCs)\n`,
      );
      expect(failed).toBe(0);
      expect(forced.fullGcs).toBeGreaterThanOrEqual(1); // the signal's
      expect(after.scavenges).toBeGreaterThanOrEqual(3);
      expect(after.perRequest).toBeLessThan(MAX_PROMOTED_PER_REQUEST);
    } finally {
      await pool.close();
    }
  }, 120_000);
});
