import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VirtualKeys } from './virtual-keys.js';

function keysFile(count: number): string {
  const file = join(mkdtempSync(join(tmpdir(), 'npo-keys-')), 'keys.json');
  const keys: Record<string, { name: string }> = {};
  for (let i = 0; i < count; i++) keys[`sk-key-${String(i).padStart(6, '0')}`] = { name: `k${i}` };
  writeFileSync(file, JSON.stringify(keys));
  return file;
}

describe('VirtualKeys reloads', () => {
  let keys: VirtualKeys | undefined;
  const lines: string[] = [];
  beforeEach(() => {
    jest.useFakeTimers();
    lines.length = 0;
  });
  afterEach(() => {
    keys?.close();
    keys = undefined;
    jest.useRealTimers();
  });
  const reloads = () => lines.filter((line) => line.startsWith('keys file reloaded')).length;

  it('a burst of 200 SIGHUPs reads a 10,000-key file once, after the burst', async () => {
    keys = VirtualKeys.load({ file: keysFile(10_000) }, (line) => lines.push(line));
    for (let i = 0; i < 200; i++) process.emit('SIGHUP', 'SIGHUP');
    expect(reloads()).toBe(0);
    await jest.advanceTimersByTimeAsync(199);
    expect(reloads()).toBe(0);
    await jest.advanceTimersByTimeAsync(1);
    expect(reloads()).toBe(1);
    expect(lines).toEqual(['keys file reloaded (SIGHUP): 10000 key(s)']);
  });

  it('signals that never stop still reload at least once a second', async () => {
    keys = VirtualKeys.load({ file: keysFile(3) }, (line) => lines.push(line));
    for (let i = 0; i < 30; i++) {
      process.emit('SIGHUP', 'SIGHUP');
      await jest.advanceTimersByTimeAsync(100);
    }
    // 3 s of a signal every 100 ms: about one reload a second, never one per signal.
    expect(reloads()).toBeGreaterThanOrEqual(2);
    expect(reloads()).toBeLessThanOrEqual(3);
  });

  it('a single SIGHUP reloads within 200 ms', async () => {
    keys = VirtualKeys.load({ file: keysFile(3) }, (line) => lines.push(line));
    process.emit('SIGHUP', 'SIGHUP');
    await jest.advanceTimersByTimeAsync(200);
    expect(reloads()).toBe(1);
  });
});
