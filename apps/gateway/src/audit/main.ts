import { createReadStream, statSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { forEachLine } from './line-reader.js';
import { RepeatAudit, WINDOWS, type AuditReport } from './repeat-audit.js';
import { repeatChart } from './repeat-chart.js';

const HELP = `Usage: npm run audit -- [options] FILE.jsonl

Measures how often requests repeat exactly: the share of turns that repeat an earlier
one within 1 min, 5 min, 1 h, 24 h and at all; how many of those came from the same
user; the most repeated requests (hashed); and what a dedup window of each length
would have saved in calls and money.

FILE is the gateway's --request-log (one JSON object per line), or any JSONL of
chat turns {"time": ISO or epoch seconds, "user": id, "messages": [...], "model"?: name}
(e.g. a public dataset exported to that shape). "-" reads standard input.

Options:
  --json            print the figures as one JSON object (shares as fractions)
  --svg FILE        write a bar chart of repeats by window
  --top N           most repeated requests to list (default 10)
  --max-line BYTES  longer lines are skipped and counted (default 16777216)
  --help            show this help`;

async function main(): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: process.argv.slice(2),
      allowPositionals: true,
      strict: true,
      options: {
        json: { type: 'boolean' },
        svg: { type: 'string' },
        top: { type: 'string' },
        'max-line': { type: 'string' },
        help: { type: 'boolean' },
      },
    });
  } catch (error) {
    console.error(`audit: ${(error as Error).message}. Run with --help.`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  if (positionals.length !== 1) {
    console.error('audit: give one input file (JSONL). Run with --help.');
    return 2;
  }
  const top = values.top === undefined ? 10 : Number(values.top);
  const maxLine = values['max-line'] === undefined ? 16 * 1024 * 1024 : Number(values['max-line']);
  if (!Number.isInteger(top) || top < 0 || top > 1000) return usage('--top must be a whole number from 0 to 1000');
  if (!Number.isInteger(maxLine) || maxLine < 16)
    return usage('--max-line must be a whole number of bytes (at least 16)');
  const file = positionals[0];
  let size = 0;
  if (file !== '-') {
    try {
      const stat = statSync(file);
      if (!stat.isFile()) return usage(`${file} is not a file`);
      size = stat.size;
    } catch (error) {
      return usage(`${file}: cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
    }
  }
  const audit = new RepeatAudit();
  const progress = progressBar(size);
  const input = file === '-' ? process.stdin : createReadStream(file, { highWaterMark: 1024 * 1024 });
  try {
    await forEachLine(
      input,
      maxLine,
      (line) => audit.addLine(line),
      () => audit.oversized++,
      progress.advance,
    );
  } catch (error) {
    progress.done();
    console.error(
      `audit: reading ${file} failed (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`,
    );
    return 1;
  }
  progress.done();
  const report = audit.report(top);
  if (values.svg) writeFileSync(values.svg, repeatChart(report));
  console.log(values.json ? JSON.stringify(report) : text(report, values.svg));
  return 0;
}

function usage(message: string): number {
  console.error(`audit: ${message}`);
  return 2;
}

/** A progress bar on stderr, only when it is a terminal and the file is large enough to wait for. */
function progressBar(total: number): { advance: (n: number) => void; done: () => void } {
  if (!process.stderr.isTTY || total < 20 * 1024 * 1024) return { advance: () => undefined, done: () => undefined };
  let read = 0;
  let shown = -1;
  return {
    advance: (n) => {
      read += n;
      const percent = Math.floor((read / total) * 100);
      if (percent === shown) return;
      shown = percent;
      const filled = Math.round(percent / 4);
      process.stderr.write(`\r[${'#'.repeat(filled)}${'.'.repeat(25 - filled)}] ${percent}%`);
    },
    done: () => {
      if (shown >= 0) process.stderr.write('\r' + ' '.repeat(40) + '\r');
    },
  };
}

const percent = (f: number) => `${(f * 100).toFixed(2)}%`;

function text(r: AuditReport, svg: string | undefined): string {
  const lines = [
    `${r.turns} turns from ${r.users} users, ${r.distinctKeys} distinct requests${r.firstTime ? ` (${r.firstTime} to ${r.lastTime})` : ''}`,
    '',
    'Exact repeats of an earlier turn, and what a dedup window of that length would have saved:',
    '  window     repeats   same user   calls saved   USD saved',
  ];
  for (const [w] of WINDOWS) {
    const label = w === 'all' ? 'all time' : `within ${w}`;
    lines.push(
      `  ${label.padEnd(10)} ${percent(r.repeatShare[w]).padStart(7)}   ${percent(r.sameUserShareByWindow[w]).padStart(9)}   ${String(r.savings[w].calls).padStart(11)}   ${r.savings[w].usd.toFixed(4).padStart(9)}`,
    );
  }
  lines.push('', `Of all repeats, ${percent(r.sameUserShare)} came from the user who sent it last time.`);
  if (r.totalUsd > 0) lines.push(`Total price of the turns: ${r.totalUsd.toFixed(4)} USD.`);
  if (r.topKeys.length > 0) {
    lines.push(
      '',
      "Most repeated requests (the start of their key in the request log, or of a turn's hash: times seen):",
    );
    for (const { key, count } of r.topKeys) lines.push(`  ${key}  ${count}`);
  }
  if (r.malformedLines > 0)
    lines.push(
      '',
      `${r.malformedLines} line(s) skipped: not a turn (${r.oversizedLines} of them longer than --max-line).`,
    );
  if (r.outOfOrder > 0)
    lines.push(`${r.outOfOrder} turn(s) out of time order: gaps were measured as absolute differences.`);
  if (r.droppedByGateway > 0)
    lines.push(`The gateway dropped ${r.droppedByGateway} log line(s) (disk too slow): the figures miss them.`);
  if (svg) lines.push('', `Chart written to ${svg}.`);
  return lines.join('\n');
}

main().then(
  (code) => (process.exitCode = code),
  (error: unknown) => {
    console.error(`audit: failed (${(error as Error)?.message ?? error})`);
    process.exitCode = 1;
  },
);
