import { afterEach, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';
import { scrape, valueOf, type Sample } from '../support/metrics-text.js';

/**
 * The gateway's Prometheus metrics under a herd, an outage and a queue, each
 * read as exact deltas between two scrapes, with the official SDK as client
 * and the simulated provider counting every call it gets.
 */

const CHAT = '/v1/chat/completions';
const METRICS = '/orchestrator/metrics';

let g: GatewayUnderTest | undefined;
afterEach(async () => {
  await g?.close();
  g = undefined;
});

const client = (gateway: GatewayUnderTest, apiKey = 'sk-metrics') =>
  new OpenAI({ baseURL: `${gateway.gatewayUrl}/v1`, apiKey, maxRetries: 0 });
const chatCalls = (gateway: GatewayUnderTest) => gateway.provider.stats().byRoute[CHAT] ?? 0;
const metricsOf = (gateway: GatewayUnderTest, headers?: Record<string, string>) =>
  scrape(`${gateway.gatewayUrl}${METRICS}`, headers);
const delta = (before: Sample[], after: Sample[], name: string, labels: Record<string, string> = {}) =>
  valueOf(after, name, labels) - valueOf(before, name, labels);

async function waitFor(check: () => Promise<boolean>, what: string, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20)); // polling interval
  }
}

describe('gateway metrics', () => {
  it('a herd of 50 identical requests: 1 miss, 49 joined or cached, 49 calls saved, 1 upstream call, tokens billed once', async () => {
    g = await startGateway({ mock: { latencyMs: 400 } });
    const openai = client(g);
    const before = await metricsOf(g);
    const params = {
      model: 'gpt-4o-mini',
      temperature: 0,
      messages: [{ role: 'user' as const, content: uniquePrompt('herd') }],
    };
    const answers = await Promise.all(Array.from({ length: 50 }, () => openai.chat.completions.create(params)));
    const usage = answers[0].usage!;
    // The request lines and token counts are written when each response is over, which may be after its client has
    // read it: wait for all 50 to be counted.
    const promptTokensCounted = async () => {
      const now = await metricsOf(g!);
      const labels = { direction: 'in', model: 'gpt-4o-mini' };
      return (
        delta(before, now, 'gateway_tokens_total', labels) + delta(before, now, 'gateway_tokens_saved_total', labels)
      );
    };
    await waitFor(
      async () => (await promptTokensCounted()) >= 50 * usage.prompt_tokens,
      'the 50 answers to be counted',
    );
    const after = await metricsOf(g);

    expect(chatCalls(g)).toBe(1);
    expect(delta(before, after, 'orchestrator_requests_total', { upstream: 'upstream', outcome: 'miss' })).toBe(1);
    // Nothing holds the provider's answer until the herd is in: on a busy machine (two busy processes beside, 25 of
    // 49 measured) the later ones arrive after the 400 ms call ended and are answered from the window. Either way
    // each is counted once, as a request that cost no call.
    const joined = delta(before, after, 'orchestrator_requests_total', { upstream: 'upstream', outcome: 'joined' });
    expect(joined).toBeGreaterThan(0);
    expect(
      joined + delta(before, after, 'orchestrator_requests_total', { upstream: 'upstream', outcome: 'cached' }),
    ).toBe(49);
    expect(delta(before, after, 'orchestrator_upstream_calls_saved_total', { upstream: 'upstream' })).toBe(49);
    expect(delta(before, after, 'orchestrator_upstream_calls_total', { upstream: 'upstream', result: 'ok' })).toBe(1);
    expect(delta(before, after, 'orchestrator_upstream_latency_seconds_count', { upstream: 'upstream' })).toBe(1);
    // The mock took 400 ms: the one observation is above the 0.25 s bucket.
    expect(
      delta(before, after, 'orchestrator_upstream_latency_seconds_bucket', { upstream: 'upstream', le: '0.25' }),
    ).toBe(0);
    expect(delta(before, after, 'gateway_tokens_total', { direction: 'in', model: 'gpt-4o-mini' })).toBe(
      usage.prompt_tokens,
    );
    expect(delta(before, after, 'gateway_tokens_total', { direction: 'out', model: 'gpt-4o-mini' })).toBe(
      usage.completion_tokens,
    );
    expect(delta(before, after, 'gateway_tokens_saved_total', { direction: 'in', model: 'gpt-4o-mini' })).toBe(
      49 * usage.prompt_tokens,
    );

    // Once more, later: from the window.
    await openai.chat.completions.create(params);
    const later = await metricsOf(g);
    expect(delta(after, later, 'orchestrator_requests_total', { outcome: 'cached' })).toBe(1);
    expect(chatCalls(g)).toBe(1);
  });

  it('an outage: the breaker transition is counted, its state gauge reads open, refusals are counted by reason', async () => {
    g = await startGateway({
      flags: ['--breaker-failures', '3', '--retries', '0', '--breaker-open', '60'],
      mock: { latencyMs: 5 },
    });
    const openai = client(g);
    const before = await metricsOf(g);
    expect(valueOf(before, 'orchestrator_breaker_state', { name: 'upstream' })).toBe(0);
    g.provider.setMode('error503');
    for (let i = 0; i < 3; i++) {
      await expect(
        openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: uniquePrompt('outage') }] }),
      ).rejects.toMatchObject({ status: 503 });
    }
    for (let i = 0; i < 4; i++) {
      await expect(
        openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: uniquePrompt('refused') }] }),
      ).rejects.toMatchObject({
        status: 503,
        code: 'circuit_open',
      });
    }
    const after = await metricsOf(g);
    expect(chatCalls(g)).toBe(3);
    expect(delta(before, after, 'orchestrator_upstream_calls_total', { result: 'error' })).toBe(3);
    expect(
      delta(before, after, 'orchestrator_breaker_transitions_total', { name: 'upstream', from: 'closed', to: 'open' }),
    ).toBe(1);
    expect(delta(before, after, 'orchestrator_breaker_transitions_total')).toBe(1);
    expect(valueOf(after, 'orchestrator_breaker_state', { name: 'upstream' })).toBe(2);
    expect(delta(before, after, 'orchestrator_refusals_total', { upstream: 'upstream', reason: 'circuit_open' })).toBe(
      4,
    );
    // The health probe sees the provider back, and the breaker closes: counted as its own transition.
    g.provider.setMode('ok');
    await waitFor(
      async () => valueOf(await metricsOf(g!), 'orchestrator_breaker_state', { name: 'upstream' }) === 0,
      'the breaker to close',
    );
    const recovered = await metricsOf(g);
    expect(delta(before, recovered, 'orchestrator_breaker_transitions_total', { from: 'open' })).toBe(1);
  });

  it('a queue: the queued gauge shows who waits, the wait histogram counts every slot, a full queue is a refusal', async () => {
    g = await startGateway({
      flags: ['--concurrency', '1', '--queue-size', '3', '--no-dedup'],
      mock: { latencyMs: 300 },
    });
    const openai = client(g);
    const before = await metricsOf(g);
    const send = (i: number) =>
      openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: uniquePrompt(`queue-${i}`) }] });
    const running = [0, 1, 2, 3].map(send);
    await waitFor(
      async () => valueOf(await metricsOf(g!), 'orchestrator_queued', { limiter: 'upstream' }) === 3,
      '3 requests queued',
    );
    const during = await metricsOf(g);
    expect(valueOf(during, 'orchestrator_in_flight', { limiter: 'upstream' })).toBe(1);
    expect(valueOf(during, 'orchestrator_queue_size', { limiter: 'upstream' })).toBe(3);
    // The fifth finds the queue full.
    await expect(send(4)).rejects.toMatchObject({ status: 429 });
    await Promise.all(running);
    const after = await metricsOf(g);
    expect(valueOf(after, 'orchestrator_queued', { limiter: 'upstream' })).toBe(0);
    expect(delta(before, after, 'orchestrator_queue_wait_seconds_count', { upstream: 'upstream' })).toBe(4);
    // One got its slot at once; the three others waited at least one provider call (300 ms).
    expect(delta(before, after, 'orchestrator_queue_wait_seconds_bucket', { upstream: 'upstream', le: '0.1' })).toBe(1);
    expect(delta(before, after, 'orchestrator_refusals_total', { reason: 'overloaded' })).toBe(1);
    expect(delta(before, after, 'orchestrator_requests_total', { outcome: 'none' })).toBe(5);
  });

  it('labels tokens by hashed tenant only when asked, never by key, and keeps the metrics behind the gateway keys', async () => {
    g = await startGateway({ flags: ['--gateway-keys', 'gw-key-one,gw-key-two', '--metrics-tenants'] });
    const auth = { authorization: 'Bearer gw-key-one' };
    await client(g, 'gw-key-one').chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: uniquePrompt('tenant') }],
    });
    await client(g, 'gw-key-two').chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: uniquePrompt('tenant') }],
    });
    // Tokens are counted once each response is over, which may be after its client has read it.
    const tenantsCounted = async () =>
      (await metricsOf(g!, auth)).filter(
        (s) => s.name === 'gateway_tokens_total' && s.labels.direction === 'in' && s.value > 0,
      ).length;
    await waitFor(async () => (await tenantsCounted()) >= 2, 'both tenants to be counted');
    expect((await fetch(`${g.gatewayUrl}${METRICS}`)).status).toBe(401);
    const response = await fetch(`${g.gatewayUrl}${METRICS}`, { headers: auth });
    expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await response.text();
    expect(text).not.toContain('gw-key');
    const samples = (await metricsOf(g, auth)).filter(
      (s) => s.name === 'gateway_tokens_total' && s.labels.direction === 'in',
    );
    expect(new Set(samples.map((s) => s.labels.tenant)).size).toBe(2);
    for (const s of samples) expect(s.labels.tenant).toMatch(/^[\w-]{12}$/);
  });

  it('moves with --metrics-path, and is gone with --no-metrics', async () => {
    g = await startGateway({ flags: ['--metrics-path', '/internal/prom'] });
    expect((await fetch(`${g.gatewayUrl}/internal/prom`)).status).toBe(200);
    expect((await fetch(`${g.gatewayUrl}${METRICS}`)).status).toBe(404);
    await g.close();
    g = await startGateway({ flags: ['--no-metrics'] });
    expect((await fetch(`${g.gatewayUrl}${METRICS}`)).status).toBe(404);
    // The rest works as before.
    await client(g).chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: uniquePrompt('no-metrics') }],
    });
  });
});

describe('health', () => {
  it('liveness and readiness in terminus format; the upstream is "unknown" until a call had an outcome', async () => {
    g = await startGateway();
    const health = async (path: string) => {
      const response = await fetch(`${g!.gatewayUrl}${path}`);
      return { status: response.status, json: (await response.json()) as any };
    };
    expect((await health('/health')).json.upstream).toMatchObject({ state: 'unknown', breaker: 'closed' });
    expect(await health('/health/live')).toMatchObject({
      status: 200,
      json: { status: 'ok', info: { process: { status: 'up' } } },
    });
    expect(await health('/health/ready')).toMatchObject({ status: 200, json: { status: 'ok', error: {} } });
    await client(g).chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: uniquePrompt('health') }],
    });
    expect((await health('/health')).json.upstream).toMatchObject({ state: 'available', breaker: 'closed' });
    expect((await health('/health/ready')).json.details.breakers).toMatchObject({ status: 'up', upstream: 'closed' });
  });

  it('readiness fails while a required store is unreachable, and while shutting down', async () => {
    // Nothing listens on port 1: the store degrades on its first use.
    g = await startGateway({
      flags: ['--redis', 'redis://127.0.0.1:1', '--redis-timeout', '0.05', '--ready-requires-store'],
    });
    await client(g).chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: uniquePrompt('store') }],
    });
    await waitFor(async () => (await fetch(`${g!.gatewayUrl}/health/ready`)).status === 503, 'readiness to fail');
    const ready = (await (await fetch(`${g.gatewayUrl}/health/ready`)).json()) as any;
    expect(ready).toMatchObject({ status: 'error', error: { store: { status: 'down', state: 'degraded' } } });
    // The replicas' coordination goes through the same Redis: down with it.
    await waitFor(
      async () =>
        ((await (await fetch(`${g!.gatewayUrl}/health/ready`)).json()) as any).error.coordination !== undefined,
      'coordination to be reported',
    );
    expect(((await (await fetch(`${g.gatewayUrl}/health/ready`)).json()) as any).error.coordination).toMatchObject({
      status: 'down',
      state: 'degraded',
    });
    expect((await fetch(`${g.gatewayUrl}/health/live`)).status).toBe(200);
    await g.close();

    g = await startGateway();
    const { Orchestrator } = await import('nest-prompt-orchestrator/core');
    g.app.get(Orchestrator).drain();
    const draining = await fetch(`${g.gatewayUrl}/health/ready`);
    expect(draining.status).toBe(503);
    expect(await draining.json()).toMatchObject({ status: 'error', error: { orchestrator: { status: 'down' } } });
  });
});

describe('status routes', () => {
  it.each(['fastify', 'express'])(
    'on %s: a key buys a session cookie that opens the event stream; nothing else does',
    async (platform) => {
      g = await startGateway({ flags: ['--platform', platform, '--gateway-keys', 'page-key'] });
      const base = `${g.gatewayUrl}/orchestrator`;
      const page = await fetch(base);
      expect(page.status).toBe(200);
      expect(page.headers.get('content-type')).toMatch(/^text\/html/);
      expect(page.headers.get('content-security-policy')).toContain("default-src 'none'");
      expect(await page.text()).toContain('id="login"');
      expect((await fetch(`${base}/events`)).status).toBe(401);
      expect(
        (
          await fetch(`${base}/login`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: '{"key":"nope"}',
          })
        ).status,
      ).toBe(401);

      const login = await fetch(`${base}/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"key":"page-key"}',
      });
      expect(login.status).toBe(204);
      const cookie = login.headers.get('set-cookie')!;
      expect(cookie).toMatch(/^npo_status=[\w.-]+; Path=\/orchestrator; Max-Age=43200; HttpOnly; SameSite=Strict$/);
      const session = { cookie: cookie.split(';')[0] };
      // The cookie opens the status routes only: never the API or the metrics.
      expect((await fetch(`${g.gatewayUrl}/v1/models`, { headers: session })).status).toBe(401);
      expect((await fetch(`${g.gatewayUrl}${METRICS}`, { headers: session })).status).toBe(401);
      expect((await fetch(`${base}/events`, { headers: { cookie: 'npo_status=99999999999.forged' } })).status).toBe(
        401,
      );

      expect(await (await fetch(base, { headers: session })).text()).toContain('id="upstreams"');
      const controller = new AbortController();
      const events = await fetch(`${base}/events`, { headers: session, signal: controller.signal });
      expect(events.status).toBe(200);
      expect(events.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const reader = events.body!.getReader();
      let text = '';
      while (!text.includes('\n\n')) text += new TextDecoder().decode((await reader.read()).value);
      controller.abort();
      expect(text).toMatch(/^event: snapshot\ndata: \{/);
      const snapshot = JSON.parse(text.split('\n')[1].slice('data: '.length));
      expect(snapshot).toMatchObject({
        provider: 'openai',
        totals: { miss: 0, joined: 0, cached: 0 },
        draining: false,
      });
      const json = await fetch(`${base}/snapshot`, { headers: { authorization: 'Bearer page-key' } });
      expect(json.status).toBe(200);
    },
  );

  it('an open page does not hold a graceful shutdown for its grace period', async () => {
    // A grace period of an hour, longer than the test may take: a shutdown that waited for the page would not end.
    g = await startGateway({ flags: ['--shutdown-grace', '3600'] });
    const events = await fetch(`${g.gatewayUrl}/orchestrator/events`);
    expect(events.status).toBe(200);
    const ended = events.text(); // resolves when the gateway ends the stream
    const { stopGateway } = await import('../../apps/gateway/src/gateway.factory.js');
    const outcome = await stopGateway(g.app, g.config);
    expect(outcome).toEqual({ finished: true, cut: 0 });
    expect(await ended).toContain('event: snapshot');
  });

  it('is gone with --no-status-page', async () => {
    g = await startGateway({ flags: ['--no-status-page'] });
    expect((await fetch(`${g.gatewayUrl}/orchestrator`)).status).toBe(404);
    expect((await fetch(`${g.gatewayUrl}/orchestrator/events`)).status).toBe(404);
  });
});
