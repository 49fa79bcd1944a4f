import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { ReplyBatch, type PendingReply } from './reply-batch.js';

function reply(name: string, written: string[], then?: () => void): PendingReply {
  return {
    writeReply: () => {
      written.push(name);
      then?.();
    },
  };
}

describe('ReplyBatch', () => {
  afterEach(() => {
    jest.restoreAllMocks();
  });

  it('writes the replies of a turn together, in order, once the turn is over (one setImmediate for all)', async () => {
    const batch = new ReplyBatch();
    const written: string[] = [];
    const immediates = jest.spyOn(globalThis, 'setImmediate');
    for (const name of ['a', 'b', 'c']) batch.add(reply(name, written));
    expect(written).toEqual([]);
    expect(batch.waiting).toBe(3);
    // Not in a microtask or a tick either: only once the turn's I/O is done.
    await Promise.resolve();
    await new Promise<void>((resolve) => process.nextTick(resolve));
    expect(written).toEqual([]);
    await nextTurn();
    expect(written).toEqual(['a', 'b', 'c']);
    expect(batch.waiting).toBe(0);
    expect(immediates).toHaveBeenCalledTimes(1);
  });

  it('a reply added while a batch is written goes out with the next one, not lost', async () => {
    const batch = new ReplyBatch();
    const written: string[] = [];
    batch.add(reply('first', written, () => batch.add(reply('added meanwhile', written))));
    batch.add(reply('second', written));
    await nextTurn();
    expect(written).toEqual(['first', 'second']);
    expect(batch.waiting).toBe(1);
    await nextTurn();
    expect(written).toEqual(['first', 'second', 'added meanwhile']);
    // Batches after that start afresh.
    batch.add(reply('later', written));
    await nextTurn();
    expect(written).toEqual(['first', 'second', 'added meanwhile', 'later']);
  });
});
