import { createHash, hash as hashOnce, randomUUID, type Hash } from 'node:crypto';

/** What identifies one request for deduplication. */
export interface DedupKeyInput {
  method: string;
  /** Path and query string. */
  url: string;
  /** The parsed request body; its field order does not matter (unless `rawBody` is given). */
  body: unknown;
  /**
   * The body's bytes as the client sent them. When given, the key hashes these bytes as they are, in one pass and
   * without serialising `body` again: two bodies that differ only in whitespace or field order then get different
   * keys (each is a miss, never a wrong answer), which suits callers that forward these same bytes upstream and whose
   * repeats come from the same client code. `body` is still walked for its depth against `maxDepth`.
   */
  rawBody?: Uint8Array;
  /**
   * The caller's identity (API key, bearer token, tenant id). It is hashed
   * into the key, never stored, so two tenants never share an answer.
   */
  credential?: string;
  /**
   * Anything outside the request that changes the answer, e.g. which model the
   * upstream serves right now: the same request to another model is another question.
   */
  scope?: string;
}

export interface DedupKeyOptions {
  /**
   * Nesting depth beyond which the body is refused with `BodyTooDeepError`
   * (the walk that makes the key doubles as the depth check). Without it, a
   * body nested deeper than 1 000 levels gets a key of its own (never shared).
   */
  maxDepth?: number;
}

/** The body is nested deeper than `DedupKeyOptions.maxDepth`. */
export class BodyTooDeepError extends Error {
  constructor(readonly maxDepth: number) {
    super(`The request body is nested more than ${maxDepth} levels deep.`);
    this.name = 'BodyTooDeepError';
  }
}

// Deeper than any real request, and shallow enough for the recursive walk never to reach the stack's limit.
const DEFAULT_WALK_DEPTH = 1_000;

/**
 * SHA-256 over everything that can change the answer: method, URL, credential,
 * scope and the body, either its bytes as sent (`rawBody`) or its canonical form
 * (object keys sorted at every depth), written into the hash as the walk goes.
 * A body with no canonical form (too deep without `maxDepth`, a throwing `toJSON`
 * or getter) gets a key of its own: it is not deduplicated, and never shares an
 * answer with another body.
 */
export function dedupKey(input: DedupKeyInput, options: DedupKeyOptions = {}): string {
  const head = keyHead(input);
  if (input.rawBody !== undefined) {
    if (options.maxDepth !== undefined) checkDepth(input.body, options.maxDepth);
    return bytesKey(head, [input.rawBody]);
  }
  const hash = createHash('sha256').update(head);
  if (input.body === undefined) return hash.digest('base64url');
  try {
    new CanonicalWriter(hash, options.maxDepth ?? DEFAULT_WALK_DEPTH).writeAll(input.body);
    return hash.digest('base64url');
  } catch (error) {
    if (error instanceof BodyTooDeepError && options.maxDepth !== undefined) throw error;
    return createHash('sha256').update(head).update(`\u0000unserialisable:${randomUUID()}`).digest('base64url');
  }
}

/** What the key hashes before the body: everything about the request that is not its body. */
export function keyHead(input: Omit<DedupKeyInput, 'body' | 'rawBody'>): string {
  const head = `${input.method}\n${input.url}\n${input.credential ?? ''}\n`;
  return input.scope === undefined ? head : `${head}scope:${input.scope}\n`;
}

/** `dedupKey` of a body given as its bytes (`rawBody`), in the pieces they came in. */
export function bytesKey(head: string, pieces: readonly Uint8Array[]): string {
  if (pieces.length <= 1 && (pieces[0]?.length ?? 0) <= ONE_SHOT_BYTES) return oneShotKey(head, pieces[0]);
  const hash = createHash('sha256').update(head);
  for (const piece of pieces) hash.update(piece);
  return hash.digest('base64url');
}

/**
 * Bodies up to this size are hashed in one call, head and body first copied into one buffer (taken from Node's pool
 * at this size): making, feeding and reading a `Hash` object costs more than that copy.
 */
const ONE_SHOT_BYTES = 3 * 1024;

function oneShotKey(head: string, body: Uint8Array | undefined): string {
  const headBytes = Buffer.byteLength(head);
  const all = Buffer.allocUnsafe(headBytes + (body?.length ?? 0));
  all.write(head, 0);
  if (body !== undefined) all.set(body, headBytes);
  return hashOnce('sha256', all, 'base64url');
}

/** Throws `BodyTooDeepError` when objects and arrays nest deeper than `maxDepth`; strings and numbers are not read. */
function checkDepth(value: unknown, maxDepth: number, depth = 0): void {
  if (typeof value !== 'object' || value === null) return;
  if (++depth > maxDepth) throw new BodyTooDeepError(maxDepth);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) checkDepth(value[i], maxDepth, depth);
  } else {
    for (const key in value) checkDepth((value as Record<string, unknown>)[key], maxDepth, depth);
  }
}

// Text is handed to the hash in pieces of about this many UTF-16 units: no copy of the whole body is ever built.
const FLUSH_AT = 16_384;

/**
 * JSON with sorted keys, as `JSON.stringify` would write each value otherwise
 * (toJSON honoured; undefined, functions and symbols skipped in objects and
 * null in arrays), plus bigints as digits and cycles as "[Circular]".
 * Hand-written because the key must also bound the depth in the same walk, and
 * libraries that cap depth replace what lies below with a placeholder, which
 * would let two different bodies share a key.
 */
class CanonicalWriter {
  private text = '';
  private readonly ancestors = new Set<object>();

  constructor(
    private readonly hash: Hash,
    private readonly maxDepth: number,
  ) {}

  writeAll(value: unknown): void {
    this.write(value, 0);
    if (this.text) this.hash.update(this.text);
  }

  private push(text: string): void {
    this.text += text;
    if (this.text.length >= FLUSH_AT) {
      this.hash.update(this.text);
      this.text = '';
    }
  }

  private write(value: unknown, depth: number): void {
    switch (typeof value) {
      case 'string':
        this.push(JSON.stringify(value));
        return;
      case 'number':
        this.push(Number.isFinite(value) ? String(value) : 'null');
        return;
      case 'boolean':
        this.push(value ? 'true' : 'false');
        return;
      case 'bigint':
        this.push(value.toString());
        return;
      case 'object':
        if (value === null) {
          this.push('null');
          return;
        }
        return this.writeObject(value, depth + 1);
      default:
        // undefined, functions and symbols: what JSON.stringify writes for them inside an array.
        this.push('null');
    }
  }

  private writeObject(value: object, depth: number): void {
    if (depth > this.maxDepth) throw new BodyTooDeepError(this.maxDepth);
    const toJSON = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') return this.write(toJSON.call(value), depth - 1);
    if (this.ancestors.has(value)) {
      this.push('"[Circular]"');
      return;
    }
    this.ancestors.add(value);
    if (Array.isArray(value)) {
      this.push('[');
      for (let i = 0; i < value.length; i++) {
        if (i > 0) this.push(',');
        this.write(value[i], depth);
      }
      this.push(']');
    } else {
      this.push('{');
      let first = true;
      for (const key of Object.keys(value).sort()) {
        const field = (value as Record<string, unknown>)[key];
        if (field === undefined || typeof field === 'function' || typeof field === 'symbol') continue;
        this.push(first ? `${JSON.stringify(key)}:` : `,${JSON.stringify(key)}:`);
        first = false;
        this.write(field, depth);
      }
      this.push('}');
    }
    this.ancestors.delete(value);
  }
}
