import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { SpendTotals } from './spend-ledger.js';

// `--spend-file`: the totals a gateway without Redis keeps across restarts, as JSON (`{version: 1, totals}`).

/** The totals a spend file holds (none when it does not exist yet, or is not JSON: said through `log`). */
export function readSpendFile(file: string, log?: (line: string) => void): Array<[string, SpendTotals]> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new Error(`--spend-file ${file}: cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`, {
      cause: error,
    });
  }
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    log?.(`--spend-file ${file}: not valid JSON; starting from zero`);
    return [];
  }
  const totals = (data as { totals?: unknown } | null)?.totals;
  if (typeof totals !== 'object' || totals === null) return [];
  const read: Array<[string, SpendTotals]> = [];
  for (const [id, value] of Object.entries(totals)) {
    const v = value as Partial<SpendTotals> | null;
    if (
      /^(day|month):[\d-]+:.{1,64}$/.test(id) &&
      Number.isSafeInteger(v?.spentNano) &&
      Number.isSafeInteger(v?.savedNano)
    ) {
      read.push([id, { spentNano: v!.spentNano!, savedNano: v!.savedNano! }]);
    }
  }
  return read;
}

/** Atomic: a crash mid-write leaves the previous file, never half of one. */
export function writeSpendFile(file: string, totals: Record<string, SpendTotals>, log?: (line: string) => void): void {
  try {
    mkdirSync(dirname(file), { recursive: true });
    const temporary = `${file}.${process.pid}.tmp`;
    writeFileSync(temporary, JSON.stringify({ version: 1, totals }));
    renameSync(temporary, file);
  } catch (error) {
    log?.(`--spend-file ${file}: not written (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}
