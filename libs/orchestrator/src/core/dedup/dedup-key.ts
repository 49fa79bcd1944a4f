import { createHash, randomUUID } from 'node:crypto';
import { configure } from 'safe-stable-stringify';

/** What identifies one request for deduplication. */
export interface DedupKeyInput {
  method: string;
  /** Path and query string. */
  url: string;
  /** The parsed request body; its field order does not matter. */
  body: unknown;
  /**
   * The caller's credential (API key, bearer token, tenant id). It is hashed
   * into the key, never stored, so two tenants never share an answer.
   */
  credential?: string;
}

// Sorted keys make the form canonical; bigint and cycles must not throw on hostile input.
const canonicalJson = configure({ deterministic: true, bigint: true, circularValue: '[Circular]' });

/**
 * SHA-256 over the canonical form of everything that can change the answer,
 * in one pass: the body is serialised once and hashed once.
 */
export function dedupKey(input: DedupKeyInput): string {
  const hash = createHash('sha256');
  hash.update(input.method);
  hash.update('\n');
  hash.update(input.url);
  hash.update('\n');
  hash.update(input.credential ?? '');
  hash.update('\n');
  hash.update(canonicalBody(input.body));
  return hash.digest('base64url');
}

/**
 * A body with no canonical form (nested too deep for the stack, or a throwing
 * `toJSON`/getter) gets a key of its own: it is not deduplicated, and never
 * shares an answer with another body.
 */
function canonicalBody(body: unknown): string {
  try {
    return canonicalJson(body) ?? '';
  } catch {
    return `\u0000unserialisable:${randomUUID()}`;
  }
}
