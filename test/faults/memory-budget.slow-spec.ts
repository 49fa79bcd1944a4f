import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import { execFileOwned } from '../support/children.js';
import { ensureBuilt, startGatewayProcess, startMockProcess, type AppProcess } from '../support/gateway-process.js';

/**
 * An ordinary embeddings batch job through the real gateway process: 1,000
 * distinct 120-input batches of about 1 MB each (1 GB of answers), 8 at a
 * time, with the official SDK in a process of its own. Every answer fits the
 * window's per-entry bound and is kept, so only the byte budget
 * (--window-max-bytes) bounds memory: the gateway's RSS must stay within its
 * starting RSS + the budget + a margin.
 */

const MiB = 1024 * 1024;
const BUDGET = 128 * MiB;
// V8 keeps freed heap for a while, and the buffers in flight (8 answers both ways) add to RSS.
const MARGIN = 160 * MiB;
const CLIENT = fileURLToPath(new URL('../support/embeddings-batch-client.mjs', import.meta.url));

interface BatchOutcome {
  requests: number;
  answerBytes: number;
  dedup: Record<string, number>;
  baseline: number;
  peak: number;
  wrongLength: number;
}

describe('the window is bounded in bytes', () => {
  let provider: AppProcess;
  let gateway: AppProcess;
  beforeAll(async () => {
    await ensureBuilt();
    provider = await startMockProcess();
    gateway = await startGatewayProcess(['--upstream', provider.url, '--window-max-bytes', String(BUDGET)]);
  }, 180_000);
  afterAll(async () => {
    await gateway?.stop();
    await provider?.stop();
  });

  it(`1 GB of distinct ~1 MB embeddings answers keep the gateway within its budget (${BUDGET / MiB} MiB) + ${MARGIN / MiB} MiB`, async () => {
    const { stdout } = await execFileOwned(process.execPath, [CLIENT, gateway.url, String(gateway.pid), '1000', '8'], {
      timeout: 240_000,
    });
    const outcome = JSON.parse(stdout) as BatchOutcome;
    const health = (await (await fetch(`${gateway.url}/health`)).json()) as {
      window: { bytes: number; maxBytes: number; entries: number };
    };
    process.stdout.write(
      `memory budget: ${(outcome.answerBytes / MiB).toFixed(0)} MiB of answers; gateway RSS ${(outcome.baseline / MiB).toFixed(0)} -> ` +
        `peak ${(outcome.peak / MiB).toFixed(0)} MiB; window ${(health.window.bytes / MiB).toFixed(0)} MiB in ${health.window.entries} entries\n`,
    );
    expect(outcome).toMatchObject({ requests: 1000, wrongLength: 0, dedup: { miss: 1000 } });
    expect(outcome.answerBytes).toBeGreaterThan(900 * MiB);
    expect(health.window.maxBytes).toBe(BUDGET);
    expect(health.window.bytes).toBeLessThanOrEqual(BUDGET);
    expect(health.window.entries).toBeGreaterThan(100); // answers were kept: the bound, not a refusal, holds memory down
    expect(outcome.peak - outcome.baseline).toBeLessThan(BUDGET + MARGIN);
  }, 300_000);
});
