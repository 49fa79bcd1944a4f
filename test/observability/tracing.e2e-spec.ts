import { afterEach, describe, expect, it } from '@jest/globals';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Orchestrator } from 'nest-prompt-orchestrator/core';
import { startMockProvider } from '../../apps/mock-provider/src/index.js';
import { GatewayTracing } from '../../apps/gateway/src/observability/gateway-tracing.js';
import { PLATFORMS, waitFor } from '../support/platforms.js';
import { postJson, startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';

/**
 * The gateway's traces as a collector receives them: an OTLP/HTTP receiver
 * (a plain node:http server on loopback that decodes the JSON export), the
 * gateway started with --otlp-endpoint pointing at it.
 */

/** One span as OTLP/JSON carries it (ids in hex, attributes as typed values). */
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: Array<{ key: string; value: Record<string, unknown> }>;
  links?: Array<{ traceId: string; spanId: string }>;
  status?: { code?: number };
}

const SERVER = 2;
const CLIENT = 3;

/** The OTLP/HTTP traces route of a collector, keeping whatever it is sent. */
async function startReceiver(): Promise<{
  url: string;
  spans: OtlpSpan[];
  resources: Array<Record<string, unknown>>;
  close(): Promise<void>;
}> {
  const spans: OtlpSpan[] = [];
  const resources: Array<Record<string, unknown>> = [];
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      if (
        request.method !== 'POST' ||
        request.url !== '/v1/traces' ||
        !/json/.test(request.headers['content-type'] ?? '')
      ) {
        response.writeHead(404).end();
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
        resourceSpans: Array<{
          resource: { attributes: Array<{ key: string; value: Record<string, unknown> }> };
          scopeSpans: Array<{ spans: OtlpSpan[] }>;
        }>;
      };
      for (const resource of body.resourceSpans) {
        resources.push(attributesOf(resource.resource.attributes));
        for (const scope of resource.scopeSpans) spans.push(...scope.spans);
      }
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    resources,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function attributesOf(list: OtlpSpan['attributes']): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const { key, value } of list ?? []) {
    const v = value.stringValue ?? value.intValue ?? value.doubleValue ?? value.boolValue;
    out[key] = typeof v === 'string' && value.intValue !== undefined ? Number(v) : v;
  }
  return out;
}

describe.each(PLATFORMS)('OpenTelemetry traces from the gateway on %s', (platform) => {
  let g: GatewayUnderTest | undefined;
  let receiver: Awaited<ReturnType<typeof startReceiver>> | undefined;
  afterEach(async () => {
    await g?.close();
    await receiver?.close();
    g = undefined;
    receiver = undefined;
  });

  it('a herd of 10: 10 server spans continuing each caller, 1 client span, 9 links to the leader, GenAI attributes', async () => {
    receiver = await startReceiver();
    g = await startGateway({
      flags: ['--platform', platform, '--otlp-endpoint', receiver.url],
      mock: { latencyMs: 1_500 },
    });
    const callers = Array.from({ length: 10 }, (_, i) => ({
      traceId: `${i + 1}`.padStart(32, 'e'),
      spanId: `${i + 1}`.padStart(16, 'f'),
    }));
    const body = { model: 'mock-model', messages: [{ role: 'user', content: uniquePrompt('traced herd') }] };
    const herd = callers.map((c) =>
      postJson(`${g!.gatewayUrl}/v1/chat/completions`, body, {
        authorization: 'Bearer sk-traced',
        traceparent: `00-${c.traceId}-${c.spanId}-01`,
      }),
    );
    const orchestrator = g.app.get(Orchestrator);
    await waitFor(() => orchestrator.health().dedup.joined === 9, 10_000, '9 requests joined to the first');
    const answers = await Promise.all(herd);
    expect(answers.map((a) => a.status)).toEqual(Array(10).fill(200));
    expect(g.provider.stats().total).toBe(1);
    // Closing the gateway sends the spans still batched.
    await g.close();

    const server = receiver.spans.filter((s) => s.kind === SERVER && s.name === 'POST /v1/chat/completions');
    const client = receiver.spans.filter((s) => s.kind === CLIENT);
    expect(server).toHaveLength(10);
    expect(client).toHaveLength(1);
    // The caller's trace is continued: each server span is the child of the span its caller sent.
    for (const span of server) {
      const caller = callers.find((c) => c.traceId === span.traceId);
      expect(caller).toBeDefined();
      expect(span.parentSpanId).toBe(caller!.spanId);
    }
    const leader = server.find((s) => attributesOf(s.attributes)['orchestrator.dedup.outcome'] === 'miss')!;
    const joined = server.filter((s) => attributesOf(s.attributes)['orchestrator.dedup.outcome'] === 'joined');
    expect(joined).toHaveLength(9);
    const links = joined.flatMap((s) => s.links ?? []);
    expect(links).toHaveLength(9);
    for (const link of links) expect(link).toMatchObject({ traceId: leader.traceId, spanId: leader.spanId });

    const leaderAttributes = attributesOf(leader.attributes);
    expect(leaderAttributes).toMatchObject({
      'gen_ai.provider.name': 'openai',
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': 'mock-model',
      'http.request.method': 'POST',
      'http.route': '/v1/chat/completions',
      'http.response.status_code': 200,
      'orchestrator.upstream': 'upstream',
      'orchestrator.breaker.state': 'closed',
    });
    expect(leaderAttributes['gen_ai.system']).toBeUndefined();
    // Usage is the call's: on its client span, not on any server span (a dashboard summing usage counts it once).
    expect(leaderAttributes['gen_ai.usage.input_tokens']).toBeUndefined();
    expect(leaderAttributes['orchestrator.queue.wait_ms']).toEqual(expect.any(Number));
    const callAttributes = attributesOf(client[0].attributes);
    for (const span of joined) {
      const a = attributesOf(span.attributes);
      // What a joined request got for free is saved, never usage (a dashboard summing usage counts the call once).
      expect(a['gen_ai.usage.input_tokens']).toBeUndefined();
      expect(a['orchestrator.saved.input_tokens']).toBe(callAttributes['gen_ai.usage.input_tokens']);
      expect(a['orchestrator.dedup.leader_trace_id']).toBe(leader.traceId);
    }
    const [call] = client;
    expect(call.parentSpanId).toBe(leader.spanId);
    expect(call.traceId).toBe(leader.traceId);
    expect(call.name).toBe('chat mock-model');
    expect(attributesOf(call.attributes)).toMatchObject({
      'gen_ai.provider.name': 'openai',
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': 'mock-model',
      'server.address': '127.0.0.1',
      'orchestrator.upstream': 'upstream',
      'orchestrator.attempt': 1,
      'orchestrator.upstream.result': 'ok',
    });
    expect(callAttributes['gen_ai.usage.input_tokens']).toEqual(expect.any(Number));
    expect(callAttributes['gen_ai.usage.output_tokens']).toEqual(expect.any(Number));
    expect(receiver.resources[0]).toMatchObject({ 'service.name': 'nest-prompt-orchestrator-gateway' });
  }, 30_000);

  it('the provider is called with the client span as its parent (traceparent, tracestate); the answer is on that span', async () => {
    receiver = await startReceiver();
    g = await startGateway({ flags: ['--platform', platform, '--otlp-endpoint', receiver.url] });
    const caller = { traceId: 'c'.repeat(32), spanId: 'd'.repeat(16) };
    const answer = await postJson(
      `${g.gatewayUrl}/v1/chat/completions`,
      { model: 'mock-model', messages: [{ role: 'user', content: uniquePrompt('propagated') }] },
      {
        traceparent: `00-${caller.traceId}-${caller.spanId}-01`,
        tracestate: 'vendor=opaque',
      },
    );
    expect(answer.status).toBe(200);
    const body = JSON.parse(answer.text) as { id: string; model: string };
    await g.close();

    const [call] = receiver.spans.filter((s) => s.kind === CLIENT);
    expect(call.traceId).toBe(caller.traceId);
    const [received] = g.provider.calls().filter((c) => c.route === '/v1/chat/completions');
    expect(received.headers?.traceparent).toBe(`00-${call.traceId}-${call.spanId}-01`);
    expect(received.headers?.tracestate).toBe('vendor=opaque');
    expect(attributesOf(call.attributes)).toMatchObject({
      'gen_ai.response.id': body.id,
      'gen_ai.response.model': body.model,
      'gen_ai.usage.input_tokens': expect.any(Number),
      'gen_ai.usage.output_tokens': expect.any(Number),
    });
    const reasons = call.attributes?.find((a) => a.key === 'gen_ai.response.finish_reasons')?.value as {
      arrayValue?: { values: Array<{ stringValue: string }> };
    };
    expect(reasons?.arrayValue?.values.map((v) => v.stringValue)).toEqual(['stop']);
  }, 30_000);

  it('a streamed answer: its id, model and finish reason on the client span, read as the stream passes', async () => {
    receiver = await startReceiver();
    g = await startGateway({ flags: ['--platform', platform, '--otlp-endpoint', receiver.url] });
    const answer = await postJson(`${g.gatewayUrl}/v1/chat/completions`, {
      model: 'mock-model',
      stream: true,
      messages: [{ role: 'user', content: uniquePrompt('streamed') }],
    });
    expect(answer.status).toBe(200);
    const first = JSON.parse(
      answer.text
        .split('\n')
        .find((line) => line.startsWith('data: {'))!
        .slice(6),
    ) as { id: string; model: string };
    await g.close();
    const [call] = receiver.spans.filter((s) => s.kind === CLIENT);
    expect(attributesOf(call.attributes)).toMatchObject({
      'gen_ai.response.id': first.id,
      'gen_ai.response.model': first.model,
    });
    const reasons = call.attributes?.find((a) => a.key === 'gen_ai.response.finish_reasons')?.value as {
      arrayValue?: { values: Array<{ stringValue: string }> };
    };
    expect(reasons?.arrayValue?.values.map((v) => v.stringValue)).toEqual(['stop']);
  }, 30_000);

  it('a translated call (OpenAI client, Anthropic provider): the provider gets the traceparent, the client span its answer', async () => {
    receiver = await startReceiver();
    g = await startGateway({
      flags: ['--platform', platform, '--provider', 'anthropic', '--otlp-endpoint', receiver.url],
    });
    const answer = await postJson(
      `${g.gatewayUrl}/v1/chat/completions`,
      { model: 'claude-mock', max_tokens: 50, messages: [{ role: 'user', content: uniquePrompt('translated') }] },
      { 'x-api-key': 'sk-ant-test' },
    );
    expect(answer.status).toBe(200);
    await g.close();
    const [call] = receiver.spans.filter((s) => s.kind === CLIENT);
    const [received] = g.provider.calls().filter((c) => c.route === '/v1/messages');
    expect(received.headers?.traceparent).toBe(`00-${call.traceId}-${call.spanId}-01`);
    const attributes = attributesOf(call.attributes);
    expect(attributes).toMatchObject({
      'gen_ai.provider.name': 'anthropic',
      'gen_ai.response.model': expect.any(String),
      'gen_ai.usage.input_tokens': expect.any(Number),
    });
    expect(attributes['gen_ai.response.id']).toMatch(/^msg_/);
    const reasons = call.attributes?.find((a) => a.key === 'gen_ai.response.finish_reasons')?.value as {
      arrayValue?: { values: Array<{ stringValue: string }> };
    };
    expect(reasons?.arrayValue?.values.map((v) => v.stringValue)).toEqual(['end_turn']);
  }, 30_000);

  it('scrapes, probes and the status page make no spans; only the model API does', async () => {
    receiver = await startReceiver();
    g = await startGateway({ flags: ['--platform', platform, '--otlp-endpoint', receiver.url] });
    for (const path of ['/health', '/orchestrator/metrics', '/orchestrator', '/nowhere'])
      await fetch(`${g.gatewayUrl}${path}`).then((r) => r.arrayBuffer());
    expect(
      (
        await postJson(`${g.gatewayUrl}/v1/chat/completions`, {
          model: 'mock-model',
          messages: [{ role: 'user', content: uniquePrompt('only') }],
        })
      ).status,
    ).toBe(200);
    await g.close();
    expect(receiver.spans.filter((s) => s.kind === SERVER).map((s) => s.name)).toEqual(['POST /v1/chat/completions']);
  }, 30_000);

  it('the resource: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, a service.version, and a service.instance.id of each process', async () => {
    receiver = await startReceiver();
    const saved = { name: process.env.OTEL_SERVICE_NAME, attributes: process.env.OTEL_RESOURCE_ATTRIBUTES };
    const replicas: GatewayUnderTest[] = [];
    try {
      // What the operator's environment says (the SDK's environment detector reads the process's own).
      process.env.OTEL_SERVICE_NAME = 'llm-gateway-eu';
      process.env.OTEL_RESOURCE_ATTRIBUTES = 'deployment.environment.name=staging,service.namespace=llm';
      for (let i = 0; i < 2; i++)
        replicas.push(
          await startGateway({
            flags: ['--platform', platform, '--otlp-endpoint', receiver.url],
            env: { OTEL_SERVICE_NAME: 'llm-gateway-eu' },
          }),
        );
    } finally {
      for (const [key, value] of [
        ['OTEL_SERVICE_NAME', saved.name],
        ['OTEL_RESOURCE_ATTRIBUTES', saved.attributes],
      ] as const) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    }
    try {
      for (const replica of replicas) {
        expect(
          (
            await postJson(`${replica.gatewayUrl}/v1/chat/completions`, {
              model: 'mock-model',
              messages: [{ role: 'user', content: uniquePrompt('replica') }],
            })
          ).status,
        ).toBe(200);
      }
    } finally {
      for (const replica of replicas) await replica.close();
    }
    expect(receiver.resources.length).toBeGreaterThanOrEqual(2);
    for (const resource of receiver.resources) {
      expect(resource).toMatchObject({
        'service.name': 'llm-gateway-eu',
        'deployment.environment.name': 'staging',
        'service.namespace': 'llm',
        'service.version': '0.1.0',
      });
      expect(resource['service.instance.id']).toMatch(/^[\da-f-]{36}$/);
    }
    expect(new Set(receiver.resources.map((r) => r['service.instance.id'])).size).toBe(2);
  }, 30_000);

  it('a collector that is down: each failed export counted in gateway_trace_export_failures_total', async () => {
    // A port that was just let go: nothing listens on it.
    const gone = await startReceiver();
    await gone.close();
    g = await startGateway({ flags: ['--platform', platform, '--otlp-endpoint', gone.url] });
    const metrics = async () => (await fetch(`${g!.gatewayUrl}/orchestrator/metrics`)).text();
    expect(await metrics()).toMatch(/^gateway_trace_export_failures_total 0$/m);
    expect(
      (
        await postJson(`${g.gatewayUrl}/v1/chat/completions`, {
          model: 'mock-model',
          messages: [{ role: 'user', content: uniquePrompt('collector down') }],
        })
      ).status,
    ).toBe(200);
    await g.app.get(GatewayTracing).flush();
    // The exporter gives up on a refused connection after its own retries: counted once that export is over.
    let text = await metrics();
    for (let tries = 0; tries < 400 && !/^gateway_trace_export_failures_total 1$/m.test(text); tries++) {
      await new Promise((resolve) => setTimeout(resolve, 50)); // polling interval
      text = await metrics();
    }
    expect(text).toMatch(/^gateway_trace_export_failures_total 1$/m);
  }, 40_000);

  it("an outage: the provider's 503 is on the client span and on the server span as a failure", async () => {
    receiver = await startReceiver();
    g = await startGateway({ flags: ['--platform', platform, '--otlp-endpoint', receiver.url, '--retries', '0'] });
    g.provider.setMode('error503');
    const failed = await postJson(`${g.gatewayUrl}/v1/chat/completions`, {
      model: 'mock-model',
      messages: [{ role: 'user', content: uniquePrompt('outage') }],
    });
    expect(failed.status).toBe(503);
    await g.close();
    const [call] = receiver.spans.filter((s) => s.kind === CLIENT);
    expect(attributesOf(call.attributes)).toMatchObject({
      'http.response.status_code': 503,
      'orchestrator.upstream.result': 'error',
    });
    expect(call.status?.code).toBe(2);
    const server = receiver.spans.find((s) => s.kind === SERVER && s.name === 'POST /v1/chat/completions')!;
    expect(attributesOf(server.attributes)).toMatchObject({ 'http.response.status_code': 503 });
    expect(server.status?.code).toBe(2);
  }, 30_000);

  it("a pool of two: each attempt's client span names the upstream it went to", async () => {
    receiver = await startReceiver();
    const [first, second] = await Promise.all([
      startMockProvider({ latencyMs: 5 }),
      startMockProvider({ latencyMs: 5 }),
    ]);
    try {
      // The first answers 503: every call fails over to the second, and both attempts have a client span.
      first.setMode('error503');
      const pool = ['--upstream', first.url, '--upstream', second.url];
      g = await startGateway({
        provider: first,
        flags: ['--platform', platform, '--otlp-endpoint', receiver.url, '--retries', '0', ...pool],
      });
      for (let i = 0; i < 4; i++) {
        const answer = await postJson(`${g.gatewayUrl}/v1/chat/completions`, {
          model: 'mock-model',
          messages: [{ role: 'user', content: uniquePrompt('pool') }],
        });
        expect(answer.status).toBe(200);
      }
      await g.close();
      const port = (url: string) => Number(new URL(url).port);
      const calls = receiver.spans.filter((s) => s.kind === CLIENT).map((s) => attributesOf(s.attributes));
      expect(calls.filter((c) => c['server.port'] === port(second.url))).toHaveLength(4);
      for (const call of calls)
        expect(call['orchestrator.upstream']).toBe(`upstream@127.0.0.1:${String(call['server.port'])}`);
      expect(second.stats().byRoute['/v1/chat/completions']).toBe(4);
    } finally {
      await first.close();
      await second.close();
    }
  }, 30_000);
});
