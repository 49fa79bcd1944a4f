import { afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { connect } from 'node:net';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { sseData } from '../support/gateway-harness.js';
import { PLATFORMS, waitFor } from '../support/platforms.js';
import { ensureBuilt, startGatewayProcess, type GatewayProcess } from '../support/gateway-process.js';
import { startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';

/**
 * SIGTERM to the real gateway process: it stops accepting at once, lets the
 * requests and streams in flight finish within --shutdown-grace, answers a
 * request that still arrives on an open connection with a retryable 503 that
 * says the gateway is shutting down (not circuit_open), and exits 0.
 */

const chat = (prompt: string, stream = false) =>
  JSON.stringify({ model: 'mock-model', stream, messages: [{ role: 'user', content: prompt }] });

function rawRequest(body: string): string {
  return `POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

/** A raw kept-alive connection: what it received, and when the server closed it. */
function rawConnection(url: string) {
  const socket = connect(Number(new URL(url).port), '127.0.0.1');
  let received = '';
  socket.on('data', (b: Buffer) => (received += b.toString('latin1')));
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return { socket, closed, received: () => received };
}

describe.each(PLATFORMS)('graceful shutdown (%s)', (platform) => {
  let provider: MockProvider;
  let gateway: GatewayProcess | undefined;
  beforeAll(ensureBuilt, 180_000);
  afterEach(async () => {
    await gateway?.stop();
    await provider?.close();
  });

  it('finishes what is in flight, refuses late arrivals with a retryable 503, refuses new connections, exits 0', async () => {
    provider = await startMockProvider({ latencyMs: 800, streamChunkDelayMs: 100 });
    // A grace period of an hour, longer than the test may take: everything in flight is finished, never cut.
    gateway = await startGatewayProcess([
      '--platform',
      platform,
      '--upstream',
      provider.url,
      '--shutdown-grace',
      '3600',
    ]);
    const url = gateway.url;

    // In flight at SIGTERM: a plain answer (on a kept-alive connection, headers not sent yet) and a stream whose
    // headers went out before it (on another kept-alive connection, which will carry a late arrival).
    const streamSocket = rawConnection(url);
    const words = Array.from({ length: 30 }, (_, i) => `word${i}`).join(' ');
    streamSocket.socket.write(rawRequest(chat(`a stream in flight: ${words}`, true)));
    await waitFor(() => streamSocket.received().includes('data:'), 60_000, 'the stream to start');
    const plainSocket = rawConnection(url);
    plainSocket.socket.write(rawRequest(chat('plain in flight')));
    await waitFor(() => provider.stats().total >= 2, 60_000, 'the two calls to reach the provider');

    gateway.child.kill('SIGTERM');
    await waitFor(() => gateway!.output().includes('draining'), 60_000, 'the drain to start');
    const refused = await fetch(`${url}/health`).then(
      () => 'answered',
      (error: { cause?: { code?: string } }) => error.cause?.code,
    );
    expect(refused).toBe('ECONNREFUSED');

    // A request that arrives during the drain on the stream's connection (pipelined behind it).
    expect(streamSocket.received()).not.toContain('[DONE]');
    streamSocket.socket.write(rawRequest(chat('late arrival')));

    // The plain answer, written during the drain, closes its connection: no next request can land on a dying socket.
    await plainSocket.closed;
    const plain = plainSocket.received();
    expect(plain).toMatch(/^HTTP\/1\.1 200/);
    expect(plain.toLowerCase()).toContain('connection: close');
    expect(plain).toContain('plain in flight');

    // The late arrival: a retryable 503 that says why, and closes the connection.
    await streamSocket.closed;
    const [stream, late] = streamSocket.received().split(/(?=HTTP\/1\.1 )/);
    expect(sseData(stream.slice(stream.indexOf('\r\n\r\n'))).at(-1)).toBe('[DONE]');
    expect(late).toMatch(/^HTTP\/1\.1 503/);
    expect(late.toLowerCase()).toContain('connection: close');
    expect(late.toLowerCase()).toContain('x-should-retry: true');
    expect(late).toContain('"code":"shutting_down"');
    expect(late).not.toContain('circuit_open');

    expect(await gateway.exited).toBe(0);
    expect(gateway.output()).toContain('drained; stopped');
  }, 300_000);

  it('cuts what is still running once --shutdown-grace has passed, and still exits 0', async () => {
    // The provider would answer after ten minutes, longer than the test may take: only the grace period ends the call.
    provider = await startMockProvider({ latencyMs: 600_000 });
    gateway = await startGatewayProcess(['--platform', platform, '--upstream', provider.url, '--shutdown-grace', '1']);
    const stuck = fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chat('stuck'),
    }).then(
      (r) => r.status,
      () => 'cut',
    );
    await waitFor(() => provider.stats().total >= 1, 60_000, 'the call to reach the provider');
    gateway.child.kill('SIGTERM');
    expect(await gateway.exited).toBe(0);
    expect(gateway.output()).toMatch(/grace period over, 1 request\(s\) cut/);
    expect(await stuck).toBe('cut');
  }, 300_000);

  it('with --redis: the drain ends without an error line (the shared clients close once, quietly)', async () => {
    const redis: OwnedRedis = await startOwnedRedis();
    try {
      provider = await startMockProvider({ latencyMs: 300 });
      gateway = await startGatewayProcess(['--platform', platform, '--upstream', provider.url, '--redis', redis.url]);
      const answer = fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: chat('with redis'),
      });
      await waitFor(() => provider.stats().total >= 1, 60_000, 'the call to reach the provider');
      gateway.child.kill('SIGTERM');
      expect((await answer).status).toBe(200);
      expect(await gateway.exited).toBe(0);
      expect(gateway.output()).toContain('drained; stopped');
      expect(gateway.output()).not.toMatch(/"level":50|The client is closed/);
    } finally {
      await redis.close();
    }
  }, 300_000);
});
