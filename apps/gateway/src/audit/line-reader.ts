import type { Readable } from 'node:stream';

/**
 * Splits a byte stream into lines with bounded memory: a line longer than
 * `maxLineBytes` is skipped (up to its end) and reported, never buffered.
 */
export async function forEachLine(
  input: Readable,
  maxLineBytes: number,
  onLine: (line: string) => void,
  onOversized: () => void,
  onBytes: (n: number) => void = () => undefined,
): Promise<void> {
  let parts: Buffer[] = [];
  let length = 0;
  let skipping = false;
  for await (const chunk of input as AsyncIterable<Buffer>) {
    onBytes(chunk.length);
    let start = 0;
    for (let at = chunk.indexOf(0x0a); at !== -1; at = chunk.indexOf(0x0a, start)) {
      if (!skipping && length + (at - start) <= maxLineBytes) {
        parts.push(chunk.subarray(start, at));
        onLine(Buffer.concat(parts).toString('utf8'));
      } else onOversized();
      parts = [];
      length = 0;
      skipping = false;
      start = at + 1;
    }
    if (start < chunk.length && !skipping) {
      length += chunk.length - start;
      if (length > maxLineBytes) {
        skipping = true;
        parts = [];
      } else parts.push(Buffer.from(chunk.subarray(start)));
    }
  }
  if (skipping) onOversized();
  else if (length > 0) onLine(Buffer.concat(parts).toString('utf8'));
}
