import { afterEach, describe, expect, it } from '@jest/globals';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Orchestrator } from 'nest-prompt-orchestrator/core';
import { send, startGateway, type GatewayUnderTest } from '../support/gateway-harness.js';
import { PLATFORMS } from '../support/platforms.js';

/**
 * Load balancers and Kubernetes probe `/health/live` and `/health/ready`
 * without a key. With gateway keys or a keys file on, those two answer anyone
 * with their status code and `{ status }` alone; the details, `/health` and the
 * metrics stay behind an admin key.
 */

const KEY = 'sk-health-access-0001';

function keysFile(): string {
  const file = join(mkdtempSync(join(tmpdir(), 'health-keys-')), 'keys.json');
  // An admin key: the details are the whole gateway's (a tenant's own key gets the status only).
  writeFileSync(file, JSON.stringify({ [KEY]: { name: 'ops', admin: true } }));
  return file;
}

const KEYS: Array<[string, () => string[]]> = [
  ['--gateway-keys', () => ['--gateway-keys', KEY]],
  ['--keys-file', () => ['--keys-file', keysFile()]],
];

describe.each(PLATFORMS)('probes without a key (%s)', (platform) => {
  let gateway: GatewayUnderTest | undefined;
  afterEach(async () => {
    await gateway?.close();
    gateway = undefined;
  });

  it.each(KEYS)(
    'with %s: live and ready answer 200 { status } alone; /health and the metrics still want a key',
    async (_name, flags) => {
      gateway = await startGateway({ flags: ['--platform', platform, ...flags()] });
      const base = gateway.gatewayUrl;
      const withKey = { authorization: `Bearer ${KEY}` };

      for (const path of ['/health/live', '/health/ready']) {
        for (const headers of [{}, { authorization: 'Bearer sk-not-one-of-its-keys' }] as Array<
          Record<string, string>
        >) {
          const probe = await send(`${base}${path}`, { headers });
          expect(probe.status).toBe(200);
          expect(probe.json).toEqual({ status: 'ok' });
          expect(probe.headers.get('cache-control')).toBe('no-store');
        }
        // A key holder gets the whole report, as before.
        const detailed = await send(`${base}${path}`, { headers: withKey });
        expect(detailed.status).toBe(200);
        expect(detailed.json).toMatchObject({ status: 'ok', info: expect.any(Object), details: expect.any(Object) });
      }
      expect((await send(`${base}/health/ready`, { headers: withKey })).json.details).toHaveProperty('upstreams');

      expect((await send(`${base}/health`)).status).toBe(401);
      expect((await send(`${base}/v1/health`)).status).toBe(401);
      expect((await send(`${base}/orchestrator/metrics`)).status).toBe(401);
      const health = await send(`${base}/health`, { headers: withKey });
      expect(health.status).toBe(200);
      expect(health.json.upstream).toMatchObject({ provider: 'openai' });

      // Not ready (shutting down): the code says so, and the body still says nothing more.
      gateway.app.get(Orchestrator).drain();
      const draining = await send(`${base}/health/ready`);
      expect(draining.status).toBe(503);
      expect(draining.json).toEqual({ status: 'error' });
      expect((await send(`${base}/health/live`)).json).toEqual({ status: 'ok' });
    },
  );
});
