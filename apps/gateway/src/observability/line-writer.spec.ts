import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readFileSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LineWriter } from './line-writer.js';

const dirs: string[] = [];
afterEach(() => {
  jest.useRealTimers();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function tempFile(): { path: string; fd: number } {
  const dir = mkdtempSync(join(tmpdir(), 'line-writer-'));
  dirs.push(dir);
  const path = join(dir, 'out.log');
  return { path, fd: openSync(path, 'w') };
}

/** Until `check` holds, turn by turn: a write goes through libuv's thread pool, slow to come back on a busy machine. */
async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 1_000_000 && !check(); i++) await new Promise((resolve) => setImmediate(resolve));
  expect(check()).toBe(true);
}

/** Until every buffer handed over has been written (at most 10 s). */
async function writesDone(writer: LineWriter): Promise<void> {
  for (let i = 0; i < 10_000 && writer.waitingBuffers > 0; i++) await new Promise((resolve) => setTimeout(resolve, 1));
  expect(writer.waitingBuffers).toBe(0);
}

describe('LineWriter', () => {
  it('writes every line whole and in order, multi-byte text, lines longer than a buffer, and what is left at exit', async () => {
    const { path, fd } = tempFile();
    const writer = new LineWriter({ fd, flushMs: 1_000 });
    const expected: string[] = [];
    for (let i = 0; i < 5_000; i++) {
      const line =
        i % 1_000 === 999 ? `{"n":${i},"text":"${'é😀x'.repeat(20_000)}"}\n` : `{"n":${i},"text":"ligne ${i} é 😀"}\n`;
      expected.push(line);
      writer.write(line);
      // Let the writes under way finish now and then, as a gateway's event loop does between bursts. On a busy
      // machine the pool thread may take longer than one turn: the next burst waits for it rather than outrunning
      // the writer's bound (that bound is the last test's).
      if (i % 500 === 0) await writesDone(writer);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
    writer.flushSync();
    closeSync(fd);
    expect(readFileSync(path, 'utf8')).toBe(expected.join(''));
    expect(writer.dropped).toBe(0);
  });

  it('a line is written within flushMs even when its buffer is far from full', async () => {
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
    const { path, fd } = tempFile();
    const writer = new LineWriter({ fd, flushMs: 200 });
    writer.write('{"msg":"alone"}\n');
    await new Promise((resolve) => setImmediate(resolve));
    expect(readFileSync(path, 'utf8')).toBe('');
    jest.advanceTimersByTime(200);
    await until(() => readFileSync(path, 'utf8') === '{"msg":"alone"}\n');
    closeSync(fd);
  });

  it('a reader that does not keep up costs a bounded amount of memory: past it, lines are dropped and counted, never kept', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'line-writer-'));
    dirs.push(dir);
    const fifo = join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    // The reader's end first (it does not wait for a writer when it does not block), then the writer's.
    const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    const fd = openSync(fifo, 'w');
    const writer = new LineWriter({ fd, flushMs: 20 });
    const line = `{"msg":"${'x'.repeat(250)}"}\n`;
    for (let i = 0; i < 20_000; i++) {
      writer.write(line);
      if (i % 1_000 === 0) await new Promise((resolve) => setImmediate(resolve));
    }
    // 20 000 lines of 263 bytes (5 MiB) against at most 16 buffers of 64 KiB and the pipe's own 64 KiB.
    expect(writer.dropped).toBeGreaterThan(10_000);
    // The reader wakes up: what was kept is written, in whole lines.
    const expectedKept = (20_000 - writer.dropped) * line.length;
    const chunk = Buffer.alloc(1 << 20);
    let text = '';
    for (let i = 0; i < 2_000 && text.length < expectedKept; i++) {
      try {
        text += chunk.toString('utf8', 0, readSync(reader, chunk));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') throw error;
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(text.length).toBe(expectedKept);
    expect(
      text
        .split('\n')
        .filter(Boolean)
        .every((l) => l === line.trimEnd()),
    ).toBe(true);
    closeSync(fd);
    closeSync(reader);
  });
});
