import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';

/**
 * The live status page in real headless Chromium (Debian's package, never a
 * downloaded browser): signed in with a gateway key, it follows a herd and a
 * breaker opening through the gateway, live over SSE, without a reload. The
 * screenshot taken during the outage goes to STATUS_SCREENSHOT (docs/status-page.png
 * when the docs are refreshed), else to the temp directory.
 */

// The page's DOM, as far as the functions run inside the browser use it (the tests compile without the DOM library).
interface Element {
  textContent: string | null;
}
declare const document: {
  getElementById(id: string): Element | null;
  querySelector(selector: string): Element | null;
  querySelectorAll(selector: string): Iterable<Element>;
};

const CHROMIUM = '/usr/bin/chromium';
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'];
const KEY = 'status-page-key-91c2';
const SCREENSHOT = process.env.STATUS_SCREENSHOT ?? join(tmpdir(), 'status-page.png');

describe('status page in headless Chromium', () => {
  let browser: Browser;
  let g: GatewayUnderTest;
  let page: Page;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(
        `Chromium is missing at ${CHROMIUM}: install it with "apt-get install -y chromium" (npm test does it first, as root: scripts/test-prerequisites.mjs).`,
      );
    }
    browser = await chromium.launch({ executablePath: CHROMIUM, args: FLAGS, headless: true });
    g = await startGateway({
      flags: [
        '--gateway-keys',
        KEY,
        '--breaker-failures',
        '2',
        '--retries',
        '0',
        '--breaker-open',
        '60',
        '--probe-interval',
        '0.2',
      ],
      mock: { latencyMs: 400 },
    });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await g?.close();
  });

  const text = (selector: string) => page.locator(selector).first().textContent();
  const until = (fn: () => boolean) => page.waitForFunction(fn, undefined, { timeout: 10_000 });

  it('asks for a key first; the events stream needs the session', async () => {
    expect((await fetch(`${g.gatewayUrl}/orchestrator/events`)).status).toBe(401);
    expect((await fetch(`${g.gatewayUrl}/orchestrator/snapshot`)).status).toBe(401);
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    page = await context.newPage();
    await page.goto(`${g.gatewayUrl}/orchestrator`);
    await page.fill('#key', 'not-the-key');
    await page.click('button[type=submit]');
    await page.waitForFunction(() => document.getElementById('message')?.textContent !== '', undefined, {
      timeout: 5_000,
    });
    expect(await page.locator('#upstreams').count()).toBe(0);

    await page.fill('#key', KEY);
    await page.click('button[type=submit]');
    // Signed in, the page reloads as the status page.
    await page.waitForSelector('#upstreams', { state: 'attached', timeout: 10_000 });
    await until(() => document.getElementById('conn')?.textContent === 'live');
    const cookies = await context.cookies();
    expect(cookies.find((c) => c.name === 'npo_status')).toMatchObject({
      httpOnly: true,
      sameSite: 'Strict',
      path: '/orchestrator',
    });
    // Before any call, the upstream is listed (each upstream is, from start-up) but nobody knows its state.
    expect(await text('#upstreams')).toMatch(/^upstream unknown/);
  });

  it('shows a herd: one miss, the rest joined, calls and tokens saved, priced', async () => {
    const openai = new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: KEY, maxRetries: 0 });
    const params = {
      model: 'gpt-4o-mini',
      temperature: 0,
      messages: [{ role: 'user' as const, content: uniquePrompt('page herd') }],
    };
    await Promise.all(Array.from({ length: 20 }, () => openai.chat.completions.create(params)));
    expect(g.provider.stats().byRoute['/v1/chat/completions']).toBe(1);
    await until(() => document.getElementById('total-joined')?.textContent === '19');
    expect(await text('#total-miss')).toBe('1');
    expect(await text('#calls-saved')).toBe('19');
    expect(await text('#upstream-calls')).toBe('1');
    expect(Number((await text('#tokens-saved'))!.replace(/,/g, ''))).toBeGreaterThan(0);
    expect(await text('#money-saved')).toMatch(/^\$\d+(\.\d+)?(e-\d+)?$/);
    expect(await text('[data-upstream="upstream"] .breaker-state')).toBe('closed');
    expect(await page.locator('#tenants tr').count()).toBe(1);
    // The per-second chart draws the burst once its second is over (the totals above come at once).
    await until(() => document.querySelector('#chart rect') !== null);
  });

  it('shows the breaker opening, its timeline, refusals and errors as they happen; then its recovery', async () => {
    const openai = new OpenAI({ baseURL: `${g.gatewayUrl}/v1`, apiKey: KEY, maxRetries: 0 });
    g.provider.setMode('error503');
    for (let i = 0; i < 2; i++) {
      await expect(
        openai.chat.completions.create({
          model: 'gpt-4o-mini',
          messages: [{ role: 'user', content: uniquePrompt('fail') }],
        }),
      ).rejects.toMatchObject({ status: 503 });
    }
    for (let i = 0; i < 3; i++) {
      await expect(
        openai.chat.completions.create({
          model: 'gpt-4o-mini',
          messages: [{ role: 'user', content: uniquePrompt('refused') }],
        }),
      ).rejects.toMatchObject({ code: 'circuit_open' });
    }
    await until(() => document.querySelector('[data-upstream="upstream"] .breaker-state')?.textContent === 'open');
    expect(await text('[data-upstream="upstream"] .timeline li')).toMatch(/closed → open/);
    await until(() => [...document.querySelectorAll('#refusals tr')].some((tr) => tr.textContent === 'circuit open3'));
    const errors = await page.locator('#errors tr').allTextContents();
    expect(errors.filter((row) => row.includes('circuit_open'))).toHaveLength(3);
    expect(errors.filter((row) => row.includes('503'))).toHaveLength(5);
    expect(await text('#upstream-failed')).toBe('2');
    await page.screenshot({ path: SCREENSHOT, fullPage: true });

    // The provider comes back: the health probe closes the breaker, and the page says so.
    g.provider.setMode('ok');
    await until(() => document.querySelector('[data-upstream="upstream"] .breaker-state')?.textContent === 'closed');
    expect(await text('[data-upstream="upstream"] .timeline li')).toMatch(/open → closed/);
  });
});
