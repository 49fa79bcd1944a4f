import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { llamaServerAvailable, startLlamaServer, type LlamaServer } from '../support/llama-server.js';
import { postJson, send } from '../support/platforms.js';

/**
 * The test harness for a real llama-server: start, answer, restart with other flags, stop.
 * Run with:
 *   node --experimental-vm-modules node_modules/jest/bin/jest.js --runInBand \
 *     --testMatch '**\/*.llama-spec.ts' --roots '<rootDir>/test'
 * A missing tarball (or a machine that cannot run it) fails this suite with the reason.
 */

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('llama-server test harness', () => {
  let server: LlamaServer | undefined;

  beforeAll(async () => {
    const unavailable = llamaServerAvailable();
    if (unavailable !== undefined) throw new Error(`llama-server unavailable: ${unavailable}`);
    // This suite checks the harness's own process handling, so it never uses LLAMA_SERVER_URL.
    server = await startLlamaServer({ ctx: 512, allowExternal: false });
  }, 60_000);

  afterAll(async () => {
    await server?.close();
  });

  it('starts a server that is ready and tokenizes', async () => {
    const running = server!;
    expect(running.external).toBe(false);
    expect(running.pid).toEqual(expect.any(Number));
    expect(running.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);

    const health = await send(`${running.url}/health`);
    expect(health.status).toBe(200);
    expect(health.json).toEqual({ status: 'ok' });

    const tokenized = await postJson(`${running.url}/tokenize`, { content: 'hi' });
    expect(tokenized.status).toBe(200);
    expect(tokenized.json.tokens).toEqual(expect.arrayContaining([expect.any(Number)]));
    const detokenized = await postJson(`${running.url}/detokenize`, { tokens: tokenized.json.tokens });
    expect(detokenized.json).toEqual({ content: 'hi' });
  });

  it('restarts with other flags: /props shows the new context size', async () => {
    const running = server!;
    const before = await send(`${running.url}/props`);
    expect(before.json.default_generation_settings.n_ctx).toBe(512);
    const oldPid = running.pid!;

    await running.restart(['-c', '1024']);

    expect(running.pid).not.toBe(oldPid);
    expect(processAlive(oldPid)).toBe(false);
    const after = await send(`${running.url}/props`);
    expect(after.status).toBe(200);
    expect(after.json.default_generation_settings.n_ctx).toBe(1024);
  }, 60_000);

  it('close() stops the process it started, and a second close() is harmless', async () => {
    const running = server!;
    const pid = running.pid!;
    const url = running.url;
    await running.close();
    await running.close();
    expect(processAlive(pid)).toBe(false);
    await expect(fetch(`${url}/health`, { signal: AbortSignal.timeout(2_000) })).rejects.toThrow();
  }, 30_000);
});
