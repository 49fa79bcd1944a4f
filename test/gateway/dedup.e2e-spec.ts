import { afterEach, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { hashCredential } from '../../apps/mock-provider/src/index.js';
import { PLATFORMS } from '../support/platforms.js';
import { countingFetch, startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';

/**
 * Deduplication as a paying user sees it: identical requests that arrive
 * together cost one provider call, through the official openai SDK.
 */

const LATENCY_MS = 300;

describe.each(PLATFORMS)('dedup through the gateway on %s', (platform) => {
  let g: GatewayUnderTest | undefined;
  afterEach(async () => {
    await g?.close();
    g = undefined;
  });

  const client = (gateway: GatewayUnderTest, apiKey = 'sk-tenant-a', fetch?: typeof globalThis.fetch) =>
    new OpenAI({ baseURL: `${gateway.gatewayUrl}/v1`, apiKey, ...(fetch ? { fetch } : {}) });

  it('200 identical concurrent chat requests make exactly 1 provider call; every client gets the same answer', async () => {
    g = await startGateway({ flags: ['--platform', platform], mock: { latencyMs: LATENCY_MS } });
    const counter = countingFetch();
    const openai = client(g, 'sk-tenant-a', counter.fetch);
    const prompt = uniquePrompt('herd');
    const params = { model: 'mock-model', messages: [{ role: 'user' as const, content: prompt }] };

    const results = await Promise.all(
      Array.from({ length: 200 }, () => openai.chat.completions.create(params).withResponse()),
    );

    expect(g.provider.stats().total).toBe(1);
    expect(g.provider.stats().byRoute).toEqual({ '/v1/chat/completions': 1 });
    expect(counter.attempts()).toBe(200); // no SDK retries either
    const ids = new Set(results.map((r) => r.data.id));
    expect(ids.size).toBe(1);
    expect([...ids][0]).toBe('chatcmpl-mock-1');
    expect(new Set(results.map((r) => JSON.stringify(r.data))).size).toBe(1);
    expect(results[0].data.choices[0].message.content).toBe(`Echo: ${prompt}`);
    const outcomes = results.map((r) => r.response.headers.get('x-orchestrator-dedup'));
    expect(outcomes.filter((o) => o === 'miss')).toHaveLength(1);
    // On a cold, busy 2-core machine the last of 200 requests can arrive after the 300 ms call ended:
    // it is then answered from the window. Either way it cost no call.
    expect(outcomes.filter((o) => o === 'joined' || o === 'cached')).toHaveLength(199);
    expect(outcomes.filter((o) => o === 'joined').length).toBeGreaterThan(0);

    // A retry after the answer is in: served from the window, still 1 call.
    const again = await openai.chat.completions.create(params).withResponse();
    expect(again.response.headers.get('x-orchestrator-dedup')).toBe('cached');
    expect(again.data.id).toBe('chatcmpl-mock-1');
    expect(g.provider.stats().total).toBe(1);
  });

  it('two API keys with the same prompt make 2 provider calls, each with its own answer and its own key upstream', async () => {
    g = await startGateway({ flags: ['--platform', platform], mock: { latencyMs: LATENCY_MS } });
    const prompt = uniquePrompt('tenants');
    const params = { model: 'mock-model', messages: [{ role: 'user' as const, content: prompt }] };
    const [a1, b1, a2, b2] = await Promise.all([
      client(g, 'sk-tenant-a').chat.completions.create(params),
      client(g, 'sk-tenant-b').chat.completions.create(params),
      client(g, 'sk-tenant-a').chat.completions.create(params),
      client(g, 'sk-tenant-b').chat.completions.create(params),
    ]);
    expect(g.provider.stats().total).toBe(2);
    expect(a1.id).not.toBe(b1.id);
    expect(a2.id).toBe(a1.id);
    expect(b2.id).toBe(b1.id);
    const hashes = g.provider
      .calls()
      .map((c) => c.authHash)
      .sort();
    expect(hashes).toEqual([hashCredential('sk-tenant-a'), hashCredential('sk-tenant-b')].sort());
  });

  it('20 identical streaming requests share 1 provider stream and every client receives the full text', async () => {
    g = await startGateway({
      flags: ['--platform', platform],
      mock: { latencyMs: LATENCY_MS, streamChunkDelayMs: 20 },
    });
    const openai = client(g);
    const prompt = uniquePrompt('a streamed herd with several words in it');
    const texts = await Promise.all(
      Array.from({ length: 20 }, async () => {
        const stream = await openai.chat.completions.create({
          model: 'mock-model',
          messages: [{ role: 'user', content: prompt }],
          stream: true,
          stream_options: { include_usage: true },
        });
        let text = '';
        let finish: string | null = null;
        let usage = false;
        for await (const chunk of stream) {
          for (const choice of chunk.choices) {
            text += choice.delta.content ?? '';
            finish ??= choice.finish_reason;
          }
          if (chunk.usage) usage = true;
        }
        return { text, finish, usage };
      }),
    );
    expect(g.provider.stats().total).toBe(1);
    expect(g.provider.calls()).toMatchObject([{ route: '/v1/chat/completions', stream: true, outcome: 'ok' }]);
    for (const t of texts) expect(t).toEqual({ text: `Echo: ${prompt}`, finish: 'stop', usage: true });
  });

  it('a large body sent again is answered from the window by its bytes, never for another body or another key', async () => {
    g = await startGateway({ flags: ['--platform', platform], mock: { latencyMs: 0 } });
    const document = `${uniquePrompt('a pasted document')} ${'lorem ipsum '.repeat(17_000)}`;
    // The same length, one byte changed 30% in: where the gateway's fingerprint of a kept body does not look.
    const at = Math.floor(document.length * 0.3);
    const edited = `${document.slice(0, at)}#${document.slice(at + 1)}`;
    const ask = (apiKey: string, content: string) =>
      client(g!, apiKey)
        .chat.completions.create({ model: 'mock-model', messages: [{ role: 'user', content }] })
        .withResponse();
    const outcome = (r: Awaited<ReturnType<typeof ask>>) => [r.response.headers.get('x-orchestrator-dedup'), r.data.id];

    expect(outcome(await ask('sk-tenant-a', document))).toEqual(['miss', 'chatcmpl-mock-1']);
    // The second time its bytes are kept; the third finds them by comparison instead of hashing.
    expect(outcome(await ask('sk-tenant-a', document))).toEqual(['cached', 'chatcmpl-mock-1']);
    expect(outcome(await ask('sk-tenant-a', document))).toEqual(['cached', 'chatcmpl-mock-1']);
    const other = await ask('sk-tenant-a', edited);
    expect(outcome(other)).toEqual(['miss', 'chatcmpl-mock-2']);
    expect(other.data.choices[0].message.content).toBe(`Echo: ${edited}`);
    expect(outcome(await ask('sk-tenant-b', document))).toEqual(['miss', 'chatcmpl-mock-3']);
    expect(outcome(await ask('sk-tenant-a', edited))).toEqual(['cached', 'chatcmpl-mock-2']);
    expect(outcome(await ask('sk-tenant-a', document))).toEqual(['cached', 'chatcmpl-mock-1']);
    expect(g.provider.stats().total).toBe(3);
  });

  it('streams replayed from the window stay byte for byte while the window lets others go and their memory is used again', async () => {
    g = await startGateway({
      flags: ['--platform', platform, '--window-max-bytes', String(1024 * 1024)],
      mock: { latencyMs: 0, streamChunkDelayMs: 0 },
    });
    const url = `${g.gatewayUrl}/v1/chat/completions`;
    const ask = async (content: string) => {
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer sk-tenant-a' },
        body: JSON.stringify({ model: 'mock-model', stream: true, messages: [{ role: 'user', content }] }),
      });
      return { outcome: response.headers.get('x-orchestrator-dedup'), text: await response.text() };
    };
    // Streams of about 170 KB: the 1 MiB window keeps the last five, and each one stored lets an older one go.
    const prompts = Array.from(
      { length: 12 },
      (_, i) => `${uniquePrompt(`stream ${i}`)} ${Array.from({ length: 700 }, (_, w) => `w${i}-${w}`).join(' ')}`,
    );
    const originals: string[] = [];
    for (let i = 0; i < prompts.length; i++) {
      // The next stream is led while the two before it are replayed from the window.
      const replayed = [i - 1, i - 2].filter((k) => k >= 0);
      const [led, ...replays] = await Promise.all([ask(prompts[i]), ...replayed.map((k) => ask(prompts[k]))]);
      expect(led.outcome).toBe('miss');
      expect(led.text.length).toBeGreaterThan(100_000);
      expect(led.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
      originals[i] = led.text;
      replays.forEach((replay, j) => {
        expect(replay.outcome).toBe('cached');
        expect(replay.text === originals[replayed[j]]).toBe(true);
      });
    }
    expect(g.provider.stats().total).toBe(prompts.length);
  });

  it('with --no-dedup, 200 identical concurrent requests make 200 provider calls', async () => {
    g = await startGateway({
      flags: ['--platform', platform, '--no-dedup', '--concurrency', '256'],
      mock: { latencyMs: LATENCY_MS },
    });
    const openai = client(g);
    const params = { model: 'mock-model', messages: [{ role: 'user' as const, content: uniquePrompt('no dedup') }] };
    const results = await Promise.all(
      Array.from({ length: 200 }, () => openai.chat.completions.create(params).withResponse()),
    );
    expect(g.provider.stats().total).toBe(200);
    expect(new Set(results.map((r) => r.data.id)).size).toBe(200);
    expect(results.every((r) => r.response.headers.get('x-orchestrator-dedup') === null)).toBe(true);
  });
});
