import { describe, expect, it } from '@jest/globals';
import { dedupKey, keyHead, type DedupKeyInput } from './dedup-key.js';
import { RepeatedBodies } from './repeated-bodies.js';

type Request = Omit<DedupKeyInput, 'body' | 'rawBody'>;

/** The key as the data plane asks for it: the request's head and print made once. */
function keyOf(bodies: RepeatedBodies, request: Request, pieces: Uint8Array[], length: number): string {
  const head = keyHead(request);
  return bodies.keyOf(head, bodies.printOf(head, pieces, length), pieces, length);
}

function repeated(bodies: RepeatedBodies, request: Request, pieces: Uint8Array[], length: number, key: string): void {
  bodies.repeated(bodies.printOf(keyHead(request), pieces, length), pieces, length, key);
}

const request = { method: 'POST', url: '/v1/chat/completions', credential: 'key=team-a' };
const KB = 1024;

/** A JSON body of `size` bytes whose text is `fill` repeated. */
function bodyOf(size: number, fill = 'x'): Buffer {
  const open = '{"messages":[{"role":"user","content":"';
  const close = '"}]}';
  return Buffer.from(open + fill.repeat(size - open.length - close.length) + close);
}

/** `body` cut into pieces of `size` bytes, as a socket delivers it. */
function piecesOf(body: Buffer, size: number): Buffer[] {
  const pieces: Buffer[] = [];
  for (let at = 0; at < body.length; at += size) pieces.push(body.subarray(at, at + size));
  return pieces;
}

describe('RepeatedBodies', () => {
  it('gives the key dedupKey gives for the same bytes, however they are cut, found or hashed', () => {
    const bodies = new RepeatedBodies();
    const body = bodyOf(200 * KB);
    const expected = dedupKey({ ...request, body: undefined, rawBody: body });
    expect(keyOf(bodies, request, [body], body.length)).toBe(expected);
    expect(keyOf(bodies, request, piecesOf(body, 65_536), body.length)).toBe(expected);
    repeated(bodies, request, piecesOf(body, 65_536), body.length, expected);
    expect(keyOf(bodies, request, piecesOf(body, 10_000), body.length)).toBe(expected);
    const small = bodyOf(900);
    expect(keyOf(bodies, request, piecesOf(small, 1000), small.length)).toBe(
      dedupKey({ ...request, body: undefined, rawBody: small }),
    );
  });

  it('finds a repeated body by its bytes: the key kept is given back without hashing', () => {
    const bodies = new RepeatedBodies();
    const body = bodyOf(100 * KB);
    // A key no hash would give: only the look-up can return it.
    repeated(bodies, request, [body], body.length, 'kept-key');
    expect(bodies.keptBytes).toBeGreaterThanOrEqual(body.length);
    expect(bodies.keptBytes).toBeLessThan(body.length + KB);
    expect(keyOf(bodies, request, piecesOf(Buffer.from(body), 4096), body.length)).toBe('kept-key');
  });

  it('hashes a body that differs from a kept one only where the fingerprint does not look', () => {
    const bodies = new RepeatedBodies();
    const body = bodyOf(100 * KB);
    repeated(bodies, request, [body], body.length, 'kept-key');
    const other = Buffer.from(body);
    // 30% in: between the samples at 25% and 37.5%, so the fingerprint is the same.
    other[Math.floor(other.length * 0.3)] = 0x79;
    for (const pieces of [[other], piecesOf(other, 65_536), piecesOf(other, 1000)]) {
      expect(keyOf(bodies, request, pieces, other.length)).toBe(
        dedupKey({ ...request, body: undefined, rawBody: other }),
      );
    }
    // The last byte of a piece that is not the last of the body.
    const cut = Buffer.from(body);
    cut[65_535] = 0x79;
    expect(keyOf(bodies, request, piecesOf(cut, 65_536), cut.length)).not.toBe('kept-key');
  });

  it('never gives the key of another caller, route or scope for the same bytes', () => {
    const bodies = new RepeatedBodies();
    const body = bodyOf(64 * KB);
    repeated(bodies, request, [body], body.length, 'kept-key');
    for (const other of [
      { ...request, credential: 'key=team-b' },
      { ...request, credential: undefined },
      { ...request, url: '/v1/completions' },
      { ...request, scope: 'model-2' },
    ]) {
      expect(keyOf(bodies, other, [body], body.length)).toBe(dedupKey({ ...other, body: undefined, rawBody: body }));
    }
  });

  it('finds a small body by its bytes alone, and no other body, however it is cut', () => {
    const bodies = new RepeatedBodies();
    const small = bodyOf(200);
    repeated(bodies, request, piecesOf(small, 64), small.length, 'small-key');
    expect(keyOf(bodies, request, [Buffer.from(small)], small.length)).toBe('small-key');
    expect(keyOf(bodies, request, piecesOf(small, 7), small.length)).toBe('small-key');
    const other = Buffer.from(small);
    other[100] = 0x79;
    expect(keyOf(bodies, request, [other], other.length)).toBe(
      dedupKey({ ...request, body: undefined, rawBody: other }),
    );
    const shorter = small.subarray(0, 199);
    expect(keyOf(bodies, request, [shorter], shorter.length)).toBe(
      dedupKey({ ...request, body: undefined, rawBody: shorter }),
    );
    // A small body whose bytes spell a large body's fingerprint is not that body.
    const large = bodyOf(100 * KB);
    repeated(bodies, request, [large], large.length, 'large-key');
    const last = large.length - 16;
    const samples = [0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1].map((at) =>
      large.toString('latin1', Math.floor(at * last), Math.floor(at * last) + 16),
    );
    const keptPrint = Buffer.from(`${large.length}:${samples.join('')}`, 'latin1');
    expect(keyOf(bodies, request, [keptPrint], keptPrint.length)).not.toBe('large-key');
    // Nor is a large body whose fingerprint a small body's bytes spell, once that small body is kept.
    repeated(bodies, request, [keptPrint], keptPrint.length, 'small-print-key');
    expect(keyOf(bodies, request, [large], large.length)).toBe('large-key');
  });

  it('keeps no more bytes than it is given, the least recently used let go first', () => {
    const bodies = new RepeatedBodies({ maxBytes: 350 * KB });
    const fills = ['a', 'b', 'c', 'd'];
    for (const fill of fills) {
      const body = bodyOf(100 * KB, fill);
      repeated(bodies, request, [body], body.length, `key-${fill}`);
    }
    expect(bodies.keptBytes).toBeGreaterThan(300 * KB);
    expect(bodies.keptBytes).toBeLessThanOrEqual(350 * KB);
    // The least recently used went first.
    const first = bodyOf(100 * KB, 'a');
    expect(keyOf(bodies, request, [first], first.length)).not.toBe('key-a');
    const last = bodyOf(100 * KB, 'd');
    expect(keyOf(bodies, request, [last], last.length)).toBe('key-d');
  });
});
