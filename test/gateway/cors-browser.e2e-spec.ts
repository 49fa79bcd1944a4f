import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser } from 'playwright-core';
import { startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';

/**
 * CORS as a browser sees it: a page served from one loopback origin calls the
 * gateway on another, in real headless Chromium (Debian's package; nothing is
 * downloaded). The page sends JSON with an Authorization header, so the browser
 * sends a preflight first, and reads the headers the gateway exposes.
 */

const CHROMIUM = '/usr/bin/chromium';
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'];

/** A page on its own origin; the test drives it through page.evaluate. */
async function startPageServer(): Promise<{ url: string; close: () => Promise<void> }> {
  const server: Server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end('<!doctype html><title>app</title><p>app</p>');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('CORS in headless Chromium', () => {
  let browser: Browser;
  let page: Awaited<ReturnType<typeof startPageServer>>;
  let open: GatewayUnderTest;
  let closed: GatewayUnderTest;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(
        `Chromium is missing at ${CHROMIUM}: install it with "apt-get install -y chromium" (npm test does it first, as root: scripts/test-prerequisites.mjs).`,
      );
    }
    browser = await chromium.launch({ executablePath: CHROMIUM, args: FLAGS, headless: true });
    page = await startPageServer();
    // "localhost" for the gateway, 127.0.0.1 for the page: two origins, as in production.
    open = await startGateway({ flags: ['--cors', '*', '--gateway-keys', 'browser-key'] });
    closed = await startGateway({ flags: [] });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await page?.close();
    await open?.close();
    await closed?.close();
  });

  /** Runs a fetch from the page and returns what the page could see of the answer. */
  async function fetchFromPage(gatewayUrl: string, body: unknown, stream = false) {
    const tab = await browser.newPage();
    try {
      await tab.goto(page.url);
      return await tab.evaluate(
        async ({ url, body, stream }) => {
          try {
            const response = await fetch(url, {
              method: 'POST',
              headers: { 'content-type': 'application/json', authorization: 'Bearer browser-key' },
              body: JSON.stringify(body),
            });
            const text = await response.text();
            return {
              ok: true,
              status: response.status,
              dedup: response.headers.get('x-orchestrator-dedup'),
              requestId: response.headers.get('x-request-id'),
              shouldRetry: response.headers.get('x-should-retry'),
              text: stream ? text : text.slice(0, 2000),
            };
          } catch (error) {
            return { ok: false, error: String(error) };
          }
        },
        { url: `${gatewayUrl.replace('127.0.0.1', 'localhost')}/v1/chat/completions`, body, stream },
      );
    } finally {
      await tab.close();
    }
  }

  it('a page on another origin gets answers, streams and errors, and reads the exposed headers', async () => {
    const prompt = uniquePrompt('from the browser');
    const body = { model: 'mock-model', messages: [{ role: 'user', content: prompt }] };
    const first = await fetchFromPage(open.gatewayUrl, body);
    expect(first).toMatchObject({ ok: true, status: 200, dedup: 'miss' });
    expect(first.requestId).toMatch(/^[\w.:-]{8,}$/);
    expect(JSON.parse(first.text!).choices[0].message.content).toBe(`Echo: ${prompt}`);
    const again = await fetchFromPage(open.gatewayUrl, body);
    expect(again).toMatchObject({ ok: true, status: 200, dedup: 'cached' });

    const streamed = await fetchFromPage(open.gatewayUrl, { ...body, stream: true }, true);
    expect(streamed).toMatchObject({ ok: true, status: 200 });
    expect(streamed.text).toContain('data: [DONE]');

    const refused = await fetchFromPage(open.gatewayUrl, { ...body, stream: 'yes' });
    expect(refused).toMatchObject({ ok: true, status: 400, shouldRetry: 'false' });
    expect(open.provider.stats().total).toBe(2);
  }, 60_000);

  it('without --cors, the browser blocks the call (the preflight is not answered)', async () => {
    const result = await fetchFromPage(closed.gatewayUrl, {
      model: 'mock-model',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(result.ok).toBe(false);
    expect(result.error).toMatch(/Failed to fetch|TypeError/);
    expect(closed.provider.stats().total).toBe(0);
  }, 60_000);
});
