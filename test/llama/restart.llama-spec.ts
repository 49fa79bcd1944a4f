import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startLlamaServer, type LlamaServer } from '../support/llama-server.js';
import { gatewayInFront, observe, type GatewayInFront } from './support.js';

/**
 * A llama-server restarted behind the gateway with another context size: the
 * gateway reports the new server at once (metadata is never answered from the
 * window) and never serves an answer of the old one as `cached` (the model
 * path and context size are part of the dedup key). This suite restarts the
 * server it starts, so it never uses LLAMA_SERVER_URL.
 */

const COMPLETION = { path: '/completion', body: { prompt: 'Hello', n_predict: 3, seed: 1, temperature: 0 } };
const CHAT = {
  path: '/v1/chat/completions',
  body: { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, seed: 1, temperature: 0 },
};
const nCtx = async (base: string) =>
  JSON.parse((await observe(base, { path: '/props' })).text).default_generation_settings.n_ctx;
const dedup = async (base: string, c: typeof COMPLETION | typeof CHAT) =>
  (await observe(base, c)).headers.get('x-orchestrator-dedup');

describe('a llama-server restarted behind the gateway', () => {
  let server: LlamaServer;
  let gateway: GatewayInFront;

  beforeAll(async () => {
    server = await startLlamaServer({ ctx: 512, allowExternal: false });
    gateway = await gatewayInFront(server.url);
  }, 60_000);
  afterAll(async () => {
    await gateway?.close();
    await server?.close();
  });

  it('metadata comes from the server every time, never from the window', async () => {
    expect(await nCtx(gateway.url)).toBe(512);
    const props = await observe(gateway.url, { path: '/props' });
    expect(props.headers.get('x-orchestrator-dedup')).toBeNull();
    await server.restart(['-c', '1024']);
    expect(await nCtx(gateway.url)).toBe(1024);
    const models = JSON.parse((await observe(gateway.url, { path: '/v1/models' })).text);
    expect(models.data[0].meta.n_ctx).toBe(1024);
  }, 60_000);

  it('an answer of the server before the restart is not served after it (seen through a /props call)', async () => {
    expect(await dedup(gateway.url, COMPLETION)).toBe('miss');
    expect(await dedup(gateway.url, COMPLETION)).toBe('cached');
    await server.restart(['-c', '768']);
    expect(await nCtx(gateway.url)).toBe(768);
    expect(await dedup(gateway.url, COMPLETION)).toBe('miss');
    expect(await dedup(gateway.url, COMPLETION)).toBe('cached');
  }, 60_000);

  it('... nor when nobody asks for /props: the next request after the check interval sees the new server', async () => {
    expect(await dedup(gateway.url, CHAT)).toBe('miss');
    expect(await dedup(gateway.url, CHAT)).toBe('cached');
    await server.restart(['-c', '1280']);
    // The identity is checked again before a request once the last check is 2 s old.
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    expect(await dedup(gateway.url, CHAT)).toBe('miss');
    expect(await dedup(gateway.url, CHAT)).toBe('cached');
  }, 60_000);

  it('a restart with the same model and context is the same identity: the window keeps serving', async () => {
    expect(await dedup(gateway.url, COMPLETION)).toBe('miss');
    // llama.cpp rounds the context up to a multiple of 256: -c 1200 is the 1280 already running.
    await server.restart(['-c', '1200']);
    expect(await nCtx(gateway.url)).toBe(1280);
    expect(await dedup(gateway.url, COMPLETION)).toBe('cached');
  }, 60_000);
});
