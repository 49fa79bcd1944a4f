import { describe, expect, it } from '@jest/globals';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { ByteArena, SLAB_BYTES } from './byte-arena.js';

/** A stream of `size` bytes in socket-sized chunks, each byte telling where it is (`seed` makes streams differ). */
function streamOf(size: number, seed: number, chunk = 65_536): Buffer[] {
  const bytes = Buffer.alloc(size);
  for (let i = 0; i < size; i++) bytes[i] = (i * 31 + seed) & 0xff;
  const chunks: Buffer[] = [];
  for (let at = 0; at < size; at += chunk) chunks.push(bytes.subarray(at, at + chunk));
  return chunks;
}

const MB = 1024 * 1024;

/** Which slab a chunk lies in: slabs are views of larger blocks, each at a multiple of the slab size. */
const ids = new Map<ArrayBufferLike, number>();
function slabOf(chunk: Buffer): string {
  if (!ids.has(chunk.buffer)) ids.set(chunk.buffer, ids.size);
  const block = ids.get(chunk.buffer)!;
  return `${block}:${Math.floor(chunk.byteOffset / SLAB_BYTES)}`;
}

describe('ByteArena', () => {
  it('keeps a stream byte for byte, in slabs, and leaves a short one as it came', () => {
    const arena = new ByteArena(8 * MB);
    const stream = streamOf(465_000, 1, 60_001);
    const kept = arena.keep(stream, 465_000)!;
    expect(Buffer.concat(kept.chunks).equals(Buffer.concat(stream))).toBe(true);
    expect(kept.chunks.every((chunk) => chunk.length <= SLAB_BYTES)).toBe(true);
    expect(arena.slabs).toBe(Math.ceil(465_000 / SLAB_BYTES));
    expect(arena.keep(streamOf(20_000, 2), 20_000)).toBeUndefined();
  });

  it('uses the slabs of a stream let go again, a turn of the event loop later', async () => {
    const arena = new ByteArena(8 * MB);
    const first = arena.keep(streamOf(200_000, 1), 200_000)!;
    const slabs = arena.slabs;
    first.release();
    arena.keep(streamOf(200_000, 2), 200_000);
    // Not in the same turn: a look-up made just before the release may not have taken its hold yet.
    expect(arena.slabs).toBe(2 * slabs);
    await nextTurn();
    for (let i = 3; i < 50; i++) {
      const kept = arena.keep(streamOf(200_000, i), 200_000)!;
      kept.release();
      await nextTurn();
    }
    // The second stream is still kept; every later one took the first one's slabs, let go in turn.
    expect(arena.slabs).toBe(2 * slabs);
  });

  it('never hands out the slabs of a stream a caller still writes, and bytes stay as they were', async () => {
    const arena = new ByteArena(8 * MB);
    const original = Buffer.concat(streamOf(300_000, 7));
    const kept = arena.keep(streamOf(300_000, 7), 300_000)!;
    const unhold = arena.hold(kept.chunks)!;
    kept.release();
    await nextTurn();
    for (let i = 0; i < 20; i++) arena.keep(streamOf(300_000, 100 + i), 300_000)?.release();
    await nextTurn();
    expect(Buffer.concat(kept.chunks).equals(original)).toBe(true);
    const slabs = arena.slabs;
    unhold();
    unhold(); // once only
    await nextTurn();
    // The held stream's slabs are free again: the next stream takes them rather than new ones.
    const heldSlabs = new Set(kept.chunks.map(slabOf));
    const next = arena.keep(streamOf(300_000, 8), 300_000)!;
    expect(arena.slabs).toBe(slabs);
    expect(next.chunks.every((chunk) => heldSlabs.has(slabOf(chunk)))).toBe(true);
  });

  it('a caller that holds a stream after it was let go, in the same turn, holds it until it is done', async () => {
    const arena = new ByteArena(8 * MB);
    const original = Buffer.concat(streamOf(300_000, 3));
    const kept = arena.keep(streamOf(300_000, 3), 300_000)!;
    kept.release();
    const unhold = arena.hold(kept.chunks)!;
    await nextTurn();
    for (let i = 0; i < 20; i++) arena.keep(streamOf(300_000, 50 + i), 300_000)?.release();
    expect(Buffer.concat(kept.chunks).equals(original)).toBe(true);
    unhold();
  });

  it('makes its slabs in blocks of 64, never past its bytes', () => {
    const arena = new ByteArena(100 * SLAB_BYTES);
    const kept = [arena.keep(streamOf(70 * SLAB_BYTES, 1), 70 * SLAB_BYTES)!];
    // One block of 64 and one of the 36 left: two allocations for 70 slabs.
    expect(new Set(kept[0].chunks.map((chunk) => chunk.buffer)).size).toBe(2);
    expect(arena.bytes).toBe(100 * SLAB_BYTES);
    kept.push(arena.keep(streamOf(30 * SLAB_BYTES, 2), 30 * SLAB_BYTES)!);
    expect(kept[1]).toBeDefined();
    expect(arena.keep(streamOf(5 * SLAB_BYTES, 3), 5 * SLAB_BYTES)).toBeUndefined();
    expect(arena.bytes).toBe(100 * SLAB_BYTES);
    // No two slabs overlap: every byte of both streams is still its own.
    expect(Buffer.concat(kept[0].chunks).equals(Buffer.concat(streamOf(70 * SLAB_BYTES, 1)))).toBe(true);
    expect(Buffer.concat(kept[1].chunks).equals(Buffer.concat(streamOf(30 * SLAB_BYTES, 2)))).toBe(true);
  });

  it('keeps streams as they came once its bytes are taken, and refuses to serve slabs used again', async () => {
    const arena = new ByteArena(1 * MB);
    const kept: Array<ReturnType<ByteArena['keep']>> = [];
    // 13 slabs each: four fit in 64.
    for (let i = 0; i < 4; i++) kept.push(arena.keep(streamOf(200_000, i), 200_000));
    expect(kept.filter((k) => k !== undefined)).toHaveLength(4);
    expect(arena.keep(streamOf(200_000, 9), 200_000)).toBeUndefined();
    expect(arena.bytes).toBeLessThanOrEqual(1 * MB);
    kept[0]!.release();
    await nextTurn();
    expect(arena.keep(streamOf(200_000, 10), 200_000)).toBeDefined();
    expect(() => arena.hold(kept[0]!.chunks)).toThrow(/used again/);
    expect(arena.hold([Buffer.from('not kept')])).toBeUndefined();
  });
});
