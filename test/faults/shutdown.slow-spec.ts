import { afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { connect } from 'node:net';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { sseData } from '../support/gateway-harness.js';
import { PLATFORMS, waitFor } from '../support/platforms.js';
import { ensureBuilt, startGatewayProcess, type GatewayProcess } from '../support/gateway-process.js';

/**
 * SIGTERM to the real gateway process: it stops accepting at once, lets the
 * requests and streams in flight finish within --shutdown-grace, answers a
 * request that still arrives on an open connection with a retryable 503 that
 * says the gateway is shutting down (not circuit_open), and exits 0.
 */

const chat = (prompt: string, stream = false) =>
  JSON.stringify({ model: 'mock-model', stream, messages: [{ role: 'user', content: prompt }] });

function rawRequest(body: string): string {
  return `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

describe.each(PLATFORMS)('graceful shutdown (%s)', (platform) => {
  let provider: MockProvider;
  let gateway: GatewayProcess | undefined;
  beforeAll(ensureBuilt, 180_000);
  afterEach(async () => {
    gateway?.kill();
    await provider?.close();
  });

  it('finishes what is in flight, refuses late arrivals with a retryable 503, refuses new connections, exits 0', async () => {
    provider = await startMockProvider({ latencyMs: 800, streamChunkDelayMs: 100 });
    gateway = await startGatewayProcess(['--platform', platform, '--upstream', provider.url, '--shutdown-grace', '20']);
    const url = gateway.url;

    // In flight at SIGTERM: a plain answer and a stream.
    const plain = fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chat('plain in flight') });
    const stream = fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chat('a stream in flight with several words to send', true),
    }).then((r) => r.text());
    // A connection with a request in flight, on which a second request will arrive during the drain.
    const socket = connect(Number(new URL(url).port), '127.0.0.1');
    let received = '';
    socket.on('data', (b: Buffer) => (received += b.toString('latin1')));
    socket.on('error', () => undefined);
    socket.write(rawRequest(chat('first on the kept connection')));
    await waitFor(() => provider.stats().total >= 3, 10_000, 'the three calls to reach the provider');

    const stoppedAt = performance.now();
    gateway.child.kill('SIGTERM');
    await waitFor(() => gateway!.output().includes('draining'), 5_000, 'the drain to start');
    socket.write(rawRequest(chat('late arrival')));
    const refused = await fetch(`${url}/health`).then(
      () => 'answered',
      (error: { cause?: { code?: string } }) => error.cause?.code,
    );
    expect(refused).toBe('ECONNREFUSED');

    const answer = await plain;
    expect(answer.status).toBe(200);
    expect(((await answer.json()) as { choices: Array<{ message: { content: string } }> }).choices[0].message.content).toContain('plain in flight');
    const events = sseData(await stream);
    expect(events.at(-1)).toBe('[DONE]');

    expect(await gateway.exited).toBe(0);
    expect(performance.now() - stoppedAt).toBeLessThan(10_000);
    expect(gateway.output()).toContain('drained; stopped');

    const responses = received.split(/(?=HTTP\/1\.1 )/);
    expect(responses[0]).toMatch(/^HTTP\/1\.1 200/);
    expect(responses[1]).toMatch(/^HTTP\/1\.1 503/);
    expect(responses[1].toLowerCase()).toContain('x-should-retry: true');
    expect(responses[1]).toContain('"code":"shutting_down"');
    expect(responses[1]).not.toContain('circuit_open');
    socket.destroy();
  }, 60_000);

  it('cuts what is still running once --shutdown-grace has passed, and still exits 0', async () => {
    provider = await startMockProvider({ latencyMs: 20_000 });
    gateway = await startGatewayProcess(['--platform', platform, '--upstream', provider.url, '--shutdown-grace', '1']);
    const stuck = fetch(`${gateway.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chat('stuck') }).then(
      (r) => r.status,
      () => 'cut',
    );
    await waitFor(() => provider.stats().total >= 1, 10_000, 'the call to reach the provider');
    const stoppedAt = performance.now();
    gateway.child.kill('SIGTERM');
    expect(await gateway.exited).toBe(0);
    expect(performance.now() - stoppedAt).toBeLessThan(5_000);
    expect(gateway.output()).toMatch(/grace period over, 1 request\(s\) cut/);
    expect(await stuck).toBe('cut');
  }, 60_000);
});
