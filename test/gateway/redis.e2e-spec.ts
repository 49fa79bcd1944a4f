import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { postJson, send, startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';
import { redisServerMissing, startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';

/**
 * Two gateway replicas sharing their answer window through a Redis this suite
 * starts for itself (`redis-server` on its own port, never the machine's
 * 6379). Prompts are unique per run all the same.
 */

describe('two gateways sharing the answer window through --redis', () => {
  let redis: OwnedRedis | undefined;
  let a: GatewayUnderTest;
  let b: GatewayUnderTest;
  beforeAll(async () => {
    const missing = redisServerMissing();
    if (missing) throw new Error(missing);
    redis = await startOwnedRedis();
    const flags = ['--redis', redis.url, '--dedup-window', '120'];
    a = await startGateway({ flags, mock: { latencyMs: 50 } });
    b = await startGateway({ flags: [...flags, '--platform', 'fastify'], provider: a.provider });
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
    await redis?.close();
  });

  /** A's flight is forgotten only once its answer is written to the window (here: Redis). */
  async function untilWritten(gateway: GatewayUnderTest): Promise<void> {
    let inFlight = -1;
    const poll = async () => {
      inFlight = (await send(`${gateway.gatewayUrl}/health`)).json.dedup.inFlight;
    };
    await poll();
    const deadline = Date.now() + 5000;
    while (inFlight !== 0) {
      if (Date.now() > deadline) throw new Error('the answer was not written to the window within 5 s');
      await poll();
    }
  }

  it('a request to A, then the same request to B: B answers from the shared window, the provider saw 1 call', async () => {
    const before = a.provider.stats().total;
    const body = { model: 'mock-model', messages: [{ role: 'user', content: uniquePrompt('shared window') }] };
    const headers = { authorization: 'Bearer sk-shared-tenant' };
    const first = await postJson(`${a.gatewayUrl}/v1/chat/completions`, body, headers);
    expect(first.status).toBe(200);
    expect(first.headers.get('x-orchestrator-dedup')).toBe('miss');
    await untilWritten(a);

    const second = await postJson(`${b.gatewayUrl}/v1/chat/completions`, body, headers);
    expect(second.status).toBe(200);
    expect(second.headers.get('x-orchestrator-dedup')).toBe('cached');
    expect(second.json).toEqual(first.json);
    expect(a.provider.stats().total - before).toBe(1);

    // Through the official SDK too.
    const sdk = await new OpenAI({ baseURL: `${b.gatewayUrl}/v1`, apiKey: 'sk-shared-tenant' }).chat.completions
      .create(body as OpenAI.ChatCompletionCreateParamsNonStreaming)
      .withResponse();
    expect(sdk.response.headers.get('x-orchestrator-dedup')).toBe('cached');
    expect(sdk.data.id).toBe(first.json.id);

    // Another tenant does not get it.
    const other = await postJson(`${b.gatewayUrl}/v1/chat/completions`, body, {
      authorization: 'Bearer sk-other-tenant',
    });
    expect(other.headers.get('x-orchestrator-dedup')).toBe('miss');
    expect(other.json.id).not.toBe(first.json.id);
    expect(a.provider.stats().total - before).toBe(2);
  });

  it('a stream finished on A is replayed as a stream by B', async () => {
    const before = a.provider.stats().total;
    const prompt = uniquePrompt('shared stream with a few words');
    const openaiA = new OpenAI({ baseURL: `${a.gatewayUrl}/v1`, apiKey: 'sk-shared-tenant' });
    const openaiB = new OpenAI({ baseURL: `${b.gatewayUrl}/v1`, apiKey: 'sk-shared-tenant' });
    const params = {
      model: 'mock-model',
      messages: [{ role: 'user' as const, content: prompt }],
      stream: true as const,
    };
    const collect = async (client: OpenAI) => {
      const { data, response } = await client.chat.completions.create(params).withResponse();
      let text = '';
      for await (const chunk of data) text += chunk.choices[0]?.delta.content ?? '';
      return { text, outcome: response.headers.get('x-orchestrator-dedup') };
    };
    expect(await collect(openaiA)).toEqual({ text: `Echo: ${prompt}`, outcome: 'miss' });
    await untilWritten(a);
    expect(await collect(openaiB)).toEqual({ text: `Echo: ${prompt}`, outcome: 'cached' });
    expect(a.provider.stats().total - before).toBe(1);
  });
});
