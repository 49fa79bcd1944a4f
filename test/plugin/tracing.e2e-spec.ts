import { afterEach, describe, expect, it } from '@jest/globals';
import { Body, Controller, HttpCode, Post } from '@nestjs/common';
import * as api from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import {
  Dedup,
  OrchestratorModule,
  OrchestratorService,
  RequestTracing,
  TRACE_ATTRIBUTES as A,
} from 'nest-prompt-orchestrator';
import { Gate, PLATFORMS, postJson, startApp, waitFor, type RunningApp } from '../support/platforms.js';

/**
 * Tracing through the plugin's interceptor in an ordinary Nest app: the app
 * gives `OrchestratorModule` a `RequestTracing` over its own SDK; every
 * orchestrated request gets a server span continuing its caller's trace.
 */

let calls = 0;
let gate = new Gate();

@Controller('quotes')
class QuotesController {
  @Post()
  @HttpCode(200)
  @Dedup()
  async quote(@Body() body: { symbol: string }) {
    calls++;
    await gate.promise;
    return { symbol: body.symbol, price: 42 };
  }
}

describe.each(PLATFORMS)('tracing through OrchestratorInterceptor on %s', (platform) => {
  let running: RunningApp | undefined;
  afterEach(async () => {
    await running?.close();
    running = undefined;
    calls = 0;
    gate = new Gate();
  });

  it('a herd of 10: 10 server spans with their callers as parents, 1 client span, 9 links to the leader', async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    const tracing = new RequestTracing(api, { tracerProvider: provider });
    running = await startApp(platform, {
      imports: [OrchestratorModule.forRoot({ tracing })],
      controllers: [QuotesController],
    });
    const callers = Array.from({ length: 10 }, (_, i) => ({
      traceId: `${i}`.padStart(32, 'c'),
      spanId: `${i}`.padStart(16, 'd'),
    }));
    const herd = callers.map((c) =>
      postJson(`${running!.url}/quotes`, { symbol: 'ACME' }, { traceparent: `00-${c.traceId}-${c.spanId}-01` }),
    );
    const orchestrator = running.app.get(OrchestratorService);
    await waitFor(
      () => calls === 1 && orchestrator.health().dedup.joined === 9,
      10_000,
      'one call and 9 requests joined to it',
    );
    gate.resolve();
    expect((await Promise.all(herd)).map((r) => r.status)).toEqual(Array(10).fill(200));
    await waitFor(
      () => exporter.getFinishedSpans().filter((s) => s.kind === api.SpanKind.SERVER).length === 10,
      5_000,
      '10 server spans',
    );

    const spans = exporter.getFinishedSpans();
    const server = spans.filter((s) => s.kind === api.SpanKind.SERVER);
    expect(spans.filter((s) => s.kind === api.SpanKind.CLIENT)).toHaveLength(1);
    expect(server.map((s) => s.name)).toEqual(Array(10).fill('POST /quotes'));
    for (const span of server) {
      const caller = callers.find((c) => c.traceId === span.spanContext().traceId);
      expect(span.parentSpanContext?.spanId).toBe(caller?.spanId);
      expect(span.attributes).toMatchObject({
        'http.request.method': 'POST',
        'http.route': '/quotes',
        'http.response.status_code': 200,
      });
    }
    const leader = server.find((s) => s.attributes[A.dedupOutcome] === 'miss')!;
    const joined = server.filter((s) => s.attributes[A.dedupOutcome] === 'joined');
    expect(joined).toHaveLength(9);
    expect(joined.flatMap((s) => s.links.map((l) => l.context.spanId))).toEqual(
      Array(9).fill(leader.spanContext().spanId),
    );
  });
});
