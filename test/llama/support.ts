import type { INestApplication } from '@nestjs/common';
import type { AddressInfo } from 'node:net';
import { parseGatewayConfig } from '../../apps/gateway/src/config/gateway-config.js';
import { createGateway } from '../../apps/gateway/src/gateway.factory.js';
import {
  llamaServerAvailable,
  llamaToolDir,
  startLlamaServer,
  type LlamaServer,
  type LlamaServerOptions,
} from '../support/llama-server.js';
import { existsSync } from 'node:fs';

/** Helpers of the suites that run against a real llama-server (`npm run test:llama`). */

export interface GatewayInFront {
  url: string;
  app: INestApplication;
  close(): Promise<void>;
}

/** The real gateway (as the CLI builds it) with `--provider llama` in front of `upstream`. */
export async function gatewayInFront(upstream: string, flags: string[] = []): Promise<GatewayInFront> {
  const config = parseGatewayConfig(['--provider', 'llama', '--upstream', upstream, ...flags], {});
  if (!config) throw new Error('no config');
  const app = await createGateway(config, { logger: false });
  await app.listen(0, '127.0.0.1');
  if (config.platform === 'fastify')
    await (app.getHttpAdapter().getInstance() as { ready(): Promise<unknown> }).ready();
  const { port } = app.getHttpServer().address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    app,
    close: async () => {
      const server = app.getHttpServer() as import('node:http').Server;
      const drop = setInterval(() => server.closeAllConnections(), 100);
      try {
        await app.close();
      } finally {
        clearInterval(drop);
      }
    },
  };
}

/**
 * A server started with extra flags (embeddings, reranking, an API key, ...) from the llama-server tool. When only
 * LLAMA_SERVER_URL is there (no tool to start one), the user's own server stands in for it, as it is: whatever it
 * answers, direct and through the gateway must agree (`server.external` tells the tests which).
 */
export function featureServer(options: LlamaServerOptions): Promise<LlamaServer> {
  const toolHere = existsSync(llamaToolDir()) && llamaServerAvailable() === undefined;
  return startLlamaServer({ ...options, allowExternal: !toolHere });
}

export interface Observed {
  status: number;
  contentType: string | null;
  headers: Headers;
  text: string;
}

export interface Exchange {
  method?: string;
  path: string;
  /** An object (sent as JSON) or a string (sent as it is). */
  body?: unknown;
  headers?: Record<string, string>;
}

export async function observe(base: string, exchange: Exchange): Promise<Observed> {
  const hasBody = exchange.body !== undefined;
  const send = () =>
    fetch(`${base}${exchange.path}`, {
      method: exchange.method ?? (hasBody ? 'POST' : 'GET'),
      headers: { ...(hasBody ? { 'content-type': 'application/json' } : {}), ...exchange.headers },
      body: !hasBody ? undefined : typeof exchange.body === 'string' ? exchange.body : JSON.stringify(exchange.body),
    });
  let response: Response;
  try {
    response = await send();
  } catch (error) {
    // A kept-alive connection the server closed just as it was reused (a server drops idle ones after a while): the
    // request got no answer at all, so it is sent once more on a new connection, as HTTP clients do.
    if ((error as { cause?: { code?: string } }).cause?.code !== 'UND_ERR_SOCKET') throw error;
    response = await send();
  }
  return {
    status: response.status,
    contentType: response.headers.get('content-type'),
    headers: response.headers,
    text: await response.text(),
  };
}

// Values that change from run to run (facts §9): ids, clocks, timings, what the prompt cache held, which slot ran it.
const VOLATILE_KEYS = new Set([
  'created',
  'created_at',
  'completed_at',
  'timings',
  'tokens_cached',
  'id_slot',
  'media_marker',
  'cached_tokens',
  'cache_read_input_tokens',
  'save_ms',
  'restore_ms',
  'started_at',
  'time_ms',
]);
const VOLATILE_ID = /^(chatcmpl-|resp_|msg_)[A-Za-z0-9]{32}$/;

/** A JSON value with the run-to-run fields replaced by a marker (`extra` names more keys, e.g. Anthropic input_tokens). */
export function mask(value: unknown, extra: readonly string[] = []): unknown {
  if (Array.isArray(value)) return value.map((v) => mask(v, extra));
  if (typeof value === 'string') return VOLATILE_ID.test(value) ? '<id>' : value;
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [k, VOLATILE_KEYS.has(k) || extra.includes(k) ? '<varies>' : mask(v, extra)]),
  );
}

export interface SseEvent {
  event?: string;
  data: unknown;
}

/** SSE events in order: `event:` name and `data:` payload (JSON parsed, `[DONE]` kept); comment lines skipped. */
export function sseEvents(text: string): SseEvent[] {
  return text
    .split('\n\n')
    .filter((block) => block.trim() !== '' && !block.startsWith(':'))
    .map((block) => {
      const lines = block.split('\n');
      const event = lines.find((l) => l.startsWith('event: '))?.slice(7);
      const data = lines
        .filter((l) => l.startsWith('data: '))
        .map((l) => l.slice(6))
        .join('\n');
      let parsed: unknown;
      try {
        parsed = JSON.parse(data);
      } catch {
        parsed = data;
      }
      return event === undefined ? { data: parsed } : { event, data: parsed };
    });
}

/**
 * The body's bytes with only the run-to-run values blanked (ids, clocks, timings, prompt-cache counts): two answers
 * that are equal here are equal byte for byte everywhere else, number formatting and key order included.
 */
export function rawComparable(text: string): string {
  return text
    .replace(/(chatcmpl-|resp_|msg_)[A-Za-z0-9]{32}/g, '$1<id>')
    .replace(/"timings":\{[^}]*\}/g, '"timings":_')
    .replace(
      /"(created|created_at|completed_at|tokens_cached|id_slot|cached_tokens|cache_read_input_tokens|input_tokens|media_marker|started_at|time_ms)":("[^"]*"|-?[\d.eE+-]+)/g,
      '"$1":_',
    );
}

/** What a test compares: status, content type, and the body (parsed and masked, or the SSE events masked). */
export function comparable(observed: Observed, extraMask: readonly string[] = []) {
  // A 204 has no content, so no content type (the server still names one).
  const type = observed.status === 204 ? '' : (observed.contentType ?? '');
  let body: unknown = observed.text;
  if (type.startsWith('text/event-stream'))
    body = sseEvents(observed.text).map((e) => ({ ...e, data: mask(e.data, extraMask) }));
  else if (type.startsWith('application/json') && observed.text !== '')
    body = mask(JSON.parse(observed.text), extraMask);
  return { status: observed.status, contentType: type, body };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until `check` holds, asking every `pollMs`; fails naming `what` after `timeoutMs`. */
export async function until(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs = 15_000,
  pollMs = 100,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await sleep(pollMs);
  }
  throw new Error(`timed out waiting until ${what}`);
}
