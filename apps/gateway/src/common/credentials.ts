import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { ProviderKind } from './apis.js';

// RFC 9110: the scheme is case-insensitive and separated from its token by one or more spaces; clients and proxies
// also send tabs and trailing blanks. Each spelling of one token is the same credential.
const BEARER = /^[ \t]*bearer(?:[ \t]+(.*?))?[ \t]*$/i;

/** The token of an `Authorization: Bearer` value, in any spelling of the scheme; undefined when it is not Bearer. */
export function bearerToken(authorization: unknown): string | undefined {
  if (typeof authorization !== 'string') return undefined;
  const match = BEARER.exec(authorization);
  return match ? (match[1] ?? '') : undefined;
}

/** The key a client sent, from `Authorization: Bearer` or `x-api-key`: what goes upstream when the client's key is passed on. */
export function clientKey(headers: IncomingMessage['headers']): string | undefined {
  const token = bearerToken(headers.authorization);
  if (token !== undefined) return token || undefined;
  const apiKey = headers['x-api-key'];
  return typeof apiKey === 'string' && apiKey.trim() ? apiKey.trim() : undefined;
}

/**
 * The credential llama-server itself reads, exactly as it reads it: `Authorization`, else `X-Api-Key`, less a
 * leading `Bearer ` (case-sensitive, one space). Unlike OpenAI's, its check is not lenient: `bearer K` is another
 * key there (refused), so it is another caller here too, and never shares an answer with `Bearer K`.
 */
function llamaCredential(headers: IncomingMessage['headers']): string | undefined {
  const authorization = headers.authorization;
  const value = typeof authorization === 'string' && authorization !== '' ? authorization : headers['x-api-key'];
  if (typeof value !== 'string' || value === '') return undefined;
  return value.startsWith('Bearer ') ? value.slice('Bearer '.length) : value;
}

/**
 * The caller's one identity, derived once per request from the credential that decides who it is: the gateway or
 * virtual key it was let in with when the gateway checks keys, else the credential the provider reads (the
 * client's key as it is passed on: a Bearer token or `x-api-key` for OpenAI and Anthropic, Authorization first for
 * llama.cpp). Every spelling of one credential is one caller, and a header the provider never reads makes no new
 * one: a caller that varies it is still one tenant for answers, limits, the fair queue and failure attribution.
 * The identity is hashed before any use, never kept as it is; undefined for a caller with no credential.
 */
export function identityOf(
  headers: IncomingMessage['headers'],
  provider: ProviderKind,
  checksKeys: boolean,
): string | undefined {
  const credential = provider === 'llama' && !checksKeys ? llamaCredential(headers) : clientKey(headers);
  return credential === undefined ? undefined : `credential=${credential}`;
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
