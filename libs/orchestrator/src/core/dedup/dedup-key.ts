import { createHash, randomUUID } from 'node:crypto';

/** What identifies one request for deduplication. */
export interface DedupKeyInput {
  method: string;
  /** Path and query string. */
  url: string;
  /** The parsed request body; its field order does not matter. */
  body: unknown;
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
 * SHA-256 over the canonical form of everything that can change the answer:
 * method, URL, credential, scope and the body with its object keys sorted at every
 * depth, in one walk over the body. A body with no canonical form (too deep
 * without `maxDepth`, a throwing `toJSON` or getter) gets a key of its own:
 * it is not deduplicated, and never shares an answer with another body.
 */
export function dedupKey(input: DedupKeyInput, options: DedupKeyOptions = {}): string {
  const hash = createHash('sha256');
  hash.update(`${input.method}\n${input.url}\n${input.credential ?? ''}\n`);
  if (input.scope !== undefined) hash.update(`scope:${input.scope}\n`);
  hash.update(canonicalBody(input.body, options.maxDepth));
  return hash.digest('base64url');
}

function canonicalBody(body: unknown, maxDepth: number | undefined): string {
  if (body === undefined) return '';
  const writer = new CanonicalWriter(maxDepth ?? DEFAULT_WALK_DEPTH);
  try {
    writer.write(body, 0);
    return writer.parts.join('');
  } catch (error) {
    if (error instanceof BodyTooDeepError && maxDepth !== undefined) throw error;
    return `\u0000unserialisable:${randomUUID()}`;
  }
}

/**
 * JSON with sorted keys, as `JSON.stringify` would write each value otherwise
 * (toJSON honoured; undefined, functions and symbols skipped in objects and
 * null in arrays), plus bigints as digits and cycles as "[Circular]".
 * Hand-written because the key must also bound the depth in the same walk, and
 * libraries that cap depth replace what lies below with a placeholder, which
 * would let two different bodies share a key.
 */
class CanonicalWriter {
  readonly parts: string[] = [];
  private readonly ancestors = new Set<object>();

  constructor(private readonly maxDepth: number) {}

  write(value: unknown, depth: number): void {
    switch (typeof value) {
      case 'string':
        this.parts.push(JSON.stringify(value));
        return;
      case 'number':
        this.parts.push(Number.isFinite(value) ? String(value) : 'null');
        return;
      case 'boolean':
        this.parts.push(value ? 'true' : 'false');
        return;
      case 'bigint':
        this.parts.push(value.toString());
        return;
      case 'object':
        if (value === null) {
          this.parts.push('null');
          return;
        }
        return this.writeObject(value, depth + 1);
      default:
        // undefined, functions and symbols: what JSON.stringify writes for them inside an array.
        this.parts.push('null');
    }
  }

  private writeObject(value: object, depth: number): void {
    if (depth > this.maxDepth) throw new BodyTooDeepError(this.maxDepth);
    const toJSON = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') return this.write(toJSON.call(value), depth - 1);
    if (this.ancestors.has(value)) {
      this.parts.push('"[Circular]"');
      return;
    }
    this.ancestors.add(value);
    if (Array.isArray(value)) {
      this.parts.push('[');
      for (let i = 0; i < value.length; i++) {
        if (i > 0) this.parts.push(',');
        this.write(value[i], depth);
      }
      this.parts.push(']');
    } else {
      this.parts.push('{');
      let first = true;
      for (const key of Object.keys(value).sort()) {
        const field = (value as Record<string, unknown>)[key];
        if (field === undefined || typeof field === 'function' || typeof field === 'symbol') continue;
        this.parts.push(first ? `${JSON.stringify(key)}:` : `,${JSON.stringify(key)}:`);
        first = false;
        this.write(field, depth);
      }
      this.parts.push('}');
    }
    this.ancestors.delete(value);
  }
}
