import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { startGateway, type GatewayUnderTest } from '../support/gateway-harness.js';
import { ensureBuilt, startGatewayProcess, type AppProcess } from '../support/gateway-process.js';
import { PLATFORMS } from '../support/platforms.js';

/**
 * The status page cannot be used against the gateway: its event streams are
 * few and bounded (idle watchers never take the callers' connections), its
 * sign-in is JSON-only, same-origin and throttled (wrong keys only), admin keys of a keys file
 * can sign in, and beyond loopback it needs a sign-in unless told otherwise.
 */

const login = (base: string, body: string, headers: Record<string, string> = { 'content-type': 'application/json' }) =>
  fetch(`${base}/orchestrator/login`, { method: 'POST', headers, body });

describe.each(PLATFORMS)('status page access (%s)', (platform) => {
  let gateway: GatewayUnderTest | undefined;
  afterEach(async () => {
    await gateway?.close();
    gateway = undefined;
  });
  const start = async (flags: string[], env: NodeJS.ProcessEnv = {}) => {
    gateway = await startGateway({ flags: ['--platform', platform, ...flags], env });
    return gateway.gatewayUrl;
  };

  it('sign-in is JSON only and same-origin only: a cross-site form post is refused', async () => {
    const base = await start(['--gateway-keys', 'page-key-1']);
    const form = await login(base, 'key=page-key-1', { 'content-type': 'application/x-www-form-urlencoded' });
    expect(form.status).toBe(415);
    expect(form.headers.get('set-cookie')).toBeNull();
    const crossSite = await login(base, '{"key":"page-key-1"}', {
      'content-type': 'application/json',
      origin: 'https://evil.example',
    });
    expect(crossSite.status).toBe(403);
    expect(((await crossSite.json()) as { error: { code: string } }).error.code).toBe('cross_site_request');
    const sameSite = await login(base, '{"key":"page-key-1"}', { 'content-type': 'application/json', origin: base });
    expect(sameSite.status).toBe(204);
  });

  it('wrong keys in a row from one address: after 10, wrong keys wait (429, Retry-After); the right key still signs in', async () => {
    const base = await start(['--gateway-keys', 'page-key-1']);
    for (let i = 0; i < 10; i++) expect((await login(base, `{"key":"wrong-${i}"}`)).status).toBe(401);
    const throttled = await login(base, '{"key":"wrong-again"}');
    expect(throttled.status).toBe(429);
    expect(Number(throttled.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(((await throttled.json()) as { error: { code: string } }).error.code).toBe('too_many_sign_ins');
    expect((await login(base, '{"key":"page-key-1"}')).status).toBe(204);
  });

  it('with a keys file and no gateway keys, an "admin": true key signs in and watches; other keys cannot', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'status-keys-'));
    const file = join(dir, 'keys.json');
    writeFileSync(
      file,
      JSON.stringify({ 'sk-admin-0001': { name: 'ops', admin: true }, 'sk-team-0001': { name: 'team' } }),
    );
    const base = await start(['--keys-file', file]);
    expect((await login(base, '{"key":"sk-team-0001"}')).status).toBe(401);
    const signedIn = await login(base, '{"key":"sk-admin-0001"}');
    expect(signedIn.status).toBe(204);
    const cookie = signedIn.headers.get('set-cookie')!.split(';')[0];
    const snapshot = await fetch(`${base}/orchestrator/snapshot`, { headers: { cookie } });
    expect(snapshot.status).toBe(200);
    // A forged cookie (what a secret derived from no key would allow) is refused.
    const forged = await fetch(`${base}/orchestrator/snapshot`, {
      headers: { cookie: `npo_status=9999999999.${'A'.repeat(43)}` },
    });
    expect(forged.status).toBe(401);
  });

  it('beyond loopback without a key that may sign in: the page is locked, unless --status-public', async () => {
    const base = await start(['--host', '0.0.0.0']);
    const page = await fetch(`${base}/orchestrator`);
    expect(page.status).toBe(403);
    expect(await page.text()).toContain('--status-public');
    expect((await fetch(`${base}/orchestrator/snapshot`)).status).toBe(403);
    expect((await fetch(`${base}/orchestrator/events`)).status).toBe(403);
    await gateway!.close();
    const open = await start(['--host', '0.0.0.0', '--status-public']);
    expect((await fetch(`${open}/orchestrator/snapshot`)).status).toBe(200);
  });
});

describe('idle event-stream watchers cannot starve the gateway', () => {
  let provider: MockProvider;
  let gateway: AppProcess;
  const sockets: Socket[] = [];
  beforeAll(async () => {
    await ensureBuilt();
    provider = await startMockProvider({ latencyMs: 5 });
    gateway = await startGatewayProcess(['--upstream', provider.url]);
  }, 180_000);
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await gateway?.stop();
    await provider?.close();
  });

  it('3,000 never-reading connections to /orchestrator/events: /health/live and a chat request still answered while they hold on', async () => {
    const { port } = new URL(gateway.url);
    const answered = { streams: 0, refused: 0, refusedAndClosed: 0 };
    await Promise.all(
      Array.from({ length: 3_000 }, (_, i) => {
        // From 100 loopback addresses: the per-client cap (4) and the total cap (32) both come into play.
        const socket = connect({ port: Number(port), host: '127.0.0.1', localAddress: `127.0.0.${2 + (i % 100)}` });
        sockets.push(socket);
        socket.on('error', () => undefined);
        let head = '';
        socket.on('data', (chunk: Buffer) => {
          if (head) return;
          head = chunk.toString('latin1');
          if (head.startsWith('HTTP/1.1 200')) {
            answered.streams++;
            socket.pause(); // a watcher that never reads
          } else if (head.startsWith('HTTP/1.1 429')) {
            answered.refused++;
            if (/connection: close/i.test(head)) socket.once('end', () => answered.refusedAndClosed++);
          }
        });
        return new Promise<void>((resolve) => {
          socket.once('connect', () => {
            socket.write('GET /orchestrator/events HTTP/1.1\r\nhost: localhost\r\n\r\n');
            resolve();
          });
          socket.once('error', () => resolve());
        });
      }),
    );
    for (
      const deadline = Date.now() + 240_000;
      answered.streams + answered.refusedAndClosed < 3_000 && Date.now() < deadline;
    ) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(answered.streams).toBe(32);
    // Every refused watcher was told so and let go of its connection.
    expect(answered.refusedAndClosed).toBe(3_000 - 32);

    // Answered at all: a gateway whose connections were all taken by the watchers would never answer, and the test
    // would fail on its timeout.
    const health = await fetch(`${gateway.url}/health/live`);
    expect(health.status).toBe(200);
    const chat = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-model', messages: [{ role: 'user', content: 'still served' }] }),
    });
    expect(chat.status).toBe(200);
    // ...while the 32 streams were still held open by their never-reading watchers.
    expect(sockets.filter((socket) => !socket.destroyed).length).toBeGreaterThanOrEqual(32);
  }, 300_000);
});
