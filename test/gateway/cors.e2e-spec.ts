import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { PLATFORMS } from '../support/platforms.js';
import { postJson, send, startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';

/**
 * CORS: off unless --cors is given; with it, preflights are answered before
 * any key check (on any path), every answer (errors and streams included)
 * carries the allowed origin, and the gateway's own headers are exposed.
 */

const ORIGIN = 'http://app.example';
const chat = (label: string) => ({ model: 'mock-model', messages: [{ role: 'user', content: uniquePrompt(label) }] });

function preflight(url: string, origin = ORIGIN) {
  return send(url, {
    method: 'OPTIONS',
    headers: {
      origin,
      'access-control-request-method': 'POST',
      'access-control-request-headers': 'authorization, content-type, x-stainless-retry-count',
    },
  });
}

describe.each(PLATFORMS)('CORS on %s', (platform) => {
  describe('without --cors', () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({ flags: ['--platform', platform] });
    });
    afterAll(() => g.close());

    it('sends no CORS header and answers no preflight', async () => {
      const answer = await postJson(`${g.gatewayUrl}/v1/chat/completions`, chat('no cors'), { origin: ORIGIN });
      expect(answer.status).toBe(200);
      expect(answer.headers.get('access-control-allow-origin')).toBeNull();
      const options = await preflight(`${g.gatewayUrl}/v1/chat/completions`);
      expect(options.headers.get('access-control-allow-origin')).toBeNull();
      expect(options.status).toBe(404);
    });
  });

  describe("--cors '*' with --gateway-keys", () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({ flags: ['--platform', platform, '--cors', '*', '--gateway-keys', 'k1'] });
    });
    afterAll(() => g.close());

    it('answers a preflight on any path before the key check, echoing the origin and the requested headers', async () => {
      for (const path of ['/v1/chat/completions', '/v1/messages', '/nope']) {
        const r = await preflight(`${g.gatewayUrl}${path}`);
        expect({ path, status: r.status }).toEqual({ path, status: 204 });
        expect(r.headers.get('access-control-allow-origin')).toBe(ORIGIN);
        expect(r.headers.get('access-control-allow-methods')).toContain('POST');
        expect(r.headers.get('access-control-allow-headers')).toBe(
          'authorization, content-type, x-stainless-retry-count',
        );
        expect(r.headers.get('access-control-max-age')).toBe('600');
        expect(r.headers.get('vary')).toMatch(/origin/i);
      }
      expect(g.provider.stats().total).toBe(0);
    });

    it('puts the origin and the exposed headers on answers, errors and streams', async () => {
      const auth = { origin: ORIGIN, authorization: 'Bearer k1' };
      const answer = await postJson(`${g.gatewayUrl}/v1/chat/completions`, chat('cors answer'), auth);
      expect(answer.status).toBe(200);
      expect(answer.headers.get('access-control-allow-origin')).toBe(ORIGIN);
      const exposed = (answer.headers.get('access-control-expose-headers') ?? '').toLowerCase();
      for (const name of ['x-orchestrator-dedup', 'retry-after', 'x-request-id', 'x-should-retry'])
        expect(exposed).toContain(name);

      const stream = await postJson(
        `${g.gatewayUrl}/v1/chat/completions`,
        { ...chat('cors stream'), stream: true },
        auth,
      );
      expect(stream.headers.get('content-type')).toContain('text/event-stream');
      expect(stream.headers.get('access-control-allow-origin')).toBe(ORIGIN);

      const errors = [
        await postJson(`${g.gatewayUrl}/v1/chat/completions`, chat('no key'), { origin: ORIGIN }),
        await send(`${g.gatewayUrl}/v1/chat/completions`, {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: '{"messages":',
        }),
        await send(`${g.gatewayUrl}/nope`, { headers: auth }),
      ];
      expect(errors.map((e) => e.status)).toEqual([401, 400, 404]);
      for (const e of errors) expect(e.headers.get('access-control-allow-origin')).toBe(ORIGIN);
    });
  });

  describe('--cors with a list of origins', () => {
    let g: GatewayUnderTest;
    beforeAll(async () => {
      g = await startGateway({
        flags: ['--platform', platform],
        env: { ORCHESTRATOR_CORS_ORIGINS: `${ORIGIN}, http://other.example` },
      });
    });
    afterAll(() => g.close());

    it('allows the listed origins only', async () => {
      const allowed = await postJson(`${g.gatewayUrl}/v1/chat/completions`, chat('listed'), {
        origin: 'http://other.example',
      });
      expect(allowed.headers.get('access-control-allow-origin')).toBe('http://other.example');
      const refused = await postJson(`${g.gatewayUrl}/v1/chat/completions`, chat('not listed'), {
        origin: 'http://evil.example',
      });
      expect(refused.headers.get('access-control-allow-origin')).toBeNull();
      const refusedPreflight = await preflight(`${g.gatewayUrl}/v1/chat/completions`, 'http://evil.example');
      expect(refusedPreflight.headers.get('access-control-allow-origin')).toBeNull();
    });
  });
});

describe('--cors values', () => {
  it('takes *, or origins as a browser sends them; anything else stops start-up with a message', async () => {
    const { parseGatewayConfig, ConfigError } = await import('../../apps/gateway/src/config/gateway-config.js');
    expect(parseGatewayConfig(['--cors', '*'], {})?.corsOrigins).toBe('*');
    expect(parseGatewayConfig(['--cors', 'https://a.example, http://localhost:5173/'], {})?.corsOrigins).toEqual([
      'https://a.example',
      'http://localhost:5173',
    ]);
    expect(parseGatewayConfig([], {})?.corsOrigins).toBeUndefined();
    for (const bad of ['', 'a.example', 'https://a.example/path', '*,https://a.example', 'ftp://a.example']) {
      expect(() => parseGatewayConfig(['--cors', bad], {})).toThrow(ConfigError);
    }
  });
});
