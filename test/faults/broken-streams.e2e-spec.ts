import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { PLATFORMS } from '../support/platforms.js';
import { postJson, sseData, startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';

/**
 * A stream that ends without its end marker, or that carries an error event,
 * is an error on every pass-through path: every caller (joined ones too) sees
 * it as one in its own API's format, and it is never kept in the window: the
 * next identical request is a new call. Likewise a 200 whose body is an error.
 */

type Mode = 'truncStream' | 'errorStream';
const MODES: Mode[] = ['truncStream', 'errorStream'];

async function drainOpenAI(stream: AsyncIterable<unknown>): Promise<unknown> {
  try {
    for await (const _ of stream) void _;
    return undefined;
  } catch (error) {
    return error;
  }
}

describe.each(PLATFORMS)('broken streams are errors, never cached (%s)', (platform) => {
  describe('OpenAI client, --provider openai (pass-through)', () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({ flags: ['--platform', platform, '--provider', 'openai', '--retries', '0'] });
    });
    afterAll(() => g?.close());

    it.each(MODES)(
      '%s: the SDK iteration throws for the leader and a joiner, and the next request is a new call',
      async (mode) => {
        g.provider.setMode(mode, { cutAfterChunks: 2 });
        const client = new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: 'sk-broken', maxRetries: 0 });
        const params = {
          model: 'mock-model',
          stream: true as const,
          messages: [{ role: 'user' as const, content: uniquePrompt(`${mode} a b c d e f`) }],
        };
        const before = g.provider.stats().total;
        const [leader, joiner] = await Promise.all([
          client.chat.completions.create(params),
          client.chat.completions.create(params),
        ]);
        const errors = await Promise.all([drainOpenAI(leader), drainOpenAI(joiner)]);
        for (const error of errors) expect(error).toBeInstanceOf(Error);
        expect(g.provider.stats().total - before).toBe(1);

        g.provider.setMode('ok');
        const again = await client.chat.completions.create(params).withResponse();
        expect(again.response.headers.get('x-orchestrator-dedup')).toBe('miss');
        expect(await drainOpenAI(again.data)).toBeUndefined();
        expect(g.provider.stats().total - before).toBe(2);
      },
    );

    it('error200: the 200 error body reaches the client as it is, and is not kept', async () => {
      g.provider.setMode('error200');
      const body = { model: 'mock-model', messages: [{ role: 'user', content: uniquePrompt('error200') }] };
      const first = await postJson(`${g.gatewayUrl}/v1/chat/completions`, body);
      expect(first.json).toEqual({
        error: { code: 500, message: 'The mock provider failed (error200 mode).', type: 'server_error' },
      });
      g.provider.setMode('ok');
      const second = await postJson(`${g.gatewayUrl}/v1/chat/completions`, body);
      expect(second.status).toBe(200);
      expect(second.headers.get('x-orchestrator-dedup')).toBe('miss');
      expect(second.json.choices[0].message.content).toContain('Echo:');
    });
  });

  describe('--provider llama: native /completion and /v1/chat/completions (pass-through)', () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({ flags: ['--platform', platform, '--provider', 'llama', '--retries', '0'] });
    });
    afterAll(() => g?.close());

    it.each(MODES)('%s on /completion: the stream ends with an error event and is not replayed', async (mode) => {
      g.provider.setMode(mode, { cutAfterChunks: 2 });
      const body = { prompt: uniquePrompt(`${mode} native a b c d e`), stream: true };
      const first = await postJson(`${g.gatewayUrl}/completion`, body);
      const events = sseData(first.text).map((data) => JSON.parse(data));
      expect(events.at(-1)).toHaveProperty('error');
      expect(events.some((event) => event.stop === true)).toBe(false);
      g.provider.setMode('ok');
      const second = await postJson(`${g.gatewayUrl}/completion`, body);
      expect(second.headers.get('x-orchestrator-dedup')).toBe('miss');
      expect(
        sseData(second.text)
          .map((data) => JSON.parse(data))
          .at(-1),
      ).toMatchObject({ stop: true });
    });

    it.each(MODES)(
      '%s on /v1/chat/completions: the openai SDK throws, and the next request is a new call',
      async (mode) => {
        g.provider.setMode(mode, { cutAfterChunks: 2 });
        const client = new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: 'sk-broken', maxRetries: 0 });
        const params = {
          model: 'any',
          stream: true as const,
          messages: [{ role: 'user' as const, content: uniquePrompt(`${mode} llama chat a b c d`) }],
        };
        expect(await drainOpenAI(await client.chat.completions.create(params))).toBeInstanceOf(Error);
        g.provider.setMode('ok');
        const again = await client.chat.completions.create(params).withResponse();
        expect(again.response.headers.get('x-orchestrator-dedup')).toBe('miss');
        expect(await drainOpenAI(again.data)).toBeUndefined();
      },
    );
  });

  describe('Anthropic client, --provider anthropic (pass-through)', () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({ flags: ['--platform', platform, '--provider', 'anthropic', '--retries', '0'] });
    });
    afterAll(() => g?.close());

    it.each(MODES)('%s: the Anthropic SDK stream throws, and the next request is a new call', async (mode) => {
      g.provider.setMode(mode, { cutAfterChunks: 2 });
      const client = new Anthropic({ baseURL: g.gatewayUrl, apiKey: 'sk-ant-broken', maxRetries: 0 });
      const params = {
        model: 'claude-mock',
        max_tokens: 50,
        messages: [{ role: 'user' as const, content: uniquePrompt(`${mode} anthropic a b c d`) }],
      };
      const before = g.provider.stats().total;
      let failure: unknown;
      try {
        for await (const _ of client.messages.stream(params)) void _;
      } catch (error) {
        failure = error;
      }
      expect(failure).toBeInstanceOf(Error);
      g.provider.setMode('ok');
      const again = client.messages.stream(params);
      const final = await again.finalMessage();
      expect(final.content[0]).toMatchObject({ type: 'text' });
      expect(g.provider.stats().total - before).toBe(2);
    });
  });
});
