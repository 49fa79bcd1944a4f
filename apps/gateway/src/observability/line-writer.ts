import { write, writeSync } from 'node:fs';

/** Bytes a buffer holds; one is written when it is this full (or at the latest `flushMs` after its first line). */
const BUFFER_BYTES = 64 * 1024;
const WRITE_AT = 32 * 1024;
/** Full buffers waiting for a slow reader, at most (beyond, lines are dropped and counted). */
const MAX_WAITING = 16;
/** How long to wait before writing again when the reader is full (EAGAIN). */
const RETRY_MS = 10;

export interface LineWriterOptions {
  /** Where lines go (1: stdout). */
  fd: number;
  /** Lines sit in memory at most this long before they are written. */
  flushMs: number;
}

/**
 * Stdout for the gateway's JSON lines, as pino's destination. pino's own
 * (sonic-boom) keeps the lines waiting to be written as one string, each line
 * concatenated onto it, and hands that string to `fs.write`, which encodes it
 * on a pool thread: per line a string made, encoded and collected. With a line
 * per request that was a large share of the gateway's CPU on a small request
 * (docs/benchmarks/2026-12-03-figures-behind-the-code.md). Here each line is encoded once, into
 * a buffer kept for the purpose; a buffer is written whole, with one
 * `fs.write`, once it is half full or `flushMs` after its first line, while
 * the next fills. A request never waits on a write: when the reader is slower
 * than the lines (a few MiB of them wait), lines are dropped and counted
 * rather than kept without bound.
 */
export class LineWriter {
  private filling: Buffer = Buffer.allocUnsafe(BUFFER_BYTES);
  private used = 0;
  /** Buffers written, or waiting to be, in order. */
  private readonly waiting: Buffer[] = [];
  private readonly spare: Buffer[] = [];
  private writing = false;
  private timer?: ReturnType<typeof setTimeout>;
  /** Lines dropped because the reader could not keep up. */
  dropped = 0;

  constructor(private readonly options: LineWriterOptions) {}

  /** Buffers handed over but not yet written (the one being written included); past `MAX_WAITING`, lines are dropped. */
  get waitingBuffers(): number {
    return this.waiting.length;
  }

  /** One line or more, newline included (pino's destination interface). */
  write(text: string): boolean {
    // A UTF-16 unit is at most 3 bytes of UTF-8: room for that is room enough, without measuring the line first.
    if (this.used + text.length * 3 > BUFFER_BYTES) {
      this.rotate();
      if (text.length * 3 > BUFFER_BYTES) return this.writeLarge(text);
    }
    if (this.filling === EMPTY) return this.drop();
    this.used += this.filling.write(text, this.used);
    if (this.used >= WRITE_AT) this.rotate();
    else this.timer ??= setTimeout(this.flush, this.options.flushMs).unref();
    return true;
  }

  /** Writes every line held, now (at exit). A line in a write under way may then come after these. */
  flushSync(): void {
    this.rotate();
    for (const buffer of this.waiting.splice(this.writing ? 1 : 0)) writeAllSync(this.options.fd, buffer);
  }

  private readonly flush = (): void => {
    this.timer = undefined;
    this.rotate();
  };

  /** The buffer being filled joins those waiting to be written, and an empty one takes its place. */
  private rotate(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.used === 0 || this.filling === EMPTY) return;
    this.waiting.push(this.filling.subarray(0, this.used));
    this.used = 0;
    this.filling = this.spare.pop() ?? (this.waiting.length < MAX_WAITING ? Buffer.allocUnsafe(BUFFER_BYTES) : EMPTY);
    this.next();
  }

  /** A line longer than a buffer third: encoded on its own, and written in its turn. */
  private writeLarge(text: string): boolean {
    if (this.waiting.length >= MAX_WAITING) return this.drop();
    this.waiting.push(Buffer.from(text));
    this.next();
    return true;
  }

  private drop(): boolean {
    // Said once, where it can be seen whatever becomes of stdout.
    if (this.dropped++ === 0)
      process.stderr.write('gateway: stdout is not read as fast as lines come; lines are being dropped\n');
    return true;
  }

  private next(): void {
    if (this.writing || this.waiting.length === 0) return;
    this.writing = true;
    this.send(this.waiting[0], 0);
  }

  private send(buffer: Buffer, offset: number): void {
    write(this.options.fd, buffer, offset, buffer.length - offset, null, (error, written) => {
      if (error) {
        // The reader is full: the same bytes again a little later. Any other failure: these lines are lost.
        if (error.code === 'EAGAIN') return void setTimeout(() => this.send(buffer, offset), RETRY_MS).unref();
        written = buffer.length - offset;
      }
      if (offset + written < buffer.length) return this.send(buffer, offset + written);
      this.waiting.shift();
      if (buffer.buffer.byteLength === BUFFER_BYTES && this.spare.length < 2)
        this.spare.push(Buffer.from(buffer.buffer, buffer.byteOffset, BUFFER_BYTES));
      this.writing = false;
      if (this.filling === EMPTY) this.filling = this.spare.pop() ?? Buffer.allocUnsafe(BUFFER_BYTES);
      this.next();
    });
  }
}

/** Where lines go while every buffer is taken: they are dropped. */
const EMPTY = Buffer.alloc(0);

function writeAllSync(fd: number, buffer: Buffer): void {
  for (let offset = 0, tries = 0; offset < buffer.length && tries < 1_000;) {
    try {
      offset += writeSync(fd, buffer, offset, buffer.length - offset);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') return;
      tries++;
    }
  }
}
