import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ExportWatch } from './gateway-tracing.js';

/** A collector stand-in on loopback whose answer the test switches: up (200) or down (503). */
let server: Server;
let url: string;
let up = false;
let received = 0;

beforeAll(async () => {
  server = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      if (up) received++;
      // 400 is not retried by the exporter: one failed export per batch, at once.
      response.writeHead(up ? 200 : 400, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
});
afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe('ExportWatch', () => {
  it('counts every failed export, logs the outage once, and once more when the collector is back', async () => {
    const lines: Array<{ level: string; message: string }> = [];
    const logger = {
      warn: (_fields: object, message: string) => lines.push({ level: 'warn', message }),
      info: (_fields: object, message: string) => lines.push({ level: 'info', message }),
    };
    const watch = new ExportWatch(url, logger as never);
    const provider = new BasicTracerProvider({
      spanProcessors: [new SimpleSpanProcessor(watch.wrap(new OTLPTraceExporter({ url })))],
    });
    const tracer = provider.getTracer('test');
    const send = async () => {
      tracer.startSpan('work').end();
      await provider.forceFlush().catch(() => undefined);
    };

    for (let i = 0; i < 3; i++) await send();
    expect(watch.failures).toBe(3);
    expect(lines).toEqual([{ level: 'warn', message: expect.stringContaining(`trace export to ${url} failed`) }]);

    up = true;
    await send();
    await send();
    expect(received).toBe(2);
    expect(watch.failures).toBe(3);
    expect(lines.slice(1)).toEqual([{ level: 'info', message: `trace export to ${url} is back` }]);

    up = false;
    await send();
    expect(watch.failures).toBe(4);
    expect(lines.filter((l) => l.level === 'warn')).toHaveLength(2);
    await provider.shutdown();
  });
});
