import { LRUCache } from 'lru-cache';
import { bytesKey } from './dedup-key.js';

export interface RepeatedBodiesOptions {
  /** The bytes of all the bodies kept, together. */
  maxBytes?: number;
}

interface Kept {
  /** The body's bytes, when its fingerprint does not hold them all. */
  body: Buffer | undefined;
  key: string;
}

/** A body this small is its own fingerprint (as latin1, one character per byte): found without a comparison. */
const WHOLE_BODY_BYTES = 1024;
/** Where a body is sampled for its fingerprint, as fractions of its length. */
const SAMPLES = [0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1];
const SAMPLE_BYTES = 16;

/**
 * The keys of request bodies that came more than once, found again by
 * comparing bytes instead of hashing them: a comparison with the bytes kept
 * takes about a tenth of SHA-256's time, and a small body is found by one
 * look-up of its own bytes (cheaper than a hash object made, fed and read,
 * which was a visible part of a window hit's cost). The key is
 * the one `dedupKey` gives with `rawBody` (equal bytes, equal hash).
 *
 * A body is kept only once its key was seen again (`repeated`): distinct
 * traffic keeps nothing and pays one look-up of a short fingerprint. What is
 * kept is bounded in bytes, the least recently used let go first.
 *
 * Hand-written: a cache keyed by the body's hash would need the hash this
 * exists to avoid.
 */
export class RepeatedBodies {
  private readonly kept: LRUCache<string, Kept>;

  constructor(options: RepeatedBodiesOptions = {}) {
    // A body's size counts once whether it is kept as bytes or in its fingerprint (plus the fingerprint's samples).
    this.kept = new LRUCache<string, Kept>({
      maxSize: options.maxBytes ?? 32 * 1024 * 1024,
      sizeCalculation: (kept, print) => (kept.body?.length ?? 0) + print.length,
    });
  }

  /**
   * What a request is looked up by, made once per request for `keyOf` and `repeated`: its `head` (`keyHead`, the
   * request without its body), the body's length and a few of its bytes (all of them for a small body). Equal
   * requests share it, and most distinct ones of one length do not. `pieces` are the body's bytes in order
   * (`length` of them together).
   */
  printOf(head: string, pieces: readonly Uint8Array[], length: number): string {
    // The length, then `=` before a whole body or `:` before samples: no body's print is another's.
    if (length <= WHOLE_BODY_BYTES) {
      let print = `${head}${length}=`;
      for (const piece of pieces) print += latin1(piece, 0, piece.length);
      return print;
    }
    let print = `${head}${length}:`;
    const last = length - SAMPLE_BYTES;
    for (const at of SAMPLES) print += slice(pieces, Math.floor(at * last));
    return print;
  }

  /**
   * The request's key, as `dedupKey` gives it for these bytes: found by comparison when the same bytes came before
   * and were kept, hashed otherwise.
   */
  keyOf(head: string, print: string, pieces: readonly Uint8Array[], length: number): string {
    const kept = this.kept.get(print);
    if (kept !== undefined && (kept.body === undefined || (kept.body.length === length && equal(kept.body, pieces))))
      return kept.key;
    return bytesKey(head, pieces);
  }

  /** The request's body came again (its answer was in flight or kept): its bytes are kept for the next time. */
  repeated(print: string, pieces: readonly Uint8Array[], length: number, key: string): void {
    if (length * 2 > this.kept.maxSize) return;
    if (this.kept.get(print)?.key === key) return;
    // One copy of its own: a piece may be a view of a larger buffer, which it would keep whole.
    this.kept.set(print, { body: length <= WHOLE_BODY_BYTES ? undefined : Buffer.concat(pieces, length), key });
  }

  /** The bytes kept, together. */
  get keptBytes(): number {
    return this.kept.calculatedSize;
  }
}

/** `SAMPLE_BYTES` bytes of the body from `start`, as latin1 (one character per byte), across pieces. */
function slice(pieces: readonly Uint8Array[], start: number): string {
  let text = '';
  let offset = 0;
  for (const piece of pieces) {
    const end = offset + piece.length;
    if (end > start) {
      const from = Math.max(0, start - offset);
      const to = Math.min(piece.length, start + SAMPLE_BYTES - offset);
      text += latin1(piece, from, to);
      if (start + SAMPLE_BYTES <= end) break;
    }
    offset = end;
  }
  return text;
}

function latin1(bytes: Uint8Array, from: number, to: number): string {
  return (Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length)).toString(
    'latin1',
    from,
    to,
  );
}

/** Whether the pieces, in order, hold the same bytes as `body` (their lengths together already equal). */
function equal(body: Buffer, pieces: readonly Uint8Array[]): boolean {
  let offset = 0;
  for (const piece of pieces) {
    if (body.compare(piece, 0, piece.length, offset, offset + piece.length) !== 0) return false;
    offset += piece.length;
  }
  return true;
}
