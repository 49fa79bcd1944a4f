import { WINDOWS, type AuditReport } from './repeat-audit.js';

const escape = (text: string) => text.replace(/[<>&"]/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;' })[c]!);

/** A bar chart (SVG) of the share of exact repeats by window, the same-user part of each bar shaded. */
export function repeatChart(report: AuditReport, title = 'Exact repeats by window'): string {
  const width = 640;
  const height = 360;
  const left = 60;
  const bottom = 300;
  const top = 50;
  const max = Math.max(0.01, ...WINDOWS.map(([w]) => report.repeatShare[w]));
  // A round upper bound for the axis: 1%, 2%, 5%, 10%, ...
  const steps = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1];
  const axis = steps.find((s) => s >= max) ?? 1;
  const barWidth = 70;
  const gap = (width - left - 20 - WINDOWS.length * barWidth) / WINDOWS.length;
  const y = (share: number) => bottom - (share / axis) * (bottom - top);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${width / 2}" y="24" text-anchor="middle" font-size="15">${escape(title)} (${report.turns} turns)</text>`,
  ];
  for (let i = 0; i <= 4; i++) {
    const share = (axis * i) / 4;
    parts.push(`<line x1="${left}" x2="${width - 20}" y1="${y(share)}" y2="${y(share)}" stroke="#ddd"/>`);
    parts.push(`<text x="${left - 6}" y="${y(share) + 4}" text-anchor="end">${(share * 100).toFixed(share * 100 < 10 ? 1 : 0)}%</text>`);
  }
  WINDOWS.forEach(([name], i) => {
    const x = left + gap / 2 + i * (barWidth + gap);
    const share = report.repeatShare[name];
    const same = share * report.sameUserShareByWindow[name];
    parts.push(`<rect x="${x}" y="${y(share)}" width="${barWidth}" height="${bottom - y(share)}" fill="#9ecae1"><title>${(share * 100).toFixed(2)}% repeats</title></rect>`);
    parts.push(`<rect x="${x}" y="${y(same)}" width="${barWidth}" height="${bottom - y(same)}" fill="#3182bd"><title>${(same * 100).toFixed(2)}% from the same user</title></rect>`);
    parts.push(`<text x="${x + barWidth / 2}" y="${y(share) - 6}" text-anchor="middle">${(share * 100).toFixed(2)}%</text>`);
    parts.push(`<text x="${x + barWidth / 2}" y="${bottom + 18}" text-anchor="middle">${name === 'all' ? 'all time' : `within ${name}`}</text>`);
  });
  parts.push(`<line x1="${left}" x2="${width - 20}" y1="${bottom}" y2="${bottom}" stroke="#333"/>`);
  parts.push(`<rect x="${left}" y="${bottom + 34}" width="12" height="12" fill="#3182bd"/><text x="${left + 18}" y="${bottom + 44}">same user resending</text>`);
  parts.push(`<rect x="${left + 170}" y="${bottom + 34}" width="12" height="12" fill="#9ecae1"/><text x="${left + 188}" y="${bottom + 44}">another user</text>`);
  parts.push('</svg>');
  return parts.join('\n') + '\n';
}
