import { afterEach, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { spawnSync } from 'node:child_process';
import { startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';
import { parseMetrics, scrape, valueOf, type Sample } from '../support/metrics-text.js';

/**
 * The client-facing metrics as Prometheus reads them: label values bounded
 * whatever a client sends, every request counted once with how it ended
 * (refusals apart from misses), counters present at 0 before their first
 * event, the exposition accepted by `promtool check metrics`.
 */

const CHAT = '/v1/chat/completions';
const METRICS = '/orchestrator/metrics';

let g: GatewayUnderTest | undefined;
afterEach(async () => {
  await g?.close();
  g = undefined;
});

const client = (gateway: GatewayUnderTest) =>
  new OpenAI({ baseURL: `${gateway.gatewayUrl}/v1`, apiKey: 'sk-client-metrics', maxRetries: 0 });
const metricsOf = (gateway: GatewayUnderTest) => scrape(`${gateway.gatewayUrl}${METRICS}`);
const delta = (before: Sample[], after: Sample[], name: string, labels: Record<string, string> = {}) =>
  valueOf(after, name, labels) - valueOf(before, name, labels);
/** Whether a series is exposed at all (a counter at 0 is; one never incremented used not to be). */
const present = (samples: Sample[], name: string, labels: Record<string, string>) =>
  samples.some((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
/** Requests counted, the scrapes themselves (route `control`) left out. */
const dataRequests = (samples: Sample[]) =>
  samples
    .filter((s) => s.name === 'gateway_requests_total' && s.labels.route !== 'control')
    .reduce((n, s) => n + s.value, 0);

async function waitFor(check: () => Promise<boolean>, what: string, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20)); // polling interval
  }
}

describe('label bounds', () => {
  it('a 100,000-character model name, or one with odd characters, is labelled "other"; no label value passes 64 characters', async () => {
    g = await startGateway();
    const openai = client(g);
    const huge = 'Y'.repeat(100_000);
    let promptTokens = 0;
    for (const model of [huge, 'model with spaces {and} "quotes"', 'meta-llama/Llama-3.1-8B-Instruct']) {
      const answer = await openai.chat.completions.create({
        model,
        messages: [{ role: 'user', content: uniquePrompt('label') }],
      });
      promptTokens += answer.usage!.prompt_tokens;
    }
    await waitFor(
      async () => valueOf(await metricsOf(g!), 'gateway_tokens_total', { direction: 'in' }) >= promptTokens,
      'the three requests to be counted',
    );
    const response = await fetch(`${g.gatewayUrl}${METRICS}`);
    const text = await response.text();
    expect(text).not.toContain('YYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYYY');
    const samples = parseMetrics(text);
    for (const s of samples) for (const value of Object.values(s.labels)) expect(value.length).toBeLessThanOrEqual(64);
    const models = new Set(samples.filter((s) => s.name === 'gateway_tokens_total').map((s) => s.labels.model));
    expect(models).toEqual(new Set(['other', 'meta-llama/Llama-3.1-8B-Instruct']));
    expect(valueOf(samples, 'gateway_tokens_total', { direction: 'in', model: 'other' })).toBeGreaterThan(0);
  });
});

describe('promtool', () => {
  it('`promtool check metrics` accepts the scrape (prom-client default metrics included)', async () => {
    const found = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
    if (found.error)
      throw new Error('promtool is not installed: run `npm run test:prerequisites` (Debian package prometheus)');
    g = await startGateway({ flags: ['--breaker-failures', '2', '--retries', '0'] });
    const openai = client(g);
    await openai.chat.completions
      .create({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: uniquePrompt('lint') }] })
      .then(async (s) => {
        for await (const _ of s) void _;
      });
    await fetch(`${g.gatewayUrl}${CHAT}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-x' },
      body: '{not json',
    });
    const text = await (await fetch(`${g.gatewayUrl}${METRICS}`)).text();
    const checked = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    expect({ status: checked.status, problems: `${checked.stdout}${checked.stderr}` }).toEqual({
      status: 0,
      problems: '',
    });
  });
});

describe('counters from the start', () => {
  it('breaker transitions, refusals and request outcomes are exposed at 0 before any request, so the first open is an increase from 0', async () => {
    g = await startGateway({
      flags: ['--breaker-failures', '2', '--retries', '0', '--breaker-open', '60'],
      mock: { latencyMs: 5 },
    });
    const start = await metricsOf(g);
    for (const [from, to] of [
      ['closed', 'open'],
      ['open', 'half_open'],
      ['half_open', 'closed'],
      ['half_open', 'open'],
    ]) {
      expect(present(start, 'orchestrator_breaker_transitions_total', { name: 'upstream', from, to })).toBe(true);
    }
    for (const reason of ['circuit_open', 'overloaded', 'queue_timeout', 'shutting_down', 'no_upstream_available']) {
      expect(present(start, 'orchestrator_refusals_total', { upstream: 'upstream', reason })).toBe(true);
    }
    for (const outcome of ['miss', 'joined', 'cached', 'none', 'refused', 'error'])
      expect(present(start, 'gateway_requests_total', { route: 'chat', outcome })).toBe(true);
    for (const cause of ['circuit_open', 'overloaded', 'rate_limit_exceeded'])
      expect(present(start, 'gateway_refusals_total', { cause })).toBe(true);
    expect(dataRequests(start)).toBe(0);

    const openai = client(g);
    g.provider.setMode('error503');
    for (let i = 0; i < 2; i++) {
      await expect(
        openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: uniquePrompt('open') }] }),
      ).rejects.toMatchObject({ status: 503 });
    }
    const opened = await metricsOf(g);
    // What `increase(orchestrator_breaker_transitions_total{to="open"}[15m])` computes over these two scrapes: 1.
    expect(
      valueOf(start, 'orchestrator_breaker_transitions_total', { name: 'upstream', from: 'closed', to: 'open' }),
    ).toBe(0);
    expect(
      valueOf(opened, 'orchestrator_breaker_transitions_total', { name: 'upstream', from: 'closed', to: 'open' }),
    ).toBe(1);
  });
});

describe('every request counted once, by how it ended', () => {
  it('ten bodies that are not JSON: ten requests, each an error (4xx), nothing else', async () => {
    g = await startGateway();
    const before = await metricsOf(g);
    for (let i = 0; i < 10; i++) {
      const response = await fetch(`${g.gatewayUrl}${CHAT}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer sk-x' },
        body: `{"model": "m", ${i}`,
      });
      expect(response.status).toBe(400);
      await response.arrayBuffer();
    }
    await waitFor(async () => dataRequests(await metricsOf(g!)) >= 10, 'the ten requests to be counted');
    const after = await metricsOf(g);
    expect(dataRequests(after) - dataRequests(before)).toBe(10);
    expect(delta(before, after, 'gateway_requests_total', { route: 'chat', outcome: 'error' })).toBe(10);
    expect(
      delta(before, after, 'gateway_request_duration_seconds_count', {
        route: 'chat',
        status_class: '4xx',
        outcome: 'error',
      }),
    ).toBe(10);
  });

  it('an outage: circuit_open refusals are "refused" and counted by cause, never "miss"', async () => {
    g = await startGateway({
      flags: ['--breaker-failures', '3', '--retries', '0', '--breaker-open', '60'],
      mock: { latencyMs: 5 },
    });
    const openai = client(g);
    const before = await metricsOf(g);
    g.provider.setMode('error503');
    for (let i = 0; i < 3; i++) {
      await expect(
        openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: uniquePrompt('fail') }] }),
      ).rejects.toMatchObject({ status: 503 });
    }
    for (let i = 0; i < 4; i++) {
      await expect(
        openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: uniquePrompt('refused') }] }),
      ).rejects.toMatchObject({
        code: 'circuit_open',
      });
    }
    await waitFor(async () => dataRequests(await metricsOf(g!)) >= 7, 'the seven requests to be counted');
    const after = await metricsOf(g);
    expect(delta(before, after, 'gateway_requests_total', { route: 'chat', outcome: 'refused' })).toBe(4);
    expect(delta(before, after, 'gateway_refusals_total', { cause: 'circuit_open' })).toBe(4);
    expect(delta(before, after, 'gateway_requests_total', { route: 'chat', outcome: 'error' })).toBe(3);
    expect(delta(before, after, 'gateway_requests_total', { outcome: 'miss' })).toBe(0);
    expect(
      delta(before, after, 'gateway_request_duration_seconds_count', {
        route: 'chat',
        status_class: '5xx',
        outcome: 'refused',
      }),
    ).toBe(4);
  });
});

describe('latency and money', () => {
  it('a stream: time to first token, the call split into first byte and whole answer; money spent, then saved by a cached repeat', async () => {
    g = await startGateway({ mock: { latencyMs: 50 } });
    const openai = client(g);
    const before = await metricsOf(g);
    const params = {
      model: 'gpt-4o-mini',
      temperature: 0,
      stream: true as const,
      messages: [{ role: 'user' as const, content: uniquePrompt('stream') }],
    };
    for await (const _ of await openai.chat.completions.create(params)) void _;
    await waitFor(
      async () => delta(before, await metricsOf(g!), 'gateway_requests_total', { route: 'chat' }) >= 1,
      'the stream to be counted',
    );
    const streamed = await metricsOf(g);
    expect(delta(before, streamed, 'gateway_time_to_first_token_seconds_count', { route: 'chat' })).toBe(1);
    expect(delta(before, streamed, 'gateway_upstream_first_byte_seconds_count', { upstream: 'upstream' })).toBe(1);
    expect(delta(before, streamed, 'gateway_upstream_duration_seconds_count', { upstream: 'upstream' })).toBe(1);
    expect(delta(before, streamed, 'gateway_requests_total', { route: 'chat', outcome: 'miss' })).toBe(1);
    expect(delta(before, streamed, 'gateway_spent_usd_total', { model: 'gpt-4o-mini' })).toBeGreaterThan(0);

    // Not streamed: no time to first token.
    await openai.chat.completions.create({
      ...params,
      stream: false,
      messages: [{ role: 'user', content: uniquePrompt('whole') }],
    });
    // The same stream again: from the window, its cost saved.
    for await (const _ of await openai.chat.completions.create(params)) void _;
    await waitFor(
      async () => delta(streamed, await metricsOf(g!), 'gateway_requests_total', { route: 'chat' }) >= 2,
      'both to be counted',
    );
    const after = await metricsOf(g);
    expect(delta(streamed, after, 'gateway_time_to_first_token_seconds_count', { route: 'chat' })).toBe(1);
    expect(delta(streamed, after, 'gateway_requests_total', { route: 'chat', outcome: 'cached' })).toBe(1);
    expect(delta(streamed, after, 'gateway_saved_usd_total', { model: 'gpt-4o-mini' })).toBeCloseTo(
      valueOf(streamed, 'gateway_spent_usd_total', { model: 'gpt-4o-mini' }),
      12,
    );
  });
});
