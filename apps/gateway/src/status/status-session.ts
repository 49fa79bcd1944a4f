import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

/** Name of the cookie that lets a browser watch the status page (an EventSource cannot send an Authorization header). */
export const SESSION_COOKIE = 'npo_status';
/** How long a status page login lasts. */
export const SESSION_SECONDS = 12 * 60 * 60;

/**
 * Status page sessions without server-side state: the cookie is an expiry and
 * an HMAC of it, keyed by a digest of the gateway's keys. Every worker of
 * --workers accepts it, and changing the keys ends every session. It is only
 * ever accepted on the status page's own routes.
 */
export class StatusSessions {
  private readonly secret: Buffer;

  constructor(gatewayKeys: string[]) {
    this.secret = createHash('sha256').update(`status-page\n${gatewayKeys.join('\n')}`).digest();
  }

  issue(now = Date.now()): string {
    const expires = Math.floor(now / 1000) + SESSION_SECONDS;
    return `${expires}.${this.sign(expires)}`;
  }

  /** Whether the request carries an unexpired session cookie issued with these keys. */
  isValid(headers: IncomingHttpHeaders, now = Date.now()): boolean {
    const cookie = headers.cookie;
    if (typeof cookie !== 'string') return false;
    const value = cookie
      .split(';')
      .map((part) => part.trim())
      .find((part) => part.startsWith(`${SESSION_COOKIE}=`))
      ?.slice(SESSION_COOKIE.length + 1);
    const [expires, signature] = value?.split('.') ?? [];
    if (!expires || !signature || !/^\d+$/.test(expires) || Number(expires) * 1000 < now) return false;
    const expected = Buffer.from(this.sign(Number(expires)));
    const given = Buffer.from(signature);
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  private sign(expires: number): string {
    return createHmac('sha256', this.secret).update(String(expires)).digest('base64url');
  }
}
