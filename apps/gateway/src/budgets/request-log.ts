import { createWriteStream, mkdirSync, openSync, renameSync, rmSync, statSync, type WriteStream } from 'node:fs';
import { dirname } from 'node:path';

/** One line of the request log. No prompt, no answer, no key: hashes and figures only. */
export interface RequestLogEntry {
  time: string;
  /** The request's id, as in its stdout line and its `x-request-id`: the two logs join on it. */
  reqId: string;
  /** Its trace and span, when tracing records it. */
  traceId?: string;
  spanId?: string;
  /** A short hash of the caller's identity, the same as in the request line and metrics: the same caller, the same hash. */
  tenant: string | null;
  /** The dedup key (itself a SHA-256): the same request, the same key. */
  key: string | null;
  outcome: 'miss' | 'joined' | 'cached' | null;
  route: string | null;
  model: string | null;
  status: number;
  /** The error code it was answered with (absent: none). */
  error?: string;
  /** The upstream (pool member or breaker) it went to. */
  upstream?: string;
  tokensIn: number;
  tokensOut: number;
  /** USD paid for this answer (0 when joined or cached). */
  cost: number;
  /** USD a joined or cached answer did not cost. */
  saved: number;
  latencyMs: number;
}

// Lines waiting for the disk: past this, new lines are dropped (and counted) rather than memory growing.
const MAX_PENDING_BYTES = 4 * 1024 * 1024;

/**
 * The JSON-lines request log: written asynchronously, rotated at a size
 * (`FILE` -> `FILE.1` -> ... -> `FILE.N`, the oldest removed). When the disk
 * is slower than the traffic, lines beyond a bounded buffer are dropped and
 * counted; the count is written into the log when it catches up.
 */
export class RequestLog {
  private stream?: WriteStream;
  private size = 0;
  private pendingBytes = 0;
  private dropped = 0;
  private reportedDropped = 0;
  private failed = false;

  constructor(
    private readonly file: string,
    private readonly maxBytes: number,
    private readonly keep: number,
    private readonly log: (line: string) => void = () => undefined,
  ) {
    mkdirSync(dirname(file), { recursive: true });
    this.open();
  }

  /** Lines dropped because the disk did not keep up. */
  get droppedLines(): number {
    return this.dropped;
  }

  write(entry: RequestLogEntry): void {
    if (!this.stream) return;
    let line = JSON.stringify(entry) + '\n';
    if (this.dropped > this.reportedDropped && this.pendingBytes === 0) {
      line = JSON.stringify({ time: entry.time, dropped: this.dropped - this.reportedDropped }) + '\n' + line;
      this.reportedDropped = this.dropped;
    }
    const bytes = Buffer.byteLength(line);
    if (this.pendingBytes + bytes > MAX_PENDING_BYTES) {
      this.dropped++;
      return;
    }
    if (this.size + bytes > this.maxBytes && this.size > 0) this.rotate();
    this.size += bytes;
    this.pendingBytes += bytes;
    this.stream.write(line, () => (this.pendingBytes -= bytes));
  }

  /** Flushes what is buffered. */
  close(): Promise<void> {
    const stream = this.stream;
    this.stream = undefined;
    return new Promise((resolve) => (stream ? stream.end(() => resolve()) : resolve()));
  }

  private open(): void {
    try {
      this.size = statSync(this.file).size;
    } catch {
      this.size = 0;
    }
    let fd: number;
    try {
      // Opened now, not when the stream gets to it: a rotation renames the file this descriptor writes to.
      fd = openSync(this.file, 'a');
    } catch (error) {
      if (!this.failed)
        this.log(
          `request log ${this.file}: cannot be opened (${(error as NodeJS.ErrnoException).code ?? 'error'}); lines are dropped`,
        );
      this.failed = true;
      this.stream = undefined;
      return;
    }
    const stream = createWriteStream(this.file, { fd });
    stream.on('error', (error: NodeJS.ErrnoException) => {
      if (!this.failed)
        this.log(
          `request log ${this.file}: write failed (${error.code ?? 'error'}); lines are dropped until it can be written`,
        );
      this.failed = true;
      this.pendingBytes = 0;
    });
    this.stream = stream;
  }

  private rotate(): void {
    // The old stream finishes writing what it holds into the file it has open, whatever its name becomes.
    this.stream!.end();
    try {
      if (this.keep === 0) rmSync(this.file, { force: true });
      else {
        rmSync(`${this.file}.${this.keep}`, { force: true });
        for (let i = this.keep - 1; i >= 1; i--) {
          try {
            renameSync(`${this.file}.${i}`, `${this.file}.${i + 1}`);
          } catch {
            // that generation does not exist yet
          }
        }
        renameSync(this.file, `${this.file}.1`);
      }
    } catch (error) {
      this.log(`request log ${this.file}: rotation failed (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
    }
    this.failed = false;
    this.open();
  }
}
