import { LRUCache } from 'lru-cache';
import { bytesKey, keyHead, type DedupKeyInput } from './dedup-key.js';

export interface RepeatedBodiesOptions {
  /** Bodies smaller than this are always hashed: below it, hashing costs about what looking them up does. */
  minBodyBytes?: number;
  /** The bytes of all the bodies kept, together. */
  maxBytes?: number;
}

/** What a request's key is made of: the request without its body, and the body's bytes in the pieces they came in. */
export type KeyedRequest = Omit<DedupKeyInput, 'body' | 'rawBody'>;

interface Kept {
  head: string;
  body: Buffer;
  key: string;
}

/** Where a body is sampled for its fingerprint, as fractions of its length. */
const SAMPLES = [0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1];
const SAMPLE_BYTES = 16;

/**
 * The keys of large request bodies that came more than once, found again by
 * comparing bytes instead of hashing them: SHA-256 reads 200 KB in about
 * 0.1 ms, a comparison with the bytes kept takes a tenth of that. The key is
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
  private readonly minBodyBytes: number;
  private readonly kept: LRUCache<string, Kept>;

  constructor(options: RepeatedBodiesOptions = {}) {
    this.minBodyBytes = options.minBodyBytes ?? 16 * 1024;
    this.kept = new LRUCache<string, Kept>({ maxSize: options.maxBytes ?? 32 * 1024 * 1024, sizeCalculation: (kept) => kept.body.length });
  }

  /**
   * The request's key, as `dedupKey` gives it for these bytes: found by comparison when the same bytes came before
   * and were kept, hashed otherwise. `pieces` are the body's bytes in order (`length` of them together).
   */
  keyOf(request: KeyedRequest, pieces: readonly Uint8Array[], length: number): string {
    const head = keyHead(request);
    if (length < this.minBodyBytes) return bytesKey(head, pieces);
    const kept = this.kept.get(fingerprint(pieces, length));
    if (kept !== undefined && kept.head === head && kept.body.length === length && equal(kept.body, pieces)) return kept.key;
    return bytesKey(head, pieces);
  }

  /** The request's body came again (its answer was in flight or kept): its bytes are kept for the next time. */
  repeated(request: KeyedRequest, pieces: readonly Uint8Array[], length: number, key: string): void {
    if (length < this.minBodyBytes || length > this.kept.maxSize) return;
    const print = fingerprint(pieces, length);
    if (this.kept.get(print)?.key === key) return;
    // One copy of its own: a piece may be a view of a larger buffer, which it would keep whole.
    this.kept.set(print, { head: keyHead(request), body: Buffer.concat(pieces, length), key });
  }

  /** The bytes kept, together. */
  get keptBytes(): number {
    return this.kept.calculatedSize;
  }
}

/** The body's length and a few of its bytes: equal bodies share it, and most distinct ones of one length do not. */
function fingerprint(pieces: readonly Uint8Array[], length: number): string {
  let print = `${length}:`;
  const last = length - SAMPLE_BYTES;
  for (const at of SAMPLES) print += slice(pieces, Math.floor(at * last));
  return print;
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
      text += Buffer.from(piece.buffer, piece.byteOffset + from, to - from).toString('latin1');
      if (start + SAMPLE_BYTES <= end) break;
    }
    offset = end;
  }
  return text;
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
