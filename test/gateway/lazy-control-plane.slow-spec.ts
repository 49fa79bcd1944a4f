import { afterEach, describe, expect, it } from '@jest/globals';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect } from 'node:net';
import { join } from 'node:path';
import OpenAI from 'openai';
import { ensureBuilt, startGatewayProcess, startMockProcess, type AppProcess } from '../support/gateway-process.js';

/**
 * `npm start` serves the proxied routes with the gateway's core alone: Nest and its platform (which would double the
 * start and hold some 40 MB at rest) are loaded by the first control route (health, metrics, the status page, an
 * unknown path), which is then answered as before. Seen in the gateway process itself: a preload writes down every
 * package its modules import.
 */

const PRELOAD = join(process.cwd(), 'test/support/package-imports-preload.mjs');
const SIGNAL_CHECK = join(process.cwd(), 'test/support/signal-check-preload.mjs');

const framework = (name: string) => /^(@nestjs\/|fastify$|express$)/.test(name);

describe('a gateway started with `npm start`', () => {
  const started: AppProcess[] = [];
  let dir: string | undefined;
  afterEach(async () => {
    await Promise.all(started.splice(0).map((app) => app.stop()));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function start(flags: string[] = []): Promise<{
    gateway: AppProcess;
    imported: () => string[];
    /** How many SIGTERM listeners the gateway had when it wrote that it listens. */
    signalHandlersAtListening: () => string;
  }> {
    await ensureBuilt();
    dir = mkdtempSync(join(tmpdir(), 'gateway-imports-'));
    const file = join(dir, 'imports.txt');
    const signals = join(dir, 'signals.txt');
    const mock = await startMockProcess(['--latency', '0']);
    started.push(mock);
    const gateway = await startGatewayProcess(
      ['--upstream', mock.url, ...flags],
      { PACKAGE_IMPORTS_FILE: file, SIGNAL_CHECK_FILE: signals },
      undefined,
      ['--import', PRELOAD, '--import', SIGNAL_CHECK],
    );
    started.push(gateway);
    const imported = () => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : []);
    const signalHandlersAtListening = () => (existsSync(signals) ? readFileSync(signals, 'utf8').trim() : 'none');
    return { gateway, imported, signalHandlersAtListening };
  }

  it.each([['fastify'], ['express']])(
    'on %s: answers proxied requests without loading Nest; the first control route loads it and is answered',
    async (platform) => {
      const { gateway, imported } = await start(['--platform', platform]);
      const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'sk-lazy', maxRetries: 0 });
      const answer = await client.chat.completions.create({
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: 'hello before any control route' }],
      });
      expect(answer.choices[0].message.content).toEqual(expect.any(String));
      // The preload saw the packages the gateway imports at start (it works), and no framework among them.
      expect(imported()).toContain('prom-client');
      expect(imported().filter(framework)).toEqual([]);

      // Control routes asked for at once while Nest loads: each gets its answer, a body included.
      const [live, ready, unknown] = await Promise.all([
        fetch(`${gateway.url}/health/live`),
        fetch(`${gateway.url}/health/ready`),
        fetch(`${gateway.url}/v1/no-such-route`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ question: 'x'.repeat(10_000) }),
        }),
      ]);
      expect(live.status).toBe(200);
      expect(await live.json()).toMatchObject({ status: 'ok' });
      expect(ready.status).toBe(200);
      expect(unknown.status).toBe(404);
      expect(await unknown.json()).toMatchObject({ error: { code: 'unknown_url' } });
      expect(imported()).toEqual(
        expect.arrayContaining([
          '@nestjs/core',
          platform === 'fastify' ? '@nestjs/platform-fastify' : '@nestjs/platform-express',
        ]),
      );

      // The proxied routes are unchanged by it.
      const again = await client.chat.completions.create({
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: 'hello after a control route' }],
      });
      expect(again.choices[0].message.content).toEqual(expect.any(String));
    },
  );

  /** The raw bytes a connection answers to `request` (the gateway closes it after its error). */
  function rawAnswer(url: string, request: string): Promise<string> {
    const { hostname, port } = new URL(url);
    return new Promise((resolve, reject) => {
      const socket = connect(Number(port), hostname, () => socket.end(request));
      let answer = '';
      socket.on('data', (bytes: Buffer) => (answer += bytes.toString('latin1')));
      socket.on('error', reject);
      socket.on('close', () => resolve(answer));
    });
  }

  it('answers a request its HTTP parser refuses with a JSON error that names the problem', async () => {
    const { gateway } = await start();
    const garbage = await rawAnswer(gateway.url, 'NOT HTTP AT ALL\r\n\r\n');
    expect(garbage).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(JSON.parse(garbage.split('\r\n\r\n')[1])).toMatchObject({ error: { code: 'malformed_request' } });
    const huge = await rawAnswer(
      gateway.url,
      `GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ${'a'.repeat(40_000)}\r\n\r\n`,
    );
    expect(huge).toMatch(/^HTTP\/1\.1 431 /);
    expect(JSON.parse(huge.split('\r\n\r\n')[1])).toMatchObject({ error: { code: 'headers_too_large' } });
    // Still serving.
    expect((await fetch(`${gateway.url}/health/live`)).status).toBe(200);
  });

  it.each([['before'], ['after']])('stops gracefully on SIGTERM %s the control routes are loaded', async (when) => {
    const { gateway, imported, signalHandlersAtListening } = await start();
    // It handles SIGTERM by the time it says it listens: a harness or supervisor that stops it as soon as it reads the
    // line gets a drain, not the signal's default (which ended it, now and then, before the handler came).
    expect(signalHandlersAtListening()).toBe('1');
    if (when === 'after') expect((await fetch(`${gateway.url}/health/live`)).status).toBe(200);
    expect(imported().some(framework)).toBe(when === 'after');
    gateway.child.kill('SIGTERM');
    expect(await gateway.exited).toBe(0);
    expect(gateway.output()).toContain('gateway: drained; stopped');
  });
});
