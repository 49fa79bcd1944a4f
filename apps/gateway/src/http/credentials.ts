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

/** The caller's identity in the dedup key: the `authorization` header, else `x-api-key` (as the plugin's default). */
export function credentialOf(headers: IncomingMessage['headers']): string | undefined {
  const value = headers.authorization ?? headers['x-api-key'];
  return Array.isArray(value) ? value.join(',') : value;
}
