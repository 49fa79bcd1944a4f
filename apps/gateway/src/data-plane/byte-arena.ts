import type { ByteKeeper } from 'nest-prompt-orchestrator/low-level';

/** Bytes per slab: the most a kept stream wastes at its end. */
export const SLAB_BYTES = 16 * 1024;
/** Slabs are made this many at a time, as views of one allocation (see `make`). */
const SLABS_PER_BLOCK = 64;
/** A stream shorter than this is kept as it came: a slab would hold more waste than it saves. */
const MIN_STREAM_BYTES = 4 * SLAB_BYTES;

/** The slabs of one kept stream, and who still writes them. */
class Kept {
  readers = 0;
  released = false;
  freed = false;
  constructor(
    readonly slabs: Buffer[],
    readonly views: Buffer[],
  ) {}
}

/**
 * The memory the answer window keeps streams in: slabs of 16 KiB, made once and used again, instead of the
 * Buffers each stream arrived in. V8 starts a full collection for every 64 MB of new memory outside its heap, and
 * every kept answer was such memory, freed only by a full collection: keeping large streams under load cost more
 * CPU in marking than relaying them. A stream copied into slabs costs one copy, and the slabs of a stream the
 * window let go are used again (docs/benchmarks/2026-12-03-figures-behind-the-code.md).
 *
 * A slab is used again only when nothing can still write it: every caller that replays a kept stream holds it
 * (`hold`, taken in the same turn of the event loop as the window's look-up) until its response has closed, and
 * the slabs of a stream let go wait for the next turn before they are free (a look-up made just before, whose
 * caller has not taken its hold yet, is still served the right bytes). Past `maxBytes` of slabs, streams are kept
 * as they came. Hand-written: no pool library hands out memory with readers counted.
 */
export class ByteArena implements ByteKeeper {
  private readonly free: Buffer[] = [];
  /** Slabs of the last block made that nothing has taken yet. */
  private unused: Buffer[] = [];
  private readonly kept = new WeakMap<readonly Buffer[], Kept>();
  private pending: Kept[] = [];
  private flushScheduled = false;
  /** Slabs allocated so far, in blocks (never more than `maxBytes` of them). */
  private made = 0;

  constructor(private readonly maxBytes: number) {}

  keep(chunks: readonly Buffer[], size: number): { chunks: Buffer[]; release: () => void } | undefined {
    if (size < MIN_STREAM_BYTES) return undefined;
    const needed = Math.ceil(size / SLAB_BYTES);
    const makeable = Math.floor(this.maxBytes / SLAB_BYTES) - this.slabs;
    if (needed > this.free.length + makeable) return undefined;
    const slabs: Buffer[] = [];
    for (let i = 0; i < needed; i++) slabs.push(this.free.pop() ?? this.make());
    const views: Buffer[] = [];
    let slab = 0;
    let used = 0;
    for (const chunk of chunks) {
      for (let from = 0; from < chunk.length;) {
        const copied = chunk.copy(slabs[slab], used, from);
        from += copied;
        used += copied;
        if (used === SLAB_BYTES) {
          views.push(slabs[slab++]);
          used = 0;
        }
      }
    }
    if (used > 0) views.push(slabs[slab].subarray(0, used));
    const kept = new Kept(slabs, views);
    this.kept.set(views, kept);
    return { chunks: views, release: () => this.release(kept) };
  }

  /**
   * A caller is about to write `chunks` (a stored stream's, as the window gave them): their slabs are not used
   * again until the returned function is called (when its response has closed). Undefined: not the arena's.
   */
  hold(chunks: readonly unknown[]): (() => void) | undefined {
    const kept = this.kept.get(chunks as readonly Buffer[]);
    if (kept === undefined) return undefined;
    // Cannot happen when every reader holds in the turn of its look-up; if it did, an error, never another's bytes.
    if (kept.freed) throw new Error('A kept stream was read after its memory was used again.');
    kept.readers++;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      if (--kept.readers === 0 && kept.released) this.schedule(kept);
    };
  }

  /** Slabs handed out so far (in use or free again; never more than `maxBytes` of them). */
  get slabs(): number {
    return this.made - this.unused.length;
  }

  /** Bytes of the slabs allocated (what the arena holds, in use, free or not yet handed out). */
  get bytes(): number {
    return this.made * SLAB_BYTES;
  }

  /**
   * A new slab, cut from a block of up to 64 made at once (1 MiB, within `maxBytes`): a malloc per 16 KiB slab
   * fragmented the heap the socket reads come from while the window filled, and made every allocation dearer
   * (docs/benchmarks/2026-12-07-window-fill-and-spaced-streams.md). A block is one mapping and one backing store.
   */
  private make(): Buffer {
    if (this.unused.length === 0) {
      const count = Math.min(SLABS_PER_BLOCK, Math.floor(this.maxBytes / SLAB_BYTES) - this.made);
      const block = Buffer.allocUnsafeSlow(count * SLAB_BYTES);
      for (let i = count - 1; i >= 0; i--) this.unused.push(block.subarray(i * SLAB_BYTES, (i + 1) * SLAB_BYTES));
      this.made += count;
    }
    return this.unused.pop()!;
  }

  private release(kept: Kept): void {
    if (kept.released) return;
    kept.released = true;
    if (kept.readers === 0) this.schedule(kept);
  }

  private schedule(kept: Kept): void {
    this.pending.push(kept);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(this.flush).unref();
  }

  private readonly flush = (): void => {
    this.flushScheduled = false;
    const pending = this.pending;
    this.pending = [];
    for (const kept of pending) {
      // Held again since (a look-up just before the release): its last reader schedules it once more.
      if (kept.readers > 0 || kept.freed) continue;
      kept.freed = true;
      for (const slab of kept.slabs) this.free.push(slab);
    }
  };
}
