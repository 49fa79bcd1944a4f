import type { INestApplication, LogLevel, LoggerService } from '@nestjs/common';
import type { AddressInfo } from 'node:net';
import { parseGatewayConfig, type GatewayConfig } from '../../apps/gateway/src/config/gateway-config.js';
import { createGateway } from '../../apps/gateway/src/gateway.factory.js';
import { startMockProvider } from '../../apps/mock-provider/src/index.js';
import type { MockProvider, MockProviderOptions } from '../../apps/mock-provider/src/index.js';

export interface GatewayUnderTest {
  /** e.g. `http://127.0.0.1:41234`, no trailing slash. */
  gatewayUrl: string;
  provider: MockProvider;
  app: INestApplication;
  config: GatewayConfig;
  /** Stops the gateway, then the provider. Safe to call twice. */
  close(): Promise<void>;
}

export interface StartOptions {
  /** CLI flags, e.g. ['--provider', 'llama', '--timeout', '1']; `--upstream` is added (pointing at the mock) unless they name upstreams. */
  flags?: string[];
  /** The environment object given to parseGatewayConfig (never process.env). */
  env?: NodeJS.ProcessEnv;
  /** Options of the simulated provider; latencyMs defaults to 5. */
  mock?: MockProviderOptions;
  /** An already running provider to put the gateway in front of (then close() leaves it running). */
  provider?: MockProvider;
  logger?: false | LogLevel[] | LoggerService;
}

/**
 * Starts the real simulated provider and the real gateway in front of it, both
 * on loopback ephemeral ports, the gateway built by `createGateway` from flags
 * parsed exactly as the CLI parses them.
 */
export async function startGateway(options: StartOptions = {}): Promise<GatewayUnderTest> {
  const ownProvider = options.provider === undefined;
  const provider = options.provider ?? (await startMockProvider({ latencyMs: 5, ...options.mock }));
  let app: INestApplication | undefined;
  try {
    const flags = options.flags ?? [];
    // Request lines would flood the test output: silent unless a test's own flags ask for a level.
    // A test's own --upstream (or upstreams file) replaces the simulated provider's (--upstream given twice would
    // make a pool of two).
    const upstream =
      flags.includes('--upstream') || flags.includes('--upstreams-file') ? [] : ['--upstream', provider.url];
    const config = parseGatewayConfig([...upstream, '--log-level', 'silent', ...flags], options.env ?? {});
    if (!config) throw new Error('parseGatewayConfig returned no config (was --help passed?)');
    app = await createGateway(config, { logger: options.logger ?? false });
    await app.listen(0, '127.0.0.1');
    if (config.platform === 'fastify') {
      await (app.getHttpAdapter().getInstance() as { ready(): Promise<unknown> }).ready();
    }
    const address = app.getHttpServer().address() as AddressInfo;
    const running = app;
    let closing: Promise<void> | undefined;
    return {
      gatewayUrl: `http://127.0.0.1:${address.port}`,
      provider,
      app: running,
      config,
      close: () =>
        (closing ??= (async () => {
          // A fetch client can leave a connection open that never carries a request (undici reconnects after an
          // aborted stream); Fastify's close would wait for it for a minute. The tests are done with every
          // connection by now, so they are dropped while the app shuts down.
          const server = running.getHttpServer() as import('node:http').Server;
          const dropConnections = setInterval(() => server.closeAllConnections(), 100);
          try {
            await running.close();
          } finally {
            clearInterval(dropConnections);
          }
          if (ownProvider) await provider.close();
        })()),
    };
  } catch (error) {
    await app?.close().catch(() => undefined);
    if (ownProvider) await provider.close();
    throw error;
  }
}

/**
 * A `fetch` for the SDKs' `fetch` option that counts the SDK's HTTP attempts
 * (first try and retries) and otherwise is globalThis.fetch: the SDK's own
 * retry and timeout defaults stay untouched.
 */
export function countingFetch(): { fetch: typeof fetch; attempts: () => number; reset: () => void } {
  let attempts = 0;
  const counted: typeof fetch = (input, init) => {
    attempts++;
    return globalThis.fetch(input, init);
  };
  return { fetch: counted, attempts: () => attempts, reset: () => (attempts = 0) };
}

/** A prompt no other test (or earlier run sharing Redis) has sent. */
export function uniquePrompt(label: string): string {
  return `${label} ${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2, 10)}`;
}

export { send, postJson, type RawResponse } from './platforms.js';

/** The `data:` payloads of an SSE body, in order (comment lines and `event:` lines skipped). */
export function sseData(text: string): string[] {
  return text
    .split(/\r?\n\r?\n/)
    .flatMap((event) =>
      event
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trim()),
    )
    .filter((data) => data.length > 0);
}

/** Seconds since `start` (performance.now()). */
export function secondsSince(start: number): number {
  return (performance.now() - start) / 1000;
}
