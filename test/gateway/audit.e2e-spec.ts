import { beforeAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RepeatAudit } from '../../apps/gateway/src/audit/repeat-audit.js';
import { repeatChart } from '../../apps/gateway/src/audit/repeat-chart.js';
import { postJson, startGateway, uniquePrompt } from '../support/gateway-harness.js';
import { ROOT, ensureBuilt } from '../support/gateway-process.js';
import { ownChild } from '../support/children.js';

/**
 * `npm run audit` on generated inputs whose answers are known by
 * construction: distinct turns, plus repeats placed at known gaps, from the
 * same user or another, with malformed and hostile lines mixed in.
 */

const T0 = Date.parse('2026-03-01T00:00:00Z');
const MIN = 60_000;

interface Generated {
  lines: string[];
  turns: number;
}

/** 1000 distinct turns, then repeats at 30 s (10), 3 min (20), 30 min (30), 12 h (40) and 3 days (50). */
function generate(): Generated {
  const lines: string[] = [];
  const turn = (time: number, user: string, content: string) =>
    JSON.stringify({ time: new Date(time).toISOString(), user, messages: [{ role: 'user', content }] });
  let time = T0;
  for (let i = 0; i < 1000; i++) lines.push(turn((time += 1000), `user-${i % 7}`, `distinct question ${i}`));
  const groups: [number, number, boolean][] = [
    [10, 0.5 * MIN, true],
    [20, 3 * MIN, true],
    [30, 30 * MIN, true],
    [40, 12 * 60 * MIN, false],
    [50, 3 * 24 * 60 * MIN, false],
  ];
  // Each repeated prompt appears twice: once, then again after its gap (so the time order holds, the first
  // occurrences are laid out far apart and the second ones after them).
  let n = 0;
  const later: [number, string][] = [];
  for (const [count, gap, sameUser] of groups) {
    for (let i = 0; i < count; i++) {
      const at = (time += 10 * 24 * 60 * MIN);
      const content = `repeated ${n++}`;
      lines.push(turn(at, 'first', content));
      later.push([at + gap, turn(at + gap, sameUser ? 'first' : 'second', content)]);
    }
  }
  lines.push(...later.sort((a, b) => a[0] - b[0]).map(([, line]) => line));
  // Time order across the whole file.
  const parsed = lines
    .map((l) => [Date.parse((JSON.parse(l) as { time: string }).time), l] as const)
    .sort((a, b) => a[0] - b[0]);
  return { lines: parsed.map(([, l]) => l), turns: 1000 + 2 * 150 };
}

const HOSTILE = [
  'not json at all',
  '{}',
  '{"time": "yesterday-ish", "messages": []}',
  '{"time": 1e400, "messages": []}',
  '{"time": "2026-03-01T00:00:00Z"}',
  '[1, 2, 3]',
  '"a string"',
  '{"time": "2026-03-01T00:00:00Z", "__proto__": {"polluted": true}}',
  '['.repeat(100_000) + ']'.repeat(100_000),
  '\u0000\u0001\u0002',
];

function runAudit(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [join(ROOT, 'dist/apps/gateway/src/audit/main.js'), ...args],
      { timeout: 60_000 },
      (error, stdout, stderr) =>
        resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    ownChild(child, 'audit');
  });
}

describe('the repeat-rate audit', () => {
  it('gives the exact shares of a generated log, whatever malformed or hostile lines it holds', () => {
    const { lines, turns } = generate();
    const audit = new RepeatAudit();
    for (const line of [...lines.slice(0, 500), ...HOSTILE, ...lines.slice(500)]) audit.addLine(line);
    const report = audit.report();
    expect(report.turns).toBe(turns);
    expect(report.repeatShare).toEqual({
      '1m': 10 / turns,
      '5m': 30 / turns,
      '1h': 60 / turns,
      '24h': 100 / turns,
      all: 150 / turns,
    });
    expect(report.sameUserShare).toBeCloseTo(60 / 150, 12);
    expect(report.sameUserShareByWindow['5m']).toBe(1);
    expect(report.savings['5m'].calls).toBe(30);
    expect(report.malformedLines).toBe(HOSTILE.length);
    expect(report.topKeys[0].count).toBe(2);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('saves, per window, only what a window kept from the paid call would still hold', () => {
    const audit = new RepeatAudit();
    // The same request every 4 minutes, 5 times, 2 USD each.
    for (let i = 0; i < 5; i++) audit.add({ time: T0 + i * 4 * MIN, user: 'u', key: 'k', cost: 2 });
    const report = audit.report();
    // Each of the 4 repeats is within 5 minutes of the previous one...
    expect(report.repeatShare['5m']).toBe(4 / 5);
    // ...but a 5-minute window from the paid call at 0 min holds at 4 min, not at 8 (paid again), holds at 12, not 16.
    expect(report.savings['5m']).toEqual({ calls: 2, usd: 4 });
    expect(report.savings['1h']).toEqual({ calls: 4, usd: 8 });
    expect(report.savings['1m']).toEqual({ calls: 0, usd: 0 });
  });

  it('reads the request log: repeats by dedup key, money from cost and saved, failed answers left out', () => {
    const audit = new RepeatAudit();
    const line = (t: number, key: string, extra: object = {}) =>
      JSON.stringify({
        time: new Date(T0 + t).toISOString(),
        tenant: 'aaaa',
        key,
        outcome: 'miss',
        status: 200,
        cost: 0.5,
        saved: 0,
        ...extra,
      });
    audit.addLine(line(0, 'k1'));
    audit.addLine(line(1000, 'k1', { outcome: 'cached', cost: 0, saved: 0.5 }));
    audit.addLine(line(2000, 'k2', { status: 500 }));
    audit.addLine(JSON.stringify({ time: new Date(T0).toISOString(), dropped: 7 }));
    const report = audit.report();
    expect(report.turns).toBe(2);
    expect(report.repeatShare['1m']).toBe(0.5);
    expect(report.savings['1m']).toEqual({ calls: 1, usd: 0.5 });
    expect(report.droppedByGateway).toBe(7);
    expect(report.malformedLines).toBe(1);
  });

  it("a gateway's own request log: the report's keys are the log's, and the chart shows the money saved beside the repeats", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'npo-audit-log-'));
    const log = join(dir, 'requests.jsonl');
    const g = await startGateway({ flags: ['--request-log', log] });
    try {
      const body = {
        model: 'gpt-4o-mini',
        temperature: 0,
        messages: [{ role: 'user', content: uniquePrompt('audited') }],
      };
      for (let i = 0; i < 3; i++)
        expect(
          (await postJson(`${g.gatewayUrl}/v1/chat/completions`, body, { authorization: 'Bearer sk-audit' })).status,
        ).toBe(200);
      expect(
        (
          await postJson(`${g.gatewayUrl}/v1/chat/completions`, {
            ...body,
            messages: [{ role: 'user', content: uniquePrompt('once') }],
          })
        ).status,
      ).toBe(200);
    } finally {
      await g.close();
    }
    const lines = readFileSync(log, 'utf8').trim().split('\n');
    const logged = lines.map((line) => JSON.parse(line) as { key: string; outcome: string; saved: number });
    const repeated = logged.filter((l) => l.outcome === 'cached');
    expect(repeated).toHaveLength(2);
    const audit = new RepeatAudit();
    for (const line of lines) audit.addLine(line);
    const report = audit.report();
    // The hash the report names is the one in the log: grep finds the request.
    expect(report.topKeys).toEqual([{ key: repeated[0].key.slice(0, 12), count: 3 }]);
    expect(lines.filter((line) => line.includes(report.topKeys[0].key))).toHaveLength(3);
    expect(report.savings['5m'].usd).toBeGreaterThan(0);
    const chart = repeatChart(report);
    const saved = [...chart.matchAll(/<rect class="saved"[^>]*><title>([^<]*)<\/title>/g)].map((m) => m[1]);
    expect(saved).toHaveLength(5);
    expect(saved[1]).toMatch(/^\$[\d.e-]+ saved \(2 calls not made\)$/);
    expect(chart).toContain('money a window this long saves');
    // Without any cost in the input the chart says so instead of drawing $0 bars.
    expect(repeatChart(new RepeatAudit().report())).toContain('no cost in the input');
  }, 30_000);

  describe('npm run audit', () => {
    beforeAll(() => ensureBuilt(), 180_000);

    it('prints the figures as one JSON object, writes the chart, and counts an oversized line without reading it whole', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'npo-audit-'));
      const { lines, turns } = generate();
      const file = join(dir, 'turns.jsonl');
      writeFileSync(file, [...lines, 'x'.repeat(2 * 1024 * 1024), ...HOSTILE].join('\n') + '\n');
      const svg = join(dir, 'repeats.svg');
      const result = await runAudit(['--json', '--svg', svg, '--max-line', String(1024 * 1024), file]);
      expect(result.code).toBe(0);
      const report = JSON.parse(result.stdout);
      expect(report.turns).toBe(turns);
      expect(report.repeatShare['5m']).toBe(30 / turns);
      expect(report.repeatShare['24h']).toBe(100 / turns);
      expect(report.malformedLines).toBe(HOSTILE.length + 1);
      expect(report.oversizedLines).toBe(1);
      const chart = readFileSync(svg, 'utf8');
      expect(chart).toMatch(/^<svg /);
      expect(chart).toContain('within 5m');

      const human = await runAudit([file]);
      expect(human.stdout).toContain('within 5m');
      expect(human.stdout).toContain(`${((100 * 30) / turns).toFixed(2)}%`);
    }, 60_000);

    it('answers --help, and a missing file or bad option with a message and exit code 2', async () => {
      expect((await runAudit(['--help'])).stdout).toContain('Usage: npm run audit');
      const missing = await runAudit(['/nonexistent/file.jsonl']);
      expect(missing.code).toBe(2);
      expect(missing.stderr).toContain('cannot be read (ENOENT)');
      expect((await runAudit(['--bogus', 'x'])).code).toBe(2);
      expect((await runAudit(['--top', '-1', 'x'])).code).toBe(2);
    });
  });
});
