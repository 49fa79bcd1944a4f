import { computeMetrics, type RunMetrics } from './metrics.js';
import type { ScenarioResult } from './scenarios.js';
import { REFERENCE, REFERENCE_ROWS, fmtMs, type TargetCheck } from './targets.js';

/** Counts by name as one cell: `200 80, 503 4`. */
export function countsText(counts: Record<string, number>): string {
  return Object.entries(counts)
    .map(([name, n]) => `${name} ${n}`)
    .join(', ');
}

/** Plain-text table with left-aligned first column and the rest right-aligned. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i])))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

function describePlan(result: ScenarioResult): string {
  const { plan } = result;
  const parts = [`provider latency ${fmtMs(plan.latencyMs)}`];
  if (plan.load.kind === 'burst') parts.push(`${plan.load.count} requests at once`);
  else parts.push(`1 request every ${fmtMs(plan.load.intervalMs)} for ${fmtMs(plan.load.durationMs)}`);
  if (plan.failure)
    parts.push(`${plan.failure.mode} from ${fmtMs(plan.failure.startMs)} to ${fmtMs(plan.failure.endMs)}`);
  return parts.join(', ');
}

/** The comparison table of one timeline scenario: one column per run, then the reference proxy's figures. */
export function scenarioTable(result: ScenarioResult, metrics: RunMetrics[] = result.runs.map(computeMetrics)): string {
  const { plan, runs } = result;
  const reference = REFERENCE_ROWS[plan.name];
  const rows: Array<[string, string, (m: RunMetrics, i: number) => string]> = [
    ['requests sent', 'requests', (m) => String(m.requests)],
    ['provider calls (model)', 'providerCalls', (m) => String(m.providerCalls)],
  ];
  if (plan.failure) {
    rows.push(['  of which while failing', 'failing', (m) => String(m.providerCallsFailing)]);
    rows.push([
      'gateway health probes (while failing)',
      'probes',
      (m, i) => (runs[i].variant.target === 'gateway' ? `${m.probes} (${m.probesFailing})` : '-'),
    ]);
  }
  rows.push(
    [
      'answers ok / joined / cached',
      'answers',
      (m) => `${m.outcomes.ok} / ${m.outcomes.joined} / ${m.outcomes.cached}`,
    ],
    [
      'refused / timeout / error',
      'errors',
      (m) => `${m.outcomes.refused} / ${m.outcomes.timeout} / ${m.outcomes.error}`,
    ],
    ['SDK attempts (retries)', 'attempts', (m) => `${m.sdkAttempts} (${m.sdkRetries})`],
    ['wait p50', 'p50', (m) => fmtMs(m.waitP50)],
    ['wait p95', 'p95', (m) => fmtMs(m.waitP95)],
    ['slowest wait', 'slowest', (m) => fmtMs(m.waitMax)],
  );
  if (plan.failure) {
    rows.push(
      [
        'refusal latency p50 (max)',
        'refusal',
        (m) => (m.refusalP50 === undefined ? '-' : `${fmtMs(m.refusalP50)} (${fmtMs(m.refusalMax)})`),
      ],
      ['  p50 of the HTTP attempt alone', 'refusalFetch', (m) => fmtMs(m.refusalFetchP50)],
      ['  floor: bare Node server round trip p50', 'baseline', (m) => fmtMs(m.baselineRoundTripP50)],
      ['first call into the failure (after its start)', 'firstFailing', (m) => fmtMs(m.firstFailingCallAfterMs)],
      ['breaker opened (after failure start)', 'opened', (m) => fmtMs(m.breakerOpenedAfterMs)],
      ['first refusal (after failure start)', 'firstRefusal', (m) => fmtMs(m.firstRefusalAfterMs)],
      [
        'first success after recovery (lag)',
        'recovery',
        (m) =>
          m.firstSuccessAfterRecoveryMs === undefined
            ? '-'
            : `${fmtMs(m.firstSuccessAfterRecoveryMs)} (${fmtMs(m.recoveryLagMs)})`,
      ],
    );
  }
  const aborted = runs.some((r) => r.abortedAtDeadline > 0);
  if (aborted) rows.push(['aborted by the harness deadline', 'aborted', (_m, i) => String(runs[i].abortedAtDeadline)]);

  const header = ['', ...runs.map((r) => r.variant.label), `reference 2.0.3${plan.scale === 1 ? '' : ' (scale 1)'}`];
  const body = rows.map(([title, key, cell]) => [title, ...metrics.map((m, i) => cell(m, i)), reference[key] ?? '']);
  const lines = [
    `== ${plan.name}: ${plan.title}${plan.scale === 1 ? '' : ` (scale ${plan.scale})`}`,
    `   ${describePlan(result)}`,
    table(header, body),
    `   reference 2.0.3: direct ${REFERENCE[plan.name].direct}; proxy ${REFERENCE[plan.name].proxy}`,
  ];
  return lines.join('\n');
}

export function checksTable(checks: TargetCheck[]): string {
  const notes: string[] = [];
  const rows = checks.map((c) => {
    let mark = '';
    if (c.note) {
      if (!notes.includes(c.note)) notes.push(c.note);
      mark = ` [${notes.indexOf(c.note) + 1}]`;
    }
    return [
      c.pass ? 'PASS' : 'FAIL',
      c.kind,
      `${c.scenario} / ${c.run}`,
      `${c.name}${mark}`,
      c.target,
      c.actual,
      c.scaling === 'none' ? '' : c.scaling === 'fixed' ? 'not scaled' : c.scaling,
    ];
  });
  return [
    table(['', 'kind', 'run', 'target', 'bound', 'actual', 'scale'], rows),
    ...notes.map((note, i) => `   [${i + 1}] ${note}`),
  ].join('\n');
}
