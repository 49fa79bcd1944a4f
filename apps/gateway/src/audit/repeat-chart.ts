import { WINDOWS, type AuditReport } from './repeat-audit.js';

const escape = (text: string) =>
  text.replace(/[<>&"]/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;' })[c]!);

/** A round upper bound for an axis: 1, 2, 5 times a power of ten. */
function roundUp(max: number): number {
  const power = 10 ** Math.floor(Math.log10(max));
  return [1, 2, 5, 10].map((m) => m * power).find((bound) => bound >= max) ?? 10 * power;
}

function usd(x: number): string {
  if (x === 0) return '$0';
  return x >= 100 ? `$${Math.round(x).toLocaleString('en-US')}` : x >= 1 ? `$${x.toFixed(2)}` : `$${x.toPrecision(2)}`;
}

/**
 * A bar chart (SVG) per window: the share of exact repeats (the same-user part
 * shaded) and, beside it, the money a dedup window of that length would have
 * saved (its own axis, on the right). Without any price in the input, the
 * money bars are left out and the chart says so.
 */
export function repeatChart(report: AuditReport, title = 'Exact repeats by window'): string {
  const width = 720;
  const height = 380;
  const left = 60;
  const right = 70;
  const bottom = 300;
  const top = 50;
  const max = Math.max(0.01, ...WINDOWS.map(([w]) => report.repeatShare[w]));
  // A round upper bound for the axis: 1%, 2%, 5%, 10%, ...
  const steps = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1];
  const axis = steps.find((s) => s >= max) ?? 1;
  const priced = report.totalUsd > 0;
  const moneyAxis = roundUp(Math.max(1e-6, ...WINDOWS.map(([w]) => report.savings[w].usd)));
  const barWidth = priced ? 40 : 70;
  const group = priced ? 2 * barWidth + 4 : barWidth;
  const gap = (width - left - right - WINDOWS.length * group) / WINDOWS.length;
  const y = (share: number) => bottom - (share / axis) * (bottom - top);
  const yUsd = (x: number) => bottom - (x / moneyAxis) * (bottom - top);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${width / 2}" y="24" text-anchor="middle" font-size="15">${escape(title)} (${report.turns} turns)</text>`,
  ];
  for (let i = 0; i <= 4; i++) {
    const share = (axis * i) / 4;
    parts.push(`<line x1="${left}" x2="${width - right}" y1="${y(share)}" y2="${y(share)}" stroke="#ddd"/>`);
    parts.push(
      `<text x="${left - 6}" y="${y(share) + 4}" text-anchor="end">${(share * 100).toFixed(share * 100 < 10 ? 1 : 0)}%</text>`,
    );
    if (priced)
      parts.push(
        `<text x="${width - right + 6}" y="${y(share) + 4}" fill="#31a354">${usd((moneyAxis * i) / 4)}</text>`,
      );
  }
  WINDOWS.forEach(([name], i) => {
    const x = left + gap / 2 + i * (group + gap);
    const share = report.repeatShare[name];
    const same = share * report.sameUserShareByWindow[name];
    parts.push(
      `<rect x="${x}" y="${y(share)}" width="${barWidth}" height="${bottom - y(share)}" fill="#9ecae1"><title>${(share * 100).toFixed(2)}% repeats</title></rect>`,
    );
    parts.push(
      `<rect x="${x}" y="${y(same)}" width="${barWidth}" height="${bottom - y(same)}" fill="#3182bd"><title>${(same * 100).toFixed(2)}% from the same user</title></rect>`,
    );
    parts.push(
      `<text x="${x + barWidth / 2}" y="${y(share) - 6}" text-anchor="middle">${(share * 100).toFixed(1)}%</text>`,
    );
    if (priced) {
      const saved = report.savings[name];
      const mx = x + barWidth + 4;
      parts.push(
        `<rect class="saved" x="${mx}" y="${yUsd(saved.usd)}" width="${barWidth}" height="${bottom - yUsd(saved.usd)}" fill="#74c476"><title>${usd(saved.usd)} saved (${saved.calls} calls not made)</title></rect>`,
      );
      parts.push(
        `<text x="${mx + barWidth / 2}" y="${yUsd(saved.usd) - 6}" text-anchor="middle" fill="#31a354">${usd(saved.usd)}</text>`,
      );
    }
    parts.push(
      `<text x="${x + group / 2}" y="${bottom + 18}" text-anchor="middle">${name === 'all' ? 'all time' : `within ${name}`}</text>`,
    );
  });
  parts.push(`<line x1="${left}" x2="${width - right}" y1="${bottom}" y2="${bottom}" stroke="#333"/>`);
  parts.push(
    `<rect x="${left}" y="${bottom + 34}" width="12" height="12" fill="#3182bd"/><text x="${left + 18}" y="${bottom + 44}">same user resending</text>`,
  );
  parts.push(
    `<rect x="${left + 170}" y="${bottom + 34}" width="12" height="12" fill="#9ecae1"/><text x="${left + 188}" y="${bottom + 44}">another user</text>`,
  );
  if (priced) {
    parts.push(
      `<rect x="${left + 300}" y="${bottom + 34}" width="12" height="12" fill="#74c476"/><text x="${left + 318}" y="${bottom + 44}">money a window this long saves (of ${usd(report.totalUsd)} the turns cost)</text>`,
    );
  } else
    parts.push(
      `<text x="${left + 300}" y="${bottom + 44}" fill="#666">no cost in the input: money saved not shown</text>`,
    );
  parts.push('</svg>');
  return parts.join('\n') + '\n';
}
