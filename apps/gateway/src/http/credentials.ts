import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** The key a client sent, from `Authorization: Bearer` or `x-api-key`. */
export function clientKey(headers: IncomingMessage['headers']): string | undefined {
  const authorization = headers.authorization;
  if (typeof authorization === 'string' && authorization.toLowerCase().startsWith('bearer ')) {
    return authorization.slice(7).trim() || undefined;
  }
  const apiKey = headers['x-api-key'];
  return typeof apiKey === 'string' && apiKey ? apiKey : undefined;
}

/**
 * The caller's identity, derived once per request: every credential it
 * presents (`authorization`, whatever its scheme, and `x-api-key`), the gateway
 * key it was let in with included. Two callers that differ in either never
 * share an answer; the identity is hashed before any use (key, fair share,
 * failure attribution), never kept as it is.
 */
export function identityOf(headers: IncomingMessage['headers']): string | undefined {
  const authorization = headers.authorization;
  const apiKey = headers['x-api-key'];
  if (authorization === undefined && apiKey === undefined) return undefined;
  return `authorization=${String(authorization ?? '')}\nx-api-key=${String(apiKey ?? '')}`;
}

/** SHA-256 of a key: what is kept of gateway and virtual keys, and compared in constant time (equal lengths). */
export function keyDigest(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

/** Whether `key` is one of the keys behind `digests`, compared in constant time. */
export function isOneOf(digests: readonly Buffer[], key: string | undefined): boolean {
  if (!key) return false;
  const presented = keyDigest(key);
  return digests.some((known) => timingSafeEqual(known, presented));
}
