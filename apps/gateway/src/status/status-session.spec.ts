import { describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { SESSION_SECONDS, StatusSessions } from './status-session.js';

describe('StatusSessions', () => {
  const digests = [randomBytes(32)];
  const base = randomBytes(32);
  const now = Date.UTC(2026, 11, 6);
  const cookie = (value: string) => ({ cookie: `other=1; npo_status=${value}` });

  it('accepts what it issued until it expires', () => {
    const sessions = new StatusSessions(
      () => digests,
      () => base,
    );
    const value = sessions.issue(now);
    expect(sessions.isValid(cookie(value), now)).toBe(true);
    expect(sessions.isValid(cookie(value), now + SESSION_SECONDS * 1000 - 1000)).toBe(true);
    expect(sessions.isValid(cookie(value), now + SESSION_SECONDS * 1000 + 1000)).toBe(false);
  });

  it('never takes a signed expiry beyond the lifetime it issues', () => {
    const sessions = new StatusSessions(
      () => digests,
      () => base,
    );
    // Signed with the right secret, but stating an expiry years away (as a cookie made with a leaked secret would).
    const farAway = sessions.issue(now + 10 * 365 * 24 * 3600 * 1000);
    expect(sessions.isValid(cookie(farAway), now)).toBe(false);
  });

  it('a session of another secret, or of other keys, is not accepted', () => {
    const value = new StatusSessions(
      () => digests,
      () => base,
    ).issue(now);
    expect(
      new StatusSessions(
        () => digests,
        () => randomBytes(32),
      ).isValid(cookie(value), now),
    ).toBe(false);
    expect(
      new StatusSessions(
        () => [randomBytes(32)],
        () => base,
      ).isValid(cookie(value), now),
    ).toBe(false);
  });
});
