import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { postJson, startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';
import { startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';

/**
 * The status page of a fleet, in real headless Chromium: two replicas share
 * one Redis (a redis-server of this test's own) and one provider. The page of
 * one lists both, shows the callers of both waiting on the one call of a
 * herd, and during an outage keeps the provider's own 503 on the page beside
 * the flood of refusals it causes. The screenshot of the outage goes to
 * FLEET_SCREENSHOT (docs/status-page-fleet.png when the docs are refreshed), the one of
 * the herd beside it (`-herd.png`).
 */

interface Element {
  textContent: string | null;
  children: ArrayLike<Element>;
}
declare const document: {
  getElementById(id: string): Element | null;
  querySelectorAll(selector: string): Iterable<Element>;
};

const CHROMIUM = '/usr/bin/chromium';
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'];
const SCREENSHOT = process.env.FLEET_SCREENSHOT ?? join(tmpdir(), 'status-page-fleet.png');
// Long enough that both replicas have every caller of the herd in while the call runs, heartbeats a second apart
// and the requests of a herd arriving over a second or more on a busy machine.
const LATENCY_MS = 5_000;

describe('the status page of two replicas sharing a Redis, in headless Chromium', () => {
  let redis: OwnedRedis;
  let provider: MockProvider;
  let a: GatewayUnderTest;
  let b: GatewayUnderTest;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(
        `Chromium is missing at ${CHROMIUM}: install it with "apt-get install -y chromium" (npm test does it first, as root: scripts/test-prerequisites.mjs).`,
      );
    }
    redis = await startOwnedRedis();
    provider = await startMockProvider({ latencyMs: LATENCY_MS });
    const flags = [
      '--redis',
      redis.url,
      '--redis-prefix',
      'fleet-page',
      '--breaker-failures',
      '2',
      '--retries',
      '0',
      '--breaker-open',
      '60',
    ];
    a = await startGateway({ provider, flags });
    b = await startGateway({ provider, flags });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: FLAGS, headless: true });
    page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
    await page.goto(`${a.gatewayUrl}/orchestrator`);
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await a?.close();
    await b?.close();
    await provider?.close();
    await redis?.close();
  });

  const until = (fn: () => boolean, timeout = 15_000) => page.waitForFunction(fn, undefined, { timeout });
  const port = (g: GatewayUnderTest) => new URL(g.gatewayUrl).port;

  it('lists both replicas, on the page and in /health', async () => {
    // A process's first beat may go out before it listens (no port yet); the next one names it.
    const ports = [port(a), port(b)];
    await page.waitForFunction(
      (ports) => {
        const rows = [...document.querySelectorAll('#fleet tr')];
        return (
          rows.filter((tr) => tr.children[1]?.textContent === 'ok').length === 2 &&
          ports.every((p) => rows.some((tr) => tr.textContent?.includes(`:${p}`)))
        );
      },
      ports,
      { timeout: 15_000 },
    );
    const rows = await page.locator('#fleet tr').allTextContents();
    expect(rows.some((row) => row.includes(`:${port(a)} (this page)`))).toBe(true);
    expect(rows.some((row) => row.includes(`:${port(b)}`) && !row.includes('this page'))).toBe(true);
    const health = (await (await fetch(`${b.gatewayUrl}/health`)).json()) as {
      fleet: Array<{ port: number; self: boolean; state: string }>;
    };
    expect(health.fleet.map((m) => [m.port, m.self, m.state]).sort()).toEqual(
      [
        [Number(port(a)), false, 'ok'],
        [Number(port(b)), true, 'ok'],
      ].sort(),
    );
  });

  it('shows the callers of both replicas waiting on the one call of a herd', async () => {
    const body = {
      model: 'gpt-4o-mini',
      temperature: 0,
      messages: [{ role: 'user', content: uniquePrompt('fleet herd') }],
    };
    const send = (g: GatewayUnderTest) =>
      postJson(`${g.gatewayUrl}/v1/chat/completions`, body, { authorization: 'Bearer sk-fleet' });
    const herd = [...Array.from({ length: 15 }, () => send(a)), ...Array.from({ length: 15 }, () => send(b))];
    // While the one call runs: 30 callers on one call (15 here, 15 on the other replica), in the page's own words.
    await until(() => document.getElementById('callers-waiting')?.textContent === '30', LATENCY_MS + 10_000);
    await page.screenshot({ path: SCREENSHOT.replace(/\.png$/, '-herd.png'), fullPage: true });
    const [flight] = await page.locator('#flights tr').allTextContents();
    expect(flight).toContain('chat');
    expect(flight).toMatch(/30/);
    expect(flight).toContain(`:${port(b)}`);
    expect((await Promise.all(herd)).map((r) => r.status)).toEqual(Array(30).fill(200));
    expect(provider.stats().byRoute['/v1/chat/completions']).toBe(1);
    // Each replica counts what its own joined callers saved, also the one whose callers joined the other's call.
    for (const g of [a, b]) {
      const snapshot = (await (await fetch(`${g.gatewayUrl}/orchestrator/snapshot`)).json()) as {
        saved: { calls: number; tokens: number };
      };
      expect(snapshot.saved.calls).toBeGreaterThanOrEqual(14);
      expect(snapshot.saved.tokens).toBeGreaterThan(0);
    }
    // Once answered, the last hour counts the herd and its latency.
    await until(() => Number(document.getElementById('hour-requests')?.textContent?.replace(/,/g, '')) >= 15);
    expect(await page.locator('#hour-p95').textContent()).toMatch(/\d/);
    expect(await page.locator('#by-model tr').first().textContent()).toContain('gpt-4o-mini');
  }, 40_000);

  it("keeps the provider's own 503 on the page during the outage, beside the refusals it causes", async () => {
    provider.configure({ latencyMs: 5 });
    provider.setMode('error503');
    const ask = () =>
      postJson(`${a.gatewayUrl}/v1/chat/completions`, {
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: uniquePrompt('outage') }],
      });
    expect((await ask()).status).toBe(503);
    expect((await ask()).status).toBe(503);
    // More refusals than the list of recent errors keeps: the cause must not scroll away.
    for (let i = 0; i < 25; i++) expect((await ask()).json?.error?.code).toBe('circuit_open');
    await until(() =>
      [...document.querySelectorAll('#causes tr')].some(
        (tr) => tr.textContent?.startsWith('circuit_open') && tr.children[3]?.textContent === '25',
      ),
    );
    const causes = await page.locator('#causes tr').allTextContents();
    expect(causes.some((row) => row.startsWith('upstream_error (provider)503'))).toBe(true);
    // The old list scrolled: only refusals are left in it.
    const recent = await page.locator('#errors tr').allTextContents();
    expect(recent.every((row) => row.includes('circuit_open'))).toBe(true);
    // Both replicas see the shared breaker open.
    await until(
      () =>
        [...document.querySelectorAll('#fleet tr')].filter((tr) => tr.children[2]?.textContent === 'open').length === 2,
    );
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    provider.setMode('ok');
  }, 30_000);
});
