import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { startLlamaServer, type LlamaServer } from '../support/llama-server.js';
import { gatewayInFront, observe, type GatewayInFront } from './support.js';

/**
 * Long work is not an outage: two real llama-servers of four slots each, and generations longer than the gateway's
 * `--timeout`. Each one that runs out of time is the request's own (its budget is spent): it is not tried again on
 * the other server, and neither breaker opens, so an unrelated short request is answered as usual.
 */

const completion = (prompt: string, n: number) => ({ prompt, n_predict: n, ignore_eos: true, temperature: 0 });

describe('generations longer than --timeout on two llama-servers', () => {
  let servers: LlamaServer[] = [];
  let gateway: GatewayInFront | undefined;

  beforeAll(async () => {
    // Four slots of 2,048 tokens each: room for a 2,000-token generation in every slot.
    servers = await Promise.all(
      [0, 1].map(() => startLlamaServer({ ctx: 8192, args: ['--parallel', '4'], allowExternal: false })),
    );
  }, 60_000);
  afterEach(async () => {
    await gateway?.close();
    gateway = undefined;
  });
  afterAll(async () => {
    for (const server of servers) await server.close();
  });

  // 2,000 tokens take about twice the 1 s limit even alone in a server: every generation outlives its time limit.
  it('40 distinct 2,000-token requests with --timeout 1: never a breaker refusal; both breakers stay closed', async () => {
    gateway = await gatewayInFront(servers[0].url, ['--upstream', servers[1].url, '--timeout', '1']);
    const url = gateway.url;
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        observe(url, { path: '/completion', body: completion(`Long story number ${i}:`, 2000) }).then((r) => ({
          status: r.status,
          text: r.text.slice(0, 300),
        })),
      ),
    );
    const statuses = answers.map((a) => a.status);
    // Each request is answered, or runs out of its own time, or (on a busy machine, where slots turn over slowly) waits
    // past the queue's limit (429, retryable): never a breaker refusal (503) or a made-up upstream failure (502).
    expect(answers.filter((a) => a.status !== 200 && a.status !== 504 && a.status !== 429)).toEqual([]);
    // The time limit is what this exercises.
    expect(statuses.filter((s) => s === 504).length).toBeGreaterThan(0);
    const health = JSON.parse((await observe(url, { path: '/health' })).text) as {
      upstreams: { name: string; breaker: string }[];
    };
    expect(health.upstreams).toHaveLength(2);
    for (const upstream of health.upstreams) expect(upstream.breaker).toBe('closed');
    const short = await observe(url, { path: '/completion', body: completion('A short one:', 8) });
    expect(short.status).toBe(200);
  }, 180_000);
});
