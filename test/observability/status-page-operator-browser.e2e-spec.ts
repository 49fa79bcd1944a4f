import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { postJson, startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';
import { startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';

/**
 * The status page as an operator reads it, in real headless Chromium: two
 * replicas sharing a Redis of this test's own. Its figures count the model
 * API only, its upstream card and fleet row say the same thing, a frozen
 * Redis is named (and the other replica is unknown, not silent), a lost
 * gateway leaves no figure looking live, its labels say what they count,
 * and it is axe-core clean and unclipped at 390 and 1280 px (screenshots of
 * both go to the temp directory, status-page-390px.png and -1280px.png).
 */

interface Element {
  textContent: string | null;
  children: ArrayLike<Element>;
  className: string;
  hidden: boolean;
  scrollWidth: number;
  clientWidth: number;
  parentElement: Element | null;
  getAttribute(name: string): string | null;
  closest(selector: string): Element | null;
  getBoundingClientRect(): { left: number; right: number; width: number };
  dataset: Record<string, string | undefined>;
}
declare const document: {
  body: Element & { classList: { contains(name: string): boolean } };
  documentElement: Element;
  getElementById(id: string): Element | null;
  querySelector(selector: string): Element | null;
  querySelectorAll(selector: string): Iterable<Element>;
};
declare const window: { innerWidth: number };
declare const axe: {
  run(
    context: unknown,
    options: unknown,
  ): Promise<{ violations: Array<{ id: string; impact: string; nodes: Array<{ target: string[] }> }> }>;
};

const CHROMIUM = '/usr/bin/chromium';
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'];
const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');

describe('the status page as an operator reads it, in headless Chromium', () => {
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
    provider = await startMockProvider({ latencyMs: 5 });
    const flags = [
      '--redis',
      redis.url,
      '--redis-prefix',
      'operator-page',
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
    page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
    await page.goto(`${a.gatewayUrl}/orchestrator`);
    await until(() => document.getElementById('conn')?.textContent === 'live');
  }, 60_000);

  afterAll(async () => {
    redis?.thaw();
    await browser?.close();
    await a?.close();
    await b?.close();
    await provider?.close();
    await redis?.close();
  });

  const until = (fn: () => boolean, timeout = 15_000) => page.waitForFunction(fn, undefined, { timeout });
  const ask = (g: GatewayUnderTest, label: string) =>
    postJson(`${g.gatewayUrl}/v1/chat/completions`, {
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: uniquePrompt(label) }],
    });
  const port = (g: GatewayUnderTest) => new URL(g.gatewayUrl).port;

  it('"Last hour" counts the model API requests only: not scrapes, probes, the page or its event stream', async () => {
    for (let i = 0; i < 5; i++) {
      for (const path of ['/health', '/health/ready', '/orchestrator/metrics', '/orchestrator/snapshot', '/nowhere'])
        await (await fetch(`${a.gatewayUrl}${path}`)).arrayBuffer();
    }
    // A second page, opened and closed: its document and its event stream are requests too.
    const other = await browser.newPage();
    await other.goto(`${a.gatewayUrl}/orchestrator`);
    await other.close();
    for (let i = 0; i < 3; i++) expect((await ask(a, 'hour')).status).toBe(200);
    await until(() => document.getElementById('hour-requests')?.textContent === '3');
    // A snapshot later, it still says 3 (the control requests above would have been counted by now).
    const snapshot = (await (await fetch(`${a.gatewayUrl}/orchestrator/snapshot`)).json()) as {
      hour: { hour: { requests: number; outcomes: Record<string, number> } };
    };
    expect(snapshot.hour.hour.requests).toBe(3);
    expect(snapshot.hour.hour.outcomes.unrouted).toBe(0);
    expect(await page.locator('#h-hour').textContent()).toContain('model API');
  });

  it('labels say what they count: the queue limit beside the queue, the concurrency limit beside the calls', async () => {
    await until(() => [...document.querySelectorAll('#fleet tr')].length === 2);
    const card = await page.locator('[data-upstream] .grid').first().textContent();
    expect(card).toContain('in flight / concurrency limit');
    expect(card).toContain('queued / queue limit');
    const headings = await page.locator('#fleet').locator('xpath=ancestor::table').locator('th').allTextContents();
    expect(headings).toEqual([
      'process',
      'state',
      'breaker',
      'calls here (callers)',
      'upstream calls / concurrency limit',
      'queued',
      'req/s',
      'saved',
      'heard',
    ]);
    const self = await page.locator('#fleet tr').first().locator('td').allTextContents();
    // Nothing waits: the queue column is the count alone, never "0 / <concurrency limit>".
    expect(self[5]).toBe('0');
    expect(self[4]).toMatch(/^0 \/ \d+$/);
  });

  it('a call joined from both replicas is one call for the fleet', async () => {
    provider.configure({ latencyMs: 4_000 });
    try {
      const body = {
        model: 'gpt-4o-mini',
        temperature: 0,
        messages: [{ role: 'user', content: uniquePrompt('fleet once') }],
      };
      const send = (g: GatewayUnderTest) => postJson(`${g.gatewayUrl}/v1/chat/completions`, body);
      const herd = [...Array.from({ length: 3 }, () => send(a)), ...Array.from({ length: 3 }, () => send(b))];
      await until(() => document.getElementById('callers-waiting')?.textContent === '6', 12_000);
      expect(await page.locator('#fleet-calls').textContent()).toMatch(/^1 distinct calls in flight across the fleet/);
      expect((await Promise.all(herd)).map((r) => r.status)).toEqual(Array(6).fill(200));
    } finally {
      provider.configure({ latencyMs: 5 });
    }
  }, 30_000);

  it("the upstream card and this process's fleet row show one breaker state, at every snapshot", async () => {
    // Every snapshot the page draws, the two are read together.
    await page.evaluate(() => {
      const seen: Array<[string, string]> = [];
      (globalThis as unknown as { seen: typeof seen }).seen = seen;
      setInterval(() => {
        const card = document.querySelector('[data-upstream] .breaker-state')?.textContent ?? '';
        const row = document.querySelector('#fleet tr')?.children[2]?.textContent ?? '';
        seen.push([card, row]);
      }, 20);
    });
    provider.setMode('error503');
    try {
      for (let i = 0; i < 2; i++) expect((await ask(a, 'agree')).status).toBe(503);
      await until(() => document.querySelector('[data-upstream] .breaker-state')?.textContent === 'open');
      await page.waitForTimeout(1_500); // a few snapshots with the breaker open
      const seen = await page.evaluate(() => (globalThis as unknown as { seen: Array<[string, string]> }).seen);
      const disagreeing = seen.filter(([card, row]) => card !== 'unknown' && card !== row);
      expect(seen.some(([card]) => card === 'open')).toBe(true);
      expect(disagreeing).toEqual([]);
    } finally {
      provider.setMode('ok');
    }
  }, 30_000);

  for (const width of [390, 1280]) {
    it(`at ${width} px: axe-core finds no violation, and no element overflows its container`, async () => {
      await page.setViewportSize({ width, height: 900 });
      await page.addScriptTag({ path: AXE });
      const violations = await page.evaluate(async () => {
        const result = await axe.run(document, { resultTypes: ['violations'] });
        return result.violations.map(
          (v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`,
        );
      });
      expect(violations).toEqual([]);
      const overflowing = await page.evaluate(() => {
        const found: string[] = [];
        const describe = (el: Element) =>
          `${(el as unknown as { tagName: string }).tagName.toLowerCase()}${el.getAttribute('id') ? '#' + el.getAttribute('id') : ''}.${el.className}`;
        if (document.documentElement.scrollWidth > window.innerWidth)
          found.push(`page scrolls sideways: ${document.documentElement.scrollWidth} > ${window.innerWidth}`);
        for (const el of document.querySelectorAll('main *')) {
          // A table's own scroll region may be wider inside: that region is what must fit (and be focusable).
          const region = el.closest('.scroll');
          if (region && region !== el) continue;
          const parent = el.parentElement;
          if (!parent || (el as unknown as { tagName: string }).tagName === 'svg' || el.closest('svg')) continue;
          const box = el.getBoundingClientRect();
          const outer = parent.getBoundingClientRect();
          if (box.width > 0 && (box.right > outer.right + 1 || box.left < outer.left - 1))
            found.push(`${describe(el)} overflows ${describe(parent)}`);
        }
        for (const region of document.querySelectorAll('.scroll')) {
          if (region.scrollWidth > region.clientWidth && region.getAttribute('tabindex') !== '0')
            found.push(`${describe(region)} scrolls but cannot be focused`);
        }
        return found;
      });
      expect(overflowing).toEqual([]);
      await page.screenshot({ path: join(tmpdir(), `status-page-${width}px.png`), fullPage: true });
      if (width === 1280) {
        // Wide enough for every table: none needs its scroll region.
        const scrolled = await page.evaluate(() =>
          [...document.querySelectorAll('.scroll')]
            .filter((r) => r.scrollWidth > r.clientWidth)
            .map((r) => r.getAttribute('aria-label')),
        );
        expect(scrolled).toEqual([]);
        // The fleet table's last column ("heard") is in view, not cut off.
        const fleet = await page.evaluate(() => {
          const table = document.getElementById('fleet')!.closest('table')!;
          const shown = (table.closest('.scroll') ?? table.closest('section'))!.getBoundingClientRect();
          const last = (table as unknown as { querySelector(s: string): Element })
            .querySelector('th:last-child')
            .getBoundingClientRect();
          return { last: last.right, shown: shown.right };
        });
        expect(fleet.last).toBeLessThanOrEqual(fleet.shown);
      }
    }, 30_000);
  }

  it('a frozen Redis is named; the other replica is "unknown (store unreachable)", not silent', async () => {
    await until(() => document.getElementById('store')?.dataset.state === 'ok');
    expect(await page.locator('#store').textContent()).toContain('Redis: reachable');
    redis.freeze();
    try {
      await until(() => document.getElementById('store')?.dataset.state === 'unreachable');
      expect(await page.locator('#store').textContent()).toMatch(
        /^Redis: unreachable for \d+ s \(.+\)\. The other processes’ state is unknown\./,
      );
      await until(() =>
        [...document.querySelectorAll('#fleet tr')].some(
          (tr) => tr.children[1]?.textContent === 'unknown (store unreachable)',
        ),
      );
      const rows = await page.locator('#fleet tr').allTextContents();
      expect(rows.some((row) => row.includes(`:${port(b)}`) && row.includes('unknown (store unreachable)'))).toBe(true);
      // The longer state still fits a 1280 px page: the fleet table does not need its scroll region.
      await page.setViewportSize({ width: 1280, height: 900 });
      const fleetRegion = await page.evaluate(() => {
        const region = document.getElementById('fleet')!.closest('.scroll')!;
        return { scroll: region.scrollWidth, client: region.clientWidth };
      });
      expect(fleetRegion.scroll).toBeLessThanOrEqual(fleetRegion.client);
      // Long past the time a member turns silent: still unknown, never silent (its silence says nothing now).
      await page.waitForTimeout(4_000);
      const states = await page.locator('#fleet tr td:nth-child(2)').allTextContents();
      expect(states).not.toContain('silent');
    } finally {
      redis.thaw();
    }
    await until(() => document.getElementById('store')?.dataset.state === 'ok');
    await until(() => [...document.querySelectorAll('#fleet tr')].every((tr) => tr.children[1]?.textContent === 'ok'));
  }, 40_000);

  it('when the page loses its gateway: a banner "connection lost, figures as of HH:MM:SS", and the figures greyed and struck', async () => {
    expect(await page.locator('#stale').isHidden()).toBe(true);
    await a.close();
    await until(() => document.body.classList.contains('stale') && document.getElementById('stale')?.hidden === false);
    expect(await page.locator('#stale').textContent()).toMatch(
      /^Connection lost: figures as of \d\d:\d\d:\d\d, not live\.$/,
    );
    const struck = await page.evaluate(() =>
      (
        globalThis as unknown as { getComputedStyle(e: unknown): { textDecorationLine: string; filter: string } }
      ).getComputedStyle(document.getElementById('hour-requests')),
    );
    expect(struck.textDecorationLine).toBe('line-through');
  }, 30_000);
});
