import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import * as api from '@opentelemetry/api';
import { createClient } from '@keyv/redis';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { startOwnedRedis, type OwnedRedis } from '../../../../../test/support/redis-server.js';
import { RedisCoordinator } from '../cluster/redis-coordinator.js';
import { Orchestrator } from '../orchestrator.js';
import { NOOP_REQUEST_SPAN, RequestTracing, TRACE_ATTRIBUTES as A, type RequestSpan } from './request-tracing.js';
import { formatTraceParent, parseTraceParent } from './traceparent.js';

const SERVER = api.SpanKind.SERVER;
const CLIENT = api.SpanKind.CLIENT;

function traced() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const tracing = new RequestTracing(api, {
    tracerProvider: provider,
    upstreamAttributes: () => ({ 'server.address': 'provider.test' }),
  });
  return { exporter, tracing, spans: () => exporter.getFinishedSpans() };
}

/** A caller's own trace: a `traceparent` as an SDK would send it. */
function callerTrace(n: number): { traceparent: string; traceId: string; spanId: string } {
  const traceId = n.toString(16).padStart(32, 'a');
  const spanId = n.toString(16).padStart(16, 'b');
  return { traceparent: `00-${traceId}-${spanId}-01`, traceId, spanId };
}

const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('traceparent', () => {
  it('reads and writes W3C trace context, ignoring what the spec says to ignore', () => {
    const parent = parseTraceParent('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
    expect(parent).toEqual({ traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', traceFlags: 1 });
    expect(formatTraceParent(parent!)).toBe('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
    expect(parseTraceParent('ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')).toBeUndefined();
    expect(parseTraceParent(`00-${'0'.repeat(32)}-b7ad6b7169203331-01`)).toBeUndefined();
    expect(parseTraceParent('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra')).toBeUndefined();
    expect(parseTraceParent('01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra')?.traceFlags).toBe(1);
    expect(parseTraceParent('garbage')).toBeUndefined();
    expect(parseTraceParent(undefined)).toBeUndefined();
  });
});

describe('RequestTracing: a herd in one process', () => {
  it('10 identical calls: 10 server spans continuing their callers, 1 client span under the leader, 9 links to it', async () => {
    const { tracing, spans } = traced();
    const orchestrator = new Orchestrator({ tracing });
    const policy = orchestrator.policy({ dedup: true, breaker: 'llm', concurrency: 4 });
    let calls = 0;
    const work = async () => {
      calls++;
      await wait(30);
      return 'answer';
    };
    const callers = Array.from({ length: 10 }, (_, i) => callerTrace(i + 1));
    const requests = callers.map((caller) => {
      const span = tracing.startServerSpan(
        'POST /v1/chat/completions',
        { traceparent: caller.traceparent },
        {
          [A.genAiProviderName]: 'openai',
          [A.genAiOperation]: 'chat',
          [A.genAiRequestModel]: 'gpt-test',
        },
      );
      return orchestrator
        .run(policy, work, { key: 'same prompt', trace: span })
        .then((answer) => (span.end(200), answer));
    });
    expect(await Promise.all(requests)).toEqual(Array(10).fill('answer'));
    expect(calls).toBe(1);
    await orchestrator.close();

    const server = spans().filter((s) => s.kind === SERVER);
    const client = spans().filter((s) => s.kind === CLIENT);
    expect(server).toHaveLength(10);
    expect(client).toHaveLength(1);
    // Each server span continues its own caller's trace, as the caller's span's child.
    expect(new Set(server.map((s) => s.spanContext().traceId))).toEqual(new Set(callers.map((c) => c.traceId)));
    for (const span of server) {
      const caller = callers.find((c) => c.traceId === span.spanContext().traceId)!;
      expect(span.parentSpanContext?.spanId).toBe(caller.spanId);
      expect(span.attributes['http.response.status_code']).toBe(200);
    }
    const leader = server.find((s) => s.attributes[A.dedupOutcome] === 'miss')!;
    const joined = server.filter((s) => s.attributes[A.dedupOutcome] === 'joined');
    expect(joined).toHaveLength(9);
    for (const span of joined) {
      expect(span.links).toHaveLength(1);
      expect(span.links[0].context.spanId).toBe(leader.spanContext().spanId);
      expect(span.links[0].context.traceId).toBe(leader.spanContext().traceId);
      expect(span.attributes[A.dedupLeaderTraceId]).toBe(leader.spanContext().traceId);
    }
    expect(leader.attributes).toMatchObject({ [A.upstream]: 'llm', [A.breakerState]: 'closed', [A.queueWaitMs]: 0 });
    // The upstream call is the leader's child, named and described as the GenAI conventions say.
    const [call] = client;
    expect(call.name).toBe('chat gpt-test');
    expect(call.parentSpanContext?.spanId).toBe(leader.spanContext().spanId);
    expect(call.spanContext().traceId).toBe(leader.spanContext().traceId);
    expect(call.attributes).toMatchObject({
      [A.genAiProviderName]: 'openai',
      [A.genAiRequestModel]: 'gpt-test',
      [A.upstream]: 'llm',
      [A.breakerState]: 'closed',
      [A.attempt]: 1,
      [A.result]: 'ok',
      'server.address': 'provider.test',
    });
  });

  it('a failing upstream: its client span says why (status, error type), a refusal makes none', async () => {
    const { tracing, spans } = traced();
    const orchestrator = new Orchestrator({ tracing, breakers: { llm: { failureThreshold: 1 } } });
    const policy = orchestrator.policy({ breaker: 'llm' });
    const failure = Object.assign(new Error('provider down'), { status: 503 });
    const first = tracing.startServerSpan('POST /x', {});
    await expect(orchestrator.run(policy, () => Promise.reject(failure), { trace: first })).rejects.toBe(failure);
    first.end(503);
    const second = tracing.startServerSpan('POST /x', {});
    await expect(orchestrator.run(policy, () => Promise.resolve('never'), { trace: second })).rejects.toMatchObject({
      code: 'circuit_open',
    });
    second.end(503, 'circuit_open');
    await orchestrator.close();

    const client = spans().filter((s) => s.kind === CLIENT);
    expect(client).toHaveLength(1);
    expect(client[0].attributes).toMatchObject({
      'http.response.status_code': 503,
      'error.type': '503',
      [A.result]: 'error',
    });
    expect(client[0].status.code).toBe(api.SpanStatusCode.ERROR);
    const server = spans().filter((s) => s.kind === SERVER);
    expect(server.map((s) => s.attributes[A.breakerState])).toEqual(['closed', 'open']);
    expect(server[1].attributes['error.type']).toBe('circuit_open');
  });

  it("the upstream request carries the attempt's client span (traceparent, tracestate); answer attributes land on it", async () => {
    const { tracing, spans } = traced();
    const orchestrator = new Orchestrator({ tracing });
    const policy = orchestrator.policy({ breaker: 'llm' });
    const caller = callerTrace(7);
    const span = tracing.startServerSpan('POST /x', { traceparent: caller.traceparent, tracestate: 'vendor=opaque' });
    const sent: Array<Record<string, string>> = [];
    await orchestrator.run(
      policy,
      async () => {
        const headers: Record<string, string> = {};
        span.injectUpstream(headers);
        sent.push(headers);
        span.setUpstreamAttributes({
          [A.genAiResponseId]: 'resp-1',
          [A.genAiResponseFinishReasons]: ['stop'],
          [A.genAiInputTokens]: 12,
        });
        return 'answer';
      },
      { trace: span },
    );
    span.end(200);
    await orchestrator.close();
    const [call] = spans().filter((s) => s.kind === CLIENT);
    expect(sent).toEqual([
      { traceparent: `00-${caller.traceId}-${call.spanContext().spanId}-01`, tracestate: 'vendor=opaque' },
    ]);
    expect(call.attributes).toMatchObject({
      [A.genAiResponseId]: 'resp-1',
      [A.genAiResponseFinishReasons]: ['stop'],
      [A.genAiInputTokens]: 12,
    });
    expect(spans().find((s) => s.kind === SERVER)!.attributes[A.genAiInputTokens]).toBeUndefined();
    const none: Record<string, string> = {};
    NOOP_REQUEST_SPAN.injectUpstream(none);
    expect(none).toEqual({});
  });

  it('without an SDK, spans are the shared no-op: nothing recorded, nothing published', async () => {
    const tracing = new RequestTracing(api);
    const span = tracing.startServerSpan('GET /', { traceparent: callerTrace(1).traceparent });
    expect(span).toBe(NOOP_REQUEST_SPAN);
    const orchestrator = new Orchestrator({ tracing });
    const policy = orchestrator.policy({ dedup: true });
    await expect(orchestrator.run(policy, async () => 'ok', { key: 'k', trace: span })).resolves.toBe('ok');
    await orchestrator.close();
  });
});

describe('RequestTracing: a herd across two replicas sharing a Redis', () => {
  let redis: OwnedRedis;
  const clients: Array<{ destroy(): void }> = [];
  beforeAll(async () => {
    redis = await startOwnedRedis();
  }, 30_000);
  afterAll(async () => {
    for (const client of clients) client.destroy();
    await redis.close();
  });

  async function replica(tracing: RequestTracing) {
    const client = createClient({ url: redis.url, disableOfflineQueue: true, socket: { reconnectStrategy: false } });
    client.on('error', () => undefined);
    const subscriber = client.duplicate();
    subscriber.on('error', () => undefined);
    await client.connect();
    await subscriber.connect();
    clients.push(client, subscriber);
    const coordinator = new RedisCoordinator({
      client,
      subscriber,
      prefix: 'traced-herd',
      opTimeoutMs: 1_000,
      pollMs: 50,
    });
    const orchestrator = new Orchestrator({ tracing, coordinator });
    return { orchestrator, close: async () => (await orchestrator.close(), coordinator.close()) };
  }

  it('the joined requests of the second replica link to the leader on the first', async () => {
    const { tracing, spans } = traced();
    const a = await replica(tracing);
    const b = await replica(tracing);
    let calls = 0;
    const work = async () => {
      calls++;
      await wait(300);
      return 'answer';
    };
    const run = (made: Orchestrator, span: RequestSpan) =>
      made
        .run(made.policy({ dedup: true, breaker: 'llm' }), work, { key: 'fleet prompt', trace: span })
        .then((answer) => (span.end(200), answer));
    const leaderSpan = tracing.startServerSpan('POST /a', { traceparent: callerTrace(1).traceparent });
    const first = run(a.orchestrator, leaderSpan);
    await wait(100);
    const others = Array.from({ length: 4 }, (_, i) =>
      run(b.orchestrator, tracing.startServerSpan('POST /b', { traceparent: callerTrace(i + 2).traceparent })),
    );
    expect(await Promise.all([first, ...others])).toEqual(Array(5).fill('answer'));
    expect(calls).toBe(1);
    await a.close();
    await b.close();

    const server = spans().filter((s) => s.kind === SERVER);
    const leader = server.find((s) => s.name === 'POST /a')!;
    expect(leader.attributes[A.dedupOutcome]).toBe('miss');
    const followers = server.filter((s) => s.name === 'POST /b');
    expect(followers.map((s) => s.attributes[A.dedupOutcome])).toEqual(Array(4).fill('joined'));
    for (const span of followers)
      expect(span.links.map((l: ReadableSpan['links'][number]) => l.context.spanId)).toEqual([
        leader.spanContext().spanId,
      ]);
    expect(spans().filter((s) => s.kind === CLIENT)).toHaveLength(1);
  }, 20_000);
});
