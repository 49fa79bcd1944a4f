import { afterEach, describe, expect, it } from '@jest/globals';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { waitFor } from '../support/platforms.js';
import { startMockProvider } from '../../apps/mock-provider/src/index.js';
import { postJson, send, startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';

/**
 * The breaker judges the provider as it really is, in the deployment most teams run: a pass-through gateway (no
 * provider key: each client's own key goes upstream) in front of a provider whose model list, like OpenAI's and
 * Anthropic's, needs a key. Its recovery probe gets a 401 there, which is the provider serving; and no caller, or
 * small group of callers, can open the breaker for the others while the provider answers.
 */

const chat = (content: string) => ({ model: 'mock-model', messages: [{ role: 'user', content }] });
const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const junk = () => Math.random().toString(36).slice(2, 12);
const MODEL_CALL = { openai: '/v1/chat/completions', anthropic: '/v1/messages' } as const;

let g: GatewayUnderTest | undefined;
afterEach(async () => {
  await g?.close();
  g = undefined;
});

/** A pass-through gateway (no provider key in its environment) in front of a provider that refuses keyless calls. */
async function passThrough(flags: string[] = []): Promise<GatewayUnderTest> {
  g = await startGateway({ flags: ['--retries', '0', ...flags], mock: { latencyMs: 5, requireKey: true } });
  return g;
}

const breakerState = async (gateway: GatewayUnderTest) =>
  (await send(`${gateway.gatewayUrl}/health`, { headers: bearer('sk-health') })).json.upstream.breaker as string;

describe.each(['openai', 'anthropic'] as const)(
  'pass-through %s gateway, the provider refusing keyless calls',
  (provider) => {
    /** One model call through the official SDK of that API: true when answered. */
    function client(gateway: GatewayUnderTest, key: string) {
      if (provider === 'openai') {
        const openai = new OpenAI({ baseURL: `${gateway.gatewayUrl}/v1`, apiKey: key, maxRetries: 0 });
        return (label: string) =>
          openai.chat.completions.create({
            model: 'mock-model',
            messages: [{ role: 'user', content: uniquePrompt(label) }],
          });
      }
      const anthropic = new Anthropic({ baseURL: gateway.gatewayUrl, apiKey: key, maxRetries: 0 });
      return (label: string) =>
        anthropic.messages.create({
          model: 'mock-model',
          max_tokens: 16,
          messages: [{ role: 'user', content: uniquePrompt(label) }],
        });
    }

    it('an outage costs at most 5 calls, refusals say the real open time, and the first probe after recovery (a 401) resumes traffic', async () => {
      const gateway = await passThrough(['--provider', provider, '--probe-interval', '0.1', '--breaker-open', '30']);
      const ask = client(gateway, 'sk-client-a');
      await ask('before the outage');

      gateway.provider.setMode('error503');
      const before = gateway.provider.stats().byRoute[MODEL_CALL[provider]] ?? 0;
      let refusal: { status?: number; headers?: Headers } | undefined;
      for (let i = 0; i < 12 && !refusal; i++) {
        const error = (await ask(`outage ${i}`).then(
          () => undefined,
          (e: unknown) => e,
        )) as { status?: number; headers?: Headers; code?: string; error?: unknown } | undefined;
        // OpenAI's SDK reads the code; Anthropic's error shape has none, only the refusal's message.
        if (
          error?.status === 503 &&
          (error.code === 'circuit_open' || /requests are refused/.test(JSON.stringify(error.error ?? {})))
        )
          refusal = error;
      }
      expect(refusal).toBeDefined();
      expect((gateway.provider.stats().byRoute[MODEL_CALL[provider]] ?? 0) - before).toBeLessThanOrEqual(5);
      expect(refusal!.headers!.get('x-should-retry')).toBe('false');
      // The real remaining open time (the probe may close it sooner, but cannot promise to), not a made-up second.
      expect(Number(refusal!.headers!.get('retry-after'))).toBeGreaterThan(20);

      const seq = gateway.provider.calls().at(-1)?.seq ?? 0;
      gateway.provider.setMode('ok');
      // The probe carries no key: the provider answers it 401, which is the provider serving again.
      await waitFor(
        () => gateway.provider.calls(seq).some((c) => c.route === '/v1/models' && c.status === 401),
        10_000,
        'a keyless probe answered 401',
      );
      // That probe closes the breaker: the very next request is answered (before the fix it was refused for 30 s and more).
      await ask('after recovery');
      expect(await breakerState(gateway)).toBe('closed');
    }, 60_000);
  },
);

describe('failing callers cannot open the breaker for the others while the provider answers', () => {
  /**
   * The victim's share of answers while `attack` runs in 8 loops: at least `victimRequests` requests, and on until
   * the attack has sent `attackRequests`.
   */
  async function victimShare(
    gateway: GatewayUnderTest,
    attack: (i: number) => Promise<number>,
    options: { warmVictim: boolean },
  ) {
    const victim = new OpenAI({ baseURL: `${gateway.gatewayUrl}/v1`, apiKey: 'sk-victim', maxRetries: 0 });
    const ask = (i: number) =>
      victim.chat.completions
        .create(chat(uniquePrompt(`victim ${i}`)) as OpenAI.ChatCompletionCreateParamsNonStreaming)
        .then(
          () => true,
          () => false,
        );
    if (options.warmVictim) for (let i = 0; i < 3; i++) expect(await ask(-1 - i)).toBe(true);
    let stop = false;
    let n = 0;
    const statuses: number[] = [];
    const loops = Array.from({ length: 8 }, async () => {
      while (!stop) statuses.push(await attack(n++));
    });
    let answered = 0;
    let asked = 0;
    while (asked < 100 || statuses.length < 200) if (await ask(asked++)) answered++;
    stop = true;
    await Promise.all(loops);
    return { share: answered / asked, statuses };
  }

  const failing = (gateway: GatewayUnderTest, i: number, headers: Record<string, string>) =>
    postJson(
      `${gateway.gatewayUrl}/v1/chat/completions`,
      chat(uniquePrompt(`mock:fail-500 poison ${i}`)),
      headers,
    ).then((r) => r.status);

  it('one sybil caller (a new key on every request): the victim keeps >= 95% answered', async () => {
    const gateway = await passThrough();
    const { share, statuses } = await victimShare(gateway, (i) => failing(gateway, i, bearer(`sk-sybil-${junk()}`)), {
      warmVictim: true,
    });
    expect(statuses.filter((s) => s === 503)).toHaveLength(0);
    expect(share).toBeGreaterThanOrEqual(0.95);
    expect(await breakerState(gateway)).toBe('closed');
  }, 120_000);

  it.each([2, 4, 6])(
    '%i colluding keys with standing, in bursts of 5 failures each: the victim keeps >= 95% answered',
    async (count) => {
      const gateway = await passThrough();
      const keys = Array.from({ length: count }, (_, k) => `sk-colluder-${k}`);
      // Each key earns standing first: answered once.
      for (const key of keys)
        expect(
          (await postJson(`${gateway.gatewayUrl}/v1/chat/completions`, chat(uniquePrompt(key)), bearer(key))).status,
        ).toBe(200);
      const burst = async (i: number) => {
        const key = keys[i % keys.length];
        const statuses = await Promise.all(
          Array.from({ length: 5 }, (_, j) => failing(gateway, i * 5 + j, bearer(key))),
        );
        return statuses.find((s) => s !== 500) ?? 500;
      };
      const { share, statuses } = await victimShare(gateway, burst, { warmVictim: true });
      expect(statuses.filter((s) => s === 503)).toHaveLength(0);
      expect(share).toBeGreaterThanOrEqual(0.95);
      expect(await breakerState(gateway)).toBe('closed');
    },
    120_000,
  );

  it.each([
    ['a pass-through OpenAI gateway', [] as string[]],
    ['a llama.cpp gateway', ['--provider', 'llama']],
  ])(
    'an attack that starts with %s, before anyone has been answered: the victim keeps >= 95%% answered',
    async (_what, flags) => {
      const gateway = await passThrough(flags);
      const { share, statuses } = await victimShare(gateway, (i) => failing(gateway, i, bearer(`sk-sybil-${junk()}`)), {
        warmVictim: false,
      });
      expect(statuses.filter((s) => s === 503)).toHaveLength(0);
      expect(share).toBeGreaterThanOrEqual(0.95);
      expect(await breakerState(gateway)).toBe('closed');
    },
    120_000,
  );
});

describe('long work is not an upstream failure', () => {
  it('generations longer than --timeout on two upstreams: one call each (no failover), 504s, both breakers stay closed', async () => {
    const providers = [await startMockProvider({ latencyMs: 5 }), await startMockProvider({ latencyMs: 5 })];
    try {
      // Two upstreams in one pool, the gateway's time limit 1 s.
      g = await startGateway({
        provider: providers[0],
        flags: ['--retries', '0', '--timeout', '1', ...providers.flatMap((p) => ['--upstream', p.url])],
      });
      const url = `${g.gatewayUrl}/v1/chat/completions`;
      const slowCalls = () =>
        providers.reduce((sum, p) => sum + p.calls().filter((c) => c.route === '/v1/chat/completions').length, 0);
      const statuses = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          postJson(url, chat(uniquePrompt(`mock:slow-5000 long ${i}`)), bearer(`sk-long-${i % 3}`)).then(
            (r) => r.status,
          ),
        ),
      );
      expect(statuses).toEqual(Array(12).fill(504));
      // Each request's time budget was spent on one upstream: not tried again on the other.
      expect(slowCalls()).toBe(12);
      const health = await send(`${g.gatewayUrl}/health`, { headers: bearer('sk-health') });
      for (const upstream of health.json.upstreams as { breaker: string }[]) expect(upstream.breaker).toBe('closed');
      // An unrelated short request is answered at once, by either upstream.
      expect((await postJson(url, chat(uniquePrompt('short')), bearer('sk-short'))).status).toBe(200);
    } finally {
      await g?.close();
      g = undefined;
      for (const provider of providers) await provider.close();
    }
  }, 60_000);
});
