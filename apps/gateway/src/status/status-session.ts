import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

/** Name of the cookie that lets a browser watch the status page (an EventSource cannot send an Authorization header). */
export const SESSION_COOKIE = 'npo_status';
/** How long a status page login lasts: the longest any cookie is accepted for, whatever expiry it states. */
export const SESSION_SECONDS = 12 * 60 * 60;
/** Replicas' clocks may differ a little: a cookie issued by one whose clock runs ahead is still accepted. */
const CLOCK_SKEW_SECONDS = 60;

/**
 * Status page sessions without server-side state: the cookie is an expiry and
 * an HMAC of it. The HMAC's key is the server's session secret (see
 * `SessionSecret`: random, or `--session-secret`, never anything in the keys
 * file) mixed with the digests of the keys that may sign in (the gateway keys
 * and the keys file's admin keys), so changing those keys still ends every
 * session. Without any such key no session exists at all. It is only ever
 * accepted on the status page's own routes.
 */
export class StatusSessions {
  private secret?: Buffer;
  private secretOf?: { digests: readonly Buffer[]; base: Buffer };

  /** Both are read at each use: a reloaded keys file (or the fleet's secret, read at start) takes effect at once. */
  constructor(
    private readonly signInDigests: () => readonly Buffer[],
    private readonly baseSecret: () => Buffer,
  ) {}

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

  /**
   * Whether the request carries an unexpired session cookie issued with these keys. An expiry further away than
   * a session this server issues lasts is refused, signed or not: the cookie's word is never taken beyond that.
   */
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
    if (!expires || !signature || !/^\d{1,12}$/.test(expires)) return false;
    const at = Number(expires);
    const nowSeconds = now / 1000;
    if (at < nowSeconds || at > nowSeconds + SESSION_SECONDS + CLOCK_SKEW_SECONDS) return false;
    const expected = Buffer.from(sign(secret, at));
    const given = Buffer.from(signature);
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  private currentSecret(): Buffer | undefined {
    const digests = this.signInDigests();
    if (digests.length === 0) return undefined;
    const base = this.baseSecret();
    // Recomputed only when the keys (a reload makes a new array) or the base secret changed.
    if (!this.secret || this.secretOf?.digests !== digests || this.secretOf.base !== base) {
      const hmac = createHmac('sha256', base).update('status-page\n');
      for (const digest of digests) hmac.update(digest);
      this.secret = hmac.digest();
      this.secretOf = { digests, base };
    }
    return this.secret;
  }
}

function sign(secret: Buffer, expires: number): string {
  return createHmac('sha256', secret).update(String(expires)).digest('base64url');
}
