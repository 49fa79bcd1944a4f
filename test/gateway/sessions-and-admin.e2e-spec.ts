import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { createHash, createHmac } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Budgets } from '../../apps/gateway/src/budgets/budgets.service.js';
import { postJson, send, startGateway, type GatewayUnderTest } from '../support/gateway-harness.js';
import { redisServerMissing, startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';

/**
 * The edge of the control routes: status sessions rest on a secret nothing in
 * the keys file reveals and never outlive what the server issued, the sign-in
 * throttle slows guessing without locking admins out, fleet-wide figures need
 * an admin key, and a keys file that says `{}` revokes every key.
 */

const ADMIN = 'sk-admin-edge-0001';
const TENANT = 'sk-tenant-edge-0001';
const SECRET = 'a-session-secret-of-at-least-32-characters';
const sha256 = (text: string | Buffer) => createHash('sha256').update(text).digest();

function keysFile(document: unknown): string {
  const file = join(mkdtempSync(join(tmpdir(), 'edge-keys-')), 'keys.json');
  writeFileSync(file, JSON.stringify(document));
  return file;
}

const login = (base: string, key: string, headers: Record<string, string> = {}) =>
  postJson(`${base}/orchestrator/login`, { key }, headers);

/** A sign-in from another loopback address (127.0.0.0/8 is all the machine's own). */
function loginFrom(base: string, address: string, key: string): Promise<{ status: number; retryAfter?: string }> {
  const url = new URL(`${base}/orchestrator/login`);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        localAddress: address,
        headers: { 'content-type': 'application/json' },
      },
      (response) => {
        response.resume();
        response.on('end', () =>
          resolve({ status: response.statusCode ?? 0, retryAfter: response.headers['retry-after'] }),
        );
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify({ key }));
  });
}

const cookieOf = (response: { headers: Headers }) => response.headers.get('set-cookie')!.split(';')[0];

describe('status sessions, sign-in and admin data', () => {
  let gateways: GatewayUnderTest[] = [];
  let redis: OwnedRedis | undefined;
  const start = async (flags: string[], env: NodeJS.ProcessEnv = {}) => {
    const gateway = await startGateway({ flags, env });
    gateways.push(gateway);
    return gateway.gatewayUrl;
  };
  afterEach(async () => {
    await Promise.all(gateways.map((g) => g.close()));
    gateways = [];
  });
  afterAll(async () => {
    await redis?.close();
  });

  it('a keys file of sha256: digests is not enough to forge a session; the key itself still signs in', async () => {
    const digest = sha256(ADMIN);
    const base = await start([
      '--keys-file',
      keysFile({ [`sha256:${digest.toString('hex')}`]: { name: 'ops', admin: true } }),
    ]);
    // What a secret derived from the keys file's digests would let anyone who reads the file sign.
    const derived = createHash('sha256').update('status-page\n').update(digest).digest();
    const expires = Math.floor(Date.now() / 1000) + 3600;
    const forged = `npo_status=${expires}.${createHmac('sha256', derived).update(String(expires)).digest('base64url')}`;
    expect((await send(`${base}/orchestrator/snapshot`, { headers: { cookie: forged } })).status).toBe(401);

    const signedIn = await login(base, ADMIN);
    expect(signedIn.status).toBe(204);
    expect((await send(`${base}/orchestrator/snapshot`, { headers: { cookie: cookieOf(signedIn) } })).status).toBe(200);
  });

  it('a cookie whose expiry lies beyond the session lifetime is refused, even signed with the right secret', async () => {
    const base = await start(['--gateway-keys', ADMIN, '--session-secret', SECRET]);
    const secret = createHmac('sha256', SECRET).update('status-page\n').update(sha256(ADMIN)).digest();
    const cookie = (expires: number) =>
      `npo_status=${expires}.${createHmac('sha256', secret).update(String(expires)).digest('base64url')}`;
    // The year 5138.
    expect((await send(`${base}/orchestrator/snapshot`, { headers: { cookie: cookie(99_999_999_999) } })).status).toBe(
      401,
    );
    // The same signing within a session's lifetime is accepted: the refusal above is the expiry's alone.
    expect(
      (
        await send(`${base}/orchestrator/snapshot`, {
          headers: { cookie: cookie(Math.floor(Date.now() / 1000) + 3600) },
        })
      ).status,
    ).toBe(200);
  });

  it('the cookie is Secure behind a TLS proxy with --trust-proxy, and X-Forwarded-Proto is ignored without it', async () => {
    const trusting = await start(['--gateway-keys', ADMIN, '--trust-proxy']);
    const behindTls = await login(trusting, ADMIN, { 'x-forwarded-proto': 'https' });
    expect(behindTls.status).toBe(204);
    expect(behindTls.headers.get('set-cookie')).toMatch(/; Secure(;|$)/);
    expect((await login(trusting, ADMIN)).headers.get('set-cookie')).not.toMatch(/Secure/);

    const direct = await start(['--gateway-keys', ADMIN]);
    expect((await login(direct, ADMIN, { 'x-forwarded-proto': 'https' })).headers.get('set-cookie')).not.toMatch(
      /Secure/,
    );
  });

  it("two replicas over one Redis accept each other's session; a gateway outside the fleet with the same keys does not", async () => {
    const missing = redisServerMissing();
    if (missing) throw new Error(missing);
    redis = await startOwnedRedis();
    const a = await start(['--gateway-keys', ADMIN, '--redis', redis.url]);
    const b = await start(['--gateway-keys', ADMIN, '--redis', redis.url, '--platform', 'express']);
    const other = await start(['--gateway-keys', ADMIN, '--redis', redis.url, '--redis-prefix', 'another-fleet']);
    const signedIn = await login(a, ADMIN);
    expect(signedIn.status).toBe(204);
    const cookie = cookieOf(signedIn);
    expect((await send(`${b}/orchestrator/snapshot`, { headers: { cookie } })).status).toBe(200);
    expect((await send(`${a}/orchestrator/snapshot`, { headers: { cookie } })).status).toBe(200);
    expect((await send(`${other}/orchestrator/snapshot`, { headers: { cookie } })).status).toBe(401);
  });

  it('many wrong keys from one address are throttled (429, Retry-After); the right key still signs in', async () => {
    const base = await start(['--gateway-keys', ADMIN]);
    const statuses: number[] = [];
    for (let i = 0; i < 15; i++) statuses.push((await login(base, `wrong-key-${i}`)).status);
    expect(statuses).toEqual([...Array(10).fill(401), ...Array(5).fill(429)]);
    const throttled = await login(base, 'wrong-key-again');
    expect(Number(throttled.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(throttled.json.error.code).toBe('too_many_sign_ins');
    expect((await login(base, ADMIN)).status).toBe(204);
  });

  it('40 addresses with one wrong key each are throttled together; the right key still signs in', async () => {
    const base = await start(['--gateway-keys', ADMIN]);
    const answers = [];
    for (let i = 2; i < 42; i++) answers.push(await loginFrom(base, `127.0.0.${i}`, `wrong-key-${i}`));
    expect(answers.filter((a) => a.status === 401)).toHaveLength(30);
    expect(answers.slice(30).every((a) => a.status === 429 && Number(a.retryAfter) > 0)).toBe(true);
    expect((await loginFrom(base, '127.0.0.50', ADMIN)).status).toBe(204);
  });

  it("metrics and /health need an admin key: a tenant's key gets 403 naming what is needed; probes stay open", async () => {
    const base = await start([
      '--keys-file',
      keysFile({ [ADMIN]: { name: 'ops', admin: true }, [TENANT]: { name: 'team' } }),
      '--gateway-keys',
      'sk-gateway-edge-0001',
    ]);
    for (const path of ['/orchestrator/metrics', '/health', '/v1/health']) {
      const tenant = await send(`${base}${path}`, { headers: { authorization: `Bearer ${TENANT}` } });
      expect(tenant.status).toBe(403);
      expect(tenant.json.error.code).toBe('admin_key_required');
      expect(tenant.json.error.message).toContain('admin key');
      expect((await send(`${base}${path}`, { headers: { authorization: `Bearer ${ADMIN}` } })).status).toBe(200);
      expect((await send(`${base}${path}`, { headers: { authorization: 'Bearer sk-gateway-edge-0001' } })).status).toBe(
        200,
      );
      expect((await send(`${base}${path}`)).status).toBe(401);
    }
    for (const path of ['/health/live', '/health/ready']) {
      expect((await send(`${base}${path}`)).json).toEqual({ status: 'ok' });
      expect((await send(`${base}${path}`, { headers: { authorization: `Bearer ${TENANT}` } })).json).toEqual({
        status: 'ok',
      });
      expect((await send(`${base}${path}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json).toHaveProperty(
        'details',
      );
    }
  });

  it('a keys file rewritten to {} revokes every key; one that does not parse keeps them', async () => {
    const file = keysFile({ [TENANT]: { name: 'team' } });
    const base = await start(['--keys-file', file]);
    const gateway = gateways[0];
    const chat = () =>
      postJson(
        `${base}/v1/chat/completions`,
        { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] },
        { authorization: `Bearer ${TENANT}` },
      );
    expect((await chat()).status).toBe(200);
    const keys = gateway.app.get(Budgets).keys!;

    writeFileSync(file, '{ not json');
    expect(keys.reload('test')).toBe(false);
    expect((await chat()).status).toBe(200);

    writeFileSync(file, '{}');
    expect(keys.reload('test')).toBe(true);
    expect((await chat()).status).toBe(401);
  });

  it('a gateway started with a keys file of {} refuses every key', async () => {
    const base = await start(['--keys-file', keysFile({})]);
    const chat = await postJson(
      `${base}/v1/chat/completions`,
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] },
      { authorization: `Bearer ${TENANT}` },
    );
    expect(chat.status).toBe(401);
  });
});
