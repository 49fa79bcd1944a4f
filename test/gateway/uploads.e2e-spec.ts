import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI, { toFile } from 'openai';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PLATFORMS } from '../support/platforms.js';
import { send, startGateway, type GatewayUnderTest } from '../support/gateway-harness.js';

/**
 * Uploads (`POST /v1/audio/transcriptions`, multipart/form-data) are relayed
 * as the bytes the client sent, with its Content-Type (the boundary is in it),
 * and the provider's answer, whatever its type, comes back unchanged.
 */

interface Received {
  path: string;
  contentType?: string;
  body: Buffer;
}

/** An upstream that records what reached it and answers like OpenAI's transcription route. */
async function startRecordingUpstream(): Promise<{ url: string; received: Received[]; close: () => Promise<void> }> {
  const received: Received[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ path: req.url ?? '', contentType: req.headers['content-type'], body: Buffer.concat(chunks) });
      const text = /name="response_format"\r\n\r\ntext/.test(Buffer.concat(chunks).toString('latin1'));
      if (text) {
        res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
        res.end('hello from the audio\n');
      } else {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"text":"hello from the audio","usage":{"type":"duration","seconds":1.0}}');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const BOUNDARY = '----gateway-test-boundary';
function multipart(fields: Record<string, string>, file: Buffer): Buffer {
  const parts = Object.entries(fields).map(
    ([name, value]) => `--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`,
  );
  return Buffer.concat([
    Buffer.from(parts.join('')),
    Buffer.from(
      `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`,
    ),
    file,
    Buffer.from(`\r\n--${BOUNDARY}--\r\n`),
  ]);
}

describe.each(PLATFORMS)('uploads on %s', (platform) => {
  let upstream: Awaited<ReturnType<typeof startRecordingUpstream>>;
  let g: GatewayUnderTest;
  beforeAll(async () => {
    upstream = await startRecordingUpstream();
    g = await startGateway({ flags: ['--platform', platform, '--provider', 'openai', '--upstream', upstream.url] });
  });
  afterAll(async () => {
    await g.close();
    await upstream.close();
  });

  it('relays the multipart bytes and Content-Type unchanged, and the answer of any type', async () => {
    const audio = Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 7) % 256));
    const body = multipart({ model: 'whisper-1', response_format: 'text' }, audio);
    const r = await send(`${g.gatewayUrl}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` },
      body: body as unknown as string,
    });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(r.text).toBe('hello from the audio\n');
    const seen = upstream.received.at(-1)!;
    expect(seen.path).toBe('/v1/audio/transcriptions');
    expect(seen.contentType).toBe(`multipart/form-data; boundary=${BOUNDARY}`);
    expect(seen.body.equals(body)).toBe(true);
  });

  it('the openai SDK transcribes through it; JSON bodies there are refused with 415', async () => {
    const client = new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: 'sk-upload' });
    const result = await client.audio.transcriptions.create({
      model: 'whisper-1',
      file: await toFile(Buffer.from('RIFF....WAVE'), 'a.wav'),
    });
    expect(result.text).toBe('hello from the audio');
    const before = upstream.received.length;
    const json = await send(`${g.gatewayUrl}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"model":"whisper-1"}',
    });
    expect(json.status).toBe(415);
    expect(json.json.error.message).toContain('multipart/form-data');
    expect(upstream.received.length).toBe(before);
  });
});
