import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

/** Name of the cookie that lets a browser watch the status page (an EventSource cannot send an Authorization header). */
export const SESSION_COOKIE = 'npo_status';
/** How long a status page login lasts. */
export const SESSION_SECONDS = 12 * 60 * 60;

/**
 * Status page sessions without server-side state: the cookie is an expiry and
 * an HMAC of it, keyed by the digests of the keys that may sign in (the
 * gateway keys and the keys file's admin keys). Every worker and replica with
 * the same keys accepts it, and changing those keys ends every session.
 * Without any such key no session exists at all: a secret derived from
 * nothing would let anyone forge a cookie. It is only ever accepted on the
 * status page's own routes.
 */
export class StatusSessions {
  private secret?: Buffer;
  private secretOf: readonly Buffer[] = [];

  /** `signInDigests` is read at each use: a reloaded keys file takes effect at once. */
  constructor(private readonly signInDigests: () => readonly Buffer[]) {}

  /** Whether anybody can sign in (there is a key that may). */
  get possible(): boolean {
    return this.signInDigests().length > 0;
  }

  issue(now = Date.now()): string {
    const secret = this.currentSecret();
    if (!secret) throw new Error('no key may sign in to the status page');
    const expires = Math.floor(now / 1000) + SESSION_SECONDS;
    return `${expires}.${sign(secret, expires)}`;
  }

  /** Whether the request carries an unexpired session cookie issued with these keys. */
  isValid(headers: IncomingHttpHeaders, now = Date.now()): boolean {
    const secret = this.currentSecret();
    const cookie = headers.cookie;
    if (!secret || typeof cookie !== 'string') return false;
    const value = cookie
      .split(';')
      .map((part) => part.trim())
      .find((part) => part.startsWith(`${SESSION_COOKIE}=`))
      ?.slice(SESSION_COOKIE.length + 1);
    const [expires, signature] = value?.split('.') ?? [];
    if (!expires || !signature || !/^\d+$/.test(expires) || Number(expires) * 1000 < now) return false;
    const expected = Buffer.from(sign(secret, Number(expires)));
    const given = Buffer.from(signature);
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  private currentSecret(): Buffer | undefined {
    const digests = this.signInDigests();
    if (digests.length === 0) return undefined;
    // Recomputed only when the keys changed (a reload makes a new array).
    if (digests !== this.secretOf || !this.secret) {
      const hash = createHash('sha256').update('status-page\n');
      for (const digest of digests) hash.update(digest);
      this.secret = hash.digest();
      this.secretOf = digests;
    }
    return this.secret;
  }
}

function sign(secret: Buffer, expires: number): string {
  return createHmac('sha256', secret).update(String(expires)).digest('base64url');
}
