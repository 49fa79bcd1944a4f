import { afterEach, describe, expect, it } from '@jest/globals';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { APIError } from 'openai';
import { PLATFORMS } from '../support/platforms.js';
import {
  countingFetch,
  secondsSince,
  send,
  startGateway,
  uniquePrompt,
  type GatewayUnderTest,
} from '../support/gateway-harness.js';

/**
 * What a provider outage, hang, reset or broken stream looks like through the
 * gateway, to the official SDKs with their defaults (maxRetries 2, 10-minute
 * timeout) untouched: every test is built so that the gateway, not the SDK's
 * timeout, ends each request. The SDK's attempts are counted through its
 * `fetch` option, the provider's calls by the mock itself.
 */

const CHAT = '/v1/chat/completions';

let g: GatewayUnderTest | undefined;
afterEach(async () => {
  await g?.close();
  g = undefined;
});

function openaiClient(gateway: GatewayUnderTest, fetch?: typeof globalThis.fetch): OpenAI {
  return new OpenAI({ baseURL: `${gateway.gatewayUrl}/v1`, apiKey: 'sk-resilience', ...(fetch ? { fetch } : {}) });
}

const chatParams = (label: string) => ({
  model: 'mock-model',
  messages: [{ role: 'user' as const, content: uniquePrompt(label) }],
});

/** The error a promise rejects with (fails the test if it resolves). */
async function failure(promise: Promise<unknown>): Promise<any> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the request to fail, but it succeeded');
}

const chatCalls = (gateway: GatewayUnderTest) => gateway.provider.stats().byRoute[CHAT] ?? 0;

describe('provider outage (503s): the breaker opens and refusals stop the SDK from retrying', () => {
  it('costs the provider at most 5 calls, then refuses in one SDK attempt with circuit_open and retry-after', async () => {
    g = await startGateway({ mock: { latencyMs: 20 } });
    const counter = countingFetch();
    const openai = openaiClient(g, counter.fetch);
    g.provider.setMode('error503');

    const errors: any[] = [];
    const attempts: number[] = [];
    const callsAfter: number[] = [];
    for (let i = 0; i < 10; i++) {
      counter.reset();
      errors.push(await failure(openai.chat.completions.create(chatParams(`outage ${i}`))));
      attempts.push(counter.attempts());
      callsAfter.push(chatCalls(g));
    }

    // Every answer, relayed 503 or refusal, tells the SDK not to retry: one attempt per request.
    expect(attempts).toEqual(Array(10).fill(1));
    for (const error of errors) {
      expect(error).toBeInstanceOf(APIError);
      expect(error.status).toBe(503);
      expect(error.headers.get('x-should-retry')).toBe('false');
    }
    const firstRefusal = errors.findIndex((e) => e.code === 'circuit_open');
    expect(firstRefusal).toBeGreaterThan(0);
    expect(firstRefusal).toBeLessThanOrEqual(5);
    // Once open, every request is refused and the provider sees no more calls.
    for (const error of errors.slice(firstRefusal)) {
      expect(error.code).toBe('circuit_open');
      expect(error.type).toBe('circuit_open');
      expect(Number(error.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    }
    const total = callsAfter.at(-1)!;
    expect(total).toBeLessThanOrEqual(5);
    expect(callsAfter.slice(firstRefusal).every((n) => n === total)).toBe(true);
    expect(
      g.provider
        .calls()
        .filter((c) => c.route === CHAT)
        .every((c) => c.outcome === 'error503'),
    ).toBe(true);

    const health = await send(`${g.gatewayUrl}/health`);
    expect(health.json.upstream).toMatchObject({ breaker: 'open', state: 'unavailable' });
  });

  it('resumes once the provider recovers (--probe-interval 0.1), long before the open period ends', async () => {
    // An open period of an hour, longer than the test may take: traffic that resumes was let through by the health
    // probe, not by the open period running out.
    g = await startGateway({ flags: ['--probe-interval', '0.1', '--breaker-open', '3600'], mock: { latencyMs: 5 } });
    const openai = openaiClient(g);
    g.provider.setMode('error503');
    let refused: any;
    for (let i = 0; i < 10 && !refused; i++) {
      const error = await failure(openai.chat.completions.create(chatParams(`recovery ${i}`)));
      if (error.code === 'circuit_open') refused = error;
    }
    expect(refused?.code).toBe('circuit_open');

    g.provider.setMode('ok');
    let answer: OpenAI.ChatCompletion | undefined;
    while (!answer) {
      try {
        answer = await openai.chat.completions.create(chatParams('after recovery'));
      } catch (error) {
        expect((error as APIError).code).toBe('circuit_open');
        await new Promise((resolve) => setTimeout(resolve, 20)); // polling interval
      }
    }
    expect(answer.choices[0].message.content).toContain('after recovery');
    const health = await send(`${g.gatewayUrl}/health`);
    expect(health.json.upstream.breaker).toBe('closed');
  });
});

describe('hung provider: the gateway timeout turns a hang into a fast failure', () => {
  it('fails each client after --timeout 1 s with a 504 and no SDK retry; opens after 5; aborts the stuck upstream requests', async () => {
    // A long probe interval keeps the health probe (which would hang too) out of the in-flight count.
    g = await startGateway({ flags: ['--timeout', '1', '--probe-interval', '60'], mock: { latencyMs: 5 } });
    const counter = countingFetch();
    const openai = openaiClient(g, counter.fetch);
    g.provider.setMode('hang');

    const timed = await Promise.all(
      Array.from({ length: 5 }, async (_, i) => {
        const start = performance.now();
        const error = await failure(openai.chat.completions.create(chatParams(`hang ${i}`)));
        return { error, seconds: secondsSince(start) };
      }),
    );
    for (const { error, seconds } of timed) {
      expect(error).toBeInstanceOf(APIError);
      expect(error.status).toBe(504);
      expect(error.code).toBe('upstream_timeout');
      expect(error.headers.get('x-should-retry')).toBe('false');
      // Not before the gateway's time limit (the provider hangs for good: only that limit ends the request).
      expect(seconds).toBeGreaterThanOrEqual(0.9);
    }
    expect(counter.attempts()).toBe(5); // no SDK retries
    expect(chatCalls(g)).toBe(5); // and no gateway retry of a timeout

    // The timed-out upstream requests were really cancelled: the provider, still hanging, saw them go.
    await g.provider.waitFor((s) => s.inFlight === 0, 60_000);
    expect(g.provider.config().mode).toBe('hang');
    expect(g.provider.stats().droppedHungConnections).toBe(0);
    expect(
      g.provider
        .calls()
        .filter((c) => c.route === CHAT)
        .every((c) => c.finishedAt !== undefined),
    ).toBe(true);

    // Five consecutive timeouts opened the breaker: the next request is refused without reaching the provider (which
    // would hang it).
    counter.reset();
    const refused = await failure(openai.chat.completions.create(chatParams('hang after open')));
    expect(refused.status).toBe(503);
    expect(refused.code).toBe('circuit_open');
    expect(counter.attempts()).toBe(1);
    expect(chatCalls(g)).toBe(5);
  });
});

describe('connection reset by the provider', () => {
  it('makes at most 2 upstream attempts per request (the gateway retry), then an error the SDK does not retry', async () => {
    g = await startGateway({ mock: { latencyMs: 5 } });
    const counter = countingFetch();
    const openai = openaiClient(g, counter.fetch);
    g.provider.setMode('reset');
    for (let i = 0; i < 2; i++) {
      counter.reset();
      const before = chatCalls(g);
      const error = await failure(openai.chat.completions.create(chatParams(`reset ${i}`)));
      expect(error).toBeInstanceOf(APIError);
      // 502: the provider dropped the connection (not "the gateway failed").
      expect(error.status).toBe(502);
      expect(error.code).toBe('upstream_connection_error');
      expect(error.headers.get('x-should-retry')).toBe('false');
      expect(counter.attempts()).toBe(1);
      expect(chatCalls(g) - before).toBe(2);
      expect(error.message).not.toMatch(/node_modules|\bat .*\.(js|ts):\d+/);
    }
    expect(
      g.provider
        .calls()
        .filter((c) => c.route === CHAT)
        .every((c) => c.outcome === 'reset'),
    ).toBe(true);
    // The gateway itself is fine.
    g.provider.setMode('ok');
    const ok = await openai.chat.completions.create(chatParams('after resets'));
    expect(ok.choices[0].message.content).toContain('after resets');
  });
});

describe.each(PLATFORMS)('broken streams on %s', (platform) => {
  it('a stream the provider cuts mid-answer makes the openai SDK iteration throw (not a clean end)', async () => {
    g = await startGateway({ flags: ['--platform', platform], mock: { latencyMs: 5 } });
    g.provider.setMode('cutStream', { cutAfterChunks: 3 });
    const counter = countingFetch();
    const stream = await openaiClient(g, counter.fetch).chat.completions.create({
      ...chatParams('a long answer that will be cut after a few words'),
      stream: true,
    });
    let text = '';
    const error = await failure(
      (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      })(),
    );
    expect(error).toBeInstanceOf(APIError);
    expect(String(error.message)).toMatch(/interrupted/i);
    expect(text.length).toBeGreaterThan(0); // the chunks before the cut did arrive
    expect(counter.attempts()).toBe(1);
    expect(
      g.provider
        .calls()
        .filter((c) => c.route === CHAT)
        .map((c) => c.outcome),
    ).toEqual(['cut']);
  });

  it('the same cut reaches an Anthropic client in front of --provider openai as an error event the SDK raises', async () => {
    g = await startGateway({ flags: ['--platform', platform, '--provider', 'openai'], mock: { latencyMs: 5 } });
    g.provider.setMode('cutStream', { cutAfterChunks: 3 });
    const anthropic = new Anthropic({ baseURL: g.gatewayUrl, apiKey: 'sk-resilience' });
    const stream = await anthropic.messages.create({
      model: 'mock-model',
      max_tokens: 100,
      messages: [{ role: 'user', content: uniquePrompt('a long answer that will be cut after a few words') }],
      stream: true,
    });
    const types: string[] = [];
    const error = await failure(
      (async () => {
        for await (const event of stream) types.push(event.type);
      })(),
    );
    expect(error).toBeInstanceOf(Anthropic.APIError);
    expect(types).toContain('message_start');
    expect(types).not.toContain('message_stop');
    expect(
      g.provider
        .calls()
        .filter((c) => c.route === CHAT)
        .map((c) => c.outcome),
    ).toEqual(['cut']);
  });

  it('a stream that stalls longer than --timeout ends in an error event the SDK raises, and the upstream is cancelled', async () => {
    g = await startGateway({ flags: ['--platform', platform, '--timeout', '1'], mock: { latencyMs: 5 } });
    // The provider's second chunk would come after ten minutes, longer than the test may take: only the gateway's
    // stall limit can end this stream.
    g.provider.setMode('slowStream', { slowChunkDelayMs: 600_000 });
    const stream = await openaiClient(g).chat.completions.create({ ...chatParams('a slow stream'), stream: true });
    let chunks = 0;
    const error = await failure(
      (async () => {
        for await (const _chunk of stream) chunks++;
      })(),
    );
    expect(error).toBeInstanceOf(APIError);
    expect(String(error.message)).toMatch(/stalled|1000 ms/);
    expect(chunks).toBe(1); // the first chunk came at once, the second never within the limit
    await g.provider.waitFor((s) => s.inFlight === 0, 60_000);
    expect(
      g.provider
        .calls()
        .filter((c) => c.route === CHAT)
        .map((c) => c.outcome),
    ).toEqual(['client_closed']);
  });
});
