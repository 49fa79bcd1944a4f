import type { ProviderCallRecord, RunResult, ScenarioResult } from './scenarios.js';
import type { Outcome } from './sdk-client.js';
import { fmtMs } from './targets.js';

export const OUTCOME_COLOURS: Record<Outcome, string> = {
  ok: '#2e7d32',
  joined: '#1e88e5',
  cached: '#00acc1',
  refused: '#8e24aa',
  timeout: '#fb8c00',
  error: '#e53935',
};

const CALL_COLOURS: Record<string, string> = {
  ok: '#2e7d32',
  error503: '#e53935',
  hang: '#fb8c00',
  client_closed: '#757575',
  reset: '#6d4c41',
  cut: '#6d4c41',
  bad_request: '#000000',
};

const PANEL_WIDTH = 460;
const BARS_HEIGHT = 300;
const MARGIN = { left: 44, right: 14, top: 78, bottom: 70 };

function esc(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function niceStep(spanMs: number): number {
  const raw = spanMs / 6;
  const pow = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * pow >= raw) return m * pow;
  return 10 * pow;
}

function axisLabel(ms: number, step: number): string {
  if (ms === 0) return '0';
  if (step >= 1000) return `${+(ms / 1000).toFixed(1)} s`;
  if (step >= 100) return `${+(ms / 1000).toFixed(2)} s`;
  return `${Math.round(ms)} ms`;
}

function panel(run: RunResult, x0: number, spanMs: number): string {
  const plotW = PANEL_WIDTH - MARGIN.left - MARGIN.right;
  const x = (ms: number) => x0 + MARGIN.left + (Math.max(0, Math.min(ms, spanMs)) / spanMs) * plotW;
  const top = MARGIN.top;
  const out: string[] = [];
  out.push(
    `<text x="${x0 + MARGIN.left}" y="${top - 10}" font-size="13" font-weight="bold">${esc(run.variant.label)}</text>`,
  );

  if (run.failure) {
    const shade = run.failure.mode === 'hang' ? '#fff3e0' : '#ffebee';
    const fx = x(run.failure.switchedAt.start);
    out.push(
      `<rect x="${fx}" y="${top}" width="${Math.max(1, x(run.failure.switchedAt.end) - fx)}" height="${BARS_HEIGHT + 34}" fill="${shade}"/>`,
      `<text x="${fx + 3}" y="${top + 11}" font-size="10" fill="#b71c1c">provider ${run.failure.mode}</text>`,
    );
  }

  // Axis and grid.
  const step = niceStep(spanMs);
  for (let t = 0; t <= spanMs + 1e-9; t += step) {
    const gx = x(t);
    out.push(
      `<line x1="${gx}" y1="${top}" x2="${gx}" y2="${top + BARS_HEIGHT + 34}" stroke="#e0e0e0" stroke-width="0.5"/>`,
    );
    out.push(
      `<text x="${gx}" y="${top + BARS_HEIGHT + 48}" font-size="10" text-anchor="middle">${esc(axisLabel(t, step))}</text>`,
    );
  }
  out.push(
    `<rect x="${x0 + MARGIN.left}" y="${top}" width="${plotW}" height="${BARS_HEIGHT}" fill="none" stroke="#9e9e9e" stroke-width="0.5"/>`,
  );

  // One bar per request, in start order, from its start to its final answer.
  const requests = [...run.requests].sort((a, b) => a.start - b.start || a.id - b.id);
  const rowH = BARS_HEIGHT / Math.max(1, requests.length);
  const barH = Math.max(0.6, rowH * 0.8);
  requests.forEach((r, i) => {
    const y = top + i * rowH + (rowH - barH) / 2;
    const bx = x(r.start);
    const title = `#${r.id} ${r.outcome} ${fmtMs(r.start)} -> ${fmtMs(r.end)} (${fmtMs(r.end - r.start)}), ${r.attempts} attempt(s)`;
    out.push(
      `<rect x="${bx.toFixed(2)}" y="${y.toFixed(2)}" width="${Math.max(1.5, x(r.end) - bx).toFixed(2)}" height="${barH.toFixed(2)}" fill="${OUTCOME_COLOURS[r.outcome]}"><title>${esc(title)}</title></rect>`,
    );
    // SDK retries: a black tick where each extra attempt started.
    for (const attempt of r.attemptLog.slice(1)) {
      out.push(
        `<rect x="${x(attempt.start).toFixed(2)}" y="${y.toFixed(2)}" width="1" height="${barH.toFixed(2)}" fill="#000"/>`,
      );
    }
  });

  // The provider's calls: model calls as tall ticks, health probes as short grey ones.
  const ticksY = top + BARS_HEIGHT + 8;
  out.push(`<text x="${x0 + 4}" y="${ticksY + 10}" font-size="9">calls</text>`);
  const tick = (c: ProviderCallRecord) => {
    const h = c.probe ? 6 : 18;
    const colour = c.probe ? '#9e9e9e' : (CALL_COLOURS[c.outcome] ?? '#000');
    return `<line x1="${x(c.at).toFixed(2)}" y1="${ticksY + (c.probe ? 20 : 0)}" x2="${x(c.at).toFixed(2)}" y2="${ticksY + (c.probe ? 20 : 0) + h}" stroke="${colour}" stroke-width="1"><title>${esc(`${c.route} ${c.mode} -> ${c.outcome} at ${fmtMs(c.at)}`)}</title></line>`;
  };
  for (const c of run.providerCalls) out.push(tick(c));
  const model = run.providerCalls.filter((c) => !c.probe).length;
  const probes = run.providerCalls.length - model;
  out.push(
    `<text x="${x0 + MARGIN.left}" y="${top + BARS_HEIGHT + 62}" font-size="10">${run.requests.length} requests, ${model} provider calls${probes ? `, ${probes} health probes` : ''}</text>`,
  );
  return out.join('\n');
}

/** One timeline per scenario: a panel per run (direct, then each gateway variant), side by side, on one time axis. */
export function renderTimelineSvg(result: ScenarioResult): string {
  const { plan, runs } = result;
  const spanMs = Math.max(
    1,
    ...runs.flatMap((r) => [r.durationMs, ...r.requests.map((q) => q.end), ...r.providerCalls.map((c) => c.at)]),
  );
  const width = Math.max(920, PANEL_WIDTH * runs.length);
  const height = MARGIN.top + BARS_HEIGHT + MARGIN.bottom;
  const legend = (Object.keys(OUTCOME_COLOURS) as Outcome[])
    .map((o, i) => {
      const lx = 10 + i * 72;
      return `<rect x="${lx}" y="30" width="10" height="10" fill="${OUTCOME_COLOURS[o]}"/><text x="${lx + 14}" y="39" font-size="10">${o}</text>`;
    })
    .join('');
  const title = `${plan.name}: ${plan.title}${plan.scale === 1 ? '' : ` (scale ${plan.scale})`}`;
  const key = 'one bar per request (black ticks: SDK retries); ticks below: provider calls (short grey: health probes)';
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="10" y="18" font-size="14" font-weight="bold">${esc(title)}</text>`,
    legend,
    `<text x="10" y="56" font-size="10" fill="#424242">${esc(key)}</text>`,
    ...runs.map((run, i) => panel(run, i * PANEL_WIDTH, spanMs)),
    '</svg>',
    '',
  ].join('\n');
}
