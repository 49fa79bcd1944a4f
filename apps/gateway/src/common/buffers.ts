/** A view that leaves no more than this unused of the memory it is cut from is kept as it is (see `ownBytes`). */
const SPARSE_SLACK = 8 * 1024;

/**
 * The chunk itself, or a copy of its own size when it is a small view of a larger allocation (a few bytes of a
 * 64 KiB socket read): kept for a while, such a view would hold all of that read, and copying a chunk that is most
 * of its read is only more memory to allocate and free.
 */
export function ownBytes(chunk: Buffer): Buffer {
  return chunk.buffer.byteLength > 2 * chunk.length + SPARSE_SLACK ? Buffer.from(chunk) : chunk;
}
