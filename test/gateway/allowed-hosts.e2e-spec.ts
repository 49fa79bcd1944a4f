import { afterEach, describe, expect, it } from '@jest/globals';
import { request } from 'node:http';
import { ConfigError, parseGatewayConfig } from '../../apps/gateway/src/config/gateway-config.js';
import { HostCheck } from '../../apps/gateway/src/config/allowed-hosts.js';
import { startGateway, uniquePrompt, type GatewayUnderTest } from '../support/gateway-harness.js';
import { PLATFORMS } from '../support/platforms.js';

/**
 * DNS rebinding: a web page on attacker.example whose name is made to resolve to 127.0.0.1 reaches a loopback
 * gateway as "same origin", with `Host: attacker.example`. The gateway answers only the hosts it serves
 * (--allowed-hosts; the loopback names by default on loopback), before any route runs, on both platforms.
 */

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** node:http, since fetch will not send a Host header of our choosing. */
function call(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
): Promise<Answer> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        method,
        path,
        headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const chat = (label: string) =>
  JSON.stringify({ model: 'gpt-4o-mini', temperature: 0, messages: [{ role: 'user', content: uniquePrompt(label) }] });

describe.each(PLATFORMS)('allowed hosts (%s)', (platform) => {
  let gateway: GatewayUnderTest | undefined;
  afterEach(async () => {
    await gateway?.close();
    gateway = undefined;
  });
  // A provider key and no gateway keys: the set-up a rebinding page would spend.
  const start = async (flags: string[] = []) => {
    gateway = await startGateway({
      flags: ['--platform', platform, ...flags],
      env: { OPENAI_API_KEY: 'sk-provider-secret-0001' },
    });
    return gateway;
  };
  const port = () => new URL(gateway!.gatewayUrl).port;

  it('a rebinding Host on a proxied route gets 421 in the API shape, and the provider is never called', async () => {
    const { gatewayUrl, provider } = await start();
    const refused = await call(
      gatewayUrl,
      'POST',
      '/v1/chat/completions',
      { host: `attacker.example:${port()}`, origin: `http://attacker.example:${port()}` },
      chat('rebind'),
    );
    expect(refused.status).toBe(421);
    const body = JSON.parse(refused.text) as { error: { code: string; type: string; message: string } };
    expect(body.error.code).toBe('host_not_allowed');
    expect(body.error.message).toContain('--allowed-hosts');
    expect(refused.text).not.toContain('sk-provider');
    // Anthropic's shape on Anthropic's route.
    const anthropic = await call(gatewayUrl, 'POST', '/v1/messages', { host: 'attacker.example' }, '{}');
    expect(anthropic.status).toBe(421);
    expect(JSON.parse(anthropic.text)).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    expect(provider.stats().total).toBe(0);
  });

  it('a rebinding Host on the status snapshot and on health gets 421 in plain JSON', async () => {
    const { gatewayUrl } = await start();
    for (const path of ['/orchestrator/snapshot', '/orchestrator', '/health/ready', '/orchestrator/metrics']) {
      const refused = await call(gatewayUrl, 'GET', path, { host: 'attacker.example' });
      expect([path, refused.status]).toEqual([path, 421]);
      expect((JSON.parse(refused.text) as { error: { code: string } }).error.code).toBe('host_not_allowed');
    }
    expect((await call(gatewayUrl, 'GET', '/orchestrator/snapshot', { host: `127.0.0.1:${port()}` })).status).toBe(200);
  });

  it('on loopback, the loopback names and addresses are served on any port', async () => {
    const { gatewayUrl, provider } = await start();
    for (const host of ['localhost', 'localhost:9999', `127.0.0.1:${port()}`, '[::1]:18080', 'LOCALHOST:1']) {
      const served = await call(gatewayUrl, 'POST', '/v1/chat/completions', { host }, chat(`loopback ${host}`));
      expect([host, served.status]).toEqual([host, 200]);
    }
    expect(provider.stats().total).toBe(5);
    // Any other name is refused by default, even a private-looking one (those are served only beyond loopback).
    expect((await call(gatewayUrl, 'GET', '/health/live', { host: 'gateway.svc' })).status).toBe(421);
  });

  it('a host given by --allowed-hosts is served (with its port, only that port); others still are not', async () => {
    const { gatewayUrl } = await start(['--allowed-hosts', 'gateway.example.com, api.example.com:8443']);
    expect(
      (await call(gatewayUrl, 'POST', '/v1/chat/completions', { host: 'gateway.example.com' }, chat('custom'))).status,
    ).toBe(200);
    expect((await call(gatewayUrl, 'GET', '/orchestrator/snapshot', { host: 'Gateway.Example.com.:80' })).status).toBe(
      200,
    );
    expect((await call(gatewayUrl, 'GET', '/orchestrator/snapshot', { host: 'api.example.com:8443' })).status).toBe(
      200,
    );
    expect((await call(gatewayUrl, 'GET', '/orchestrator/snapshot', { host: 'api.example.com:8444' })).status).toBe(
      421,
    );
    expect((await call(gatewayUrl, 'GET', '/orchestrator/snapshot', { host: 'attacker.example' })).status).toBe(421);
    // The loopback names stay served.
    expect((await call(gatewayUrl, 'GET', '/orchestrator/snapshot', { host: 'localhost' })).status).toBe(200);
  });

  it('--allowed-hosts * serves any Host', async () => {
    const { gatewayUrl } = await start(['--allowed-hosts', '*']);
    expect((await call(gatewayUrl, 'GET', '/orchestrator/snapshot', { host: 'attacker.example' })).status).toBe(200);
  });

  it('--trust-proxy: X-Forwarded-Host is checked instead of Host; without it, X-Forwarded-Host is ignored', async () => {
    const { gatewayUrl, provider } = await start(['--trust-proxy', '--allowed-hosts', 'gateway.example.com']);
    const viaProxy = await call(
      gatewayUrl,
      'POST',
      '/v1/chat/completions',
      { host: 'localhost', 'x-forwarded-host': 'attacker.example' },
      chat('xfh bad'),
    );
    expect(viaProxy.status).toBe(421);
    expect(provider.stats().total).toBe(0);
    const good = await call(
      gatewayUrl,
      'POST',
      '/v1/chat/completions',
      { host: 'internal-name.example', 'x-forwarded-host': 'gateway.example.com' },
      chat('xfh good'),
    );
    expect(good.status).toBe(200);
    await gateway!.close();
    const plain = await start(['--allowed-hosts', 'gateway.example.com']);
    expect(
      (
        await call(plain.gatewayUrl, 'GET', '/orchestrator/snapshot', {
          host: 'localhost',
          'x-forwarded-host': 'attacker.example',
        })
      ).status,
    ).toBe(200);
    expect(
      (
        await call(plain.gatewayUrl, 'GET', '/orchestrator/snapshot', {
          host: 'attacker.example',
          'x-forwarded-host': 'gateway.example.com',
        })
      ).status,
    ).toBe(421);
  });

  it('status sign-in: an Origin outside the allowed hosts is refused even when it matches Host', async () => {
    const { gatewayUrl } = await start(['--gateway-keys', 'page-key-1', '--allowed-hosts', '*']);
    const login = (headers: Record<string, string>) =>
      call(gatewayUrl, 'POST', '/orchestrator/login', headers, '{"key":"page-key-1"}');
    // With * the Host check lets the rebinding page's request in: the origin check still refuses it.
    const rebound = await login({ host: `attacker.example:${port()}`, origin: `http://attacker.example:${port()}` });
    expect(rebound.status).toBe(403);
    expect(rebound.headers['set-cookie']).toBeUndefined();
    expect((JSON.parse(rebound.text) as { error: { code: string } }).error.code).toBe('cross_site_request');
    expect((await login({ host: `127.0.0.1:${port()}`, origin: `http://127.0.0.1:${port()}` })).status).toBe(204);
  });

  it('status sign-in: the proxied public name is a good Origin with --trust-proxy, though Host is internal', async () => {
    const { gatewayUrl } = await start([
      '--gateway-keys',
      'page-key-1',
      '--trust-proxy',
      '--allowed-hosts',
      'gateway.example.com',
    ]);
    const login = (headers: Record<string, string>) =>
      call(gatewayUrl, 'POST', '/orchestrator/login', headers, '{"key":"page-key-1"}');
    expect(
      (
        await login({
          host: 'localhost',
          'x-forwarded-host': 'gateway.example.com',
          origin: 'https://gateway.example.com',
        })
      ).status,
    ).toBe(204);
    expect(
      (
        await login({
          host: 'localhost',
          'x-forwarded-host': 'gateway.example.com',
          origin: 'https://other.example.com',
        })
      ).status,
    ).toBe(403);
  });
});

describe('--allowed-hosts and --trust-proxy values', () => {
  it.each([
    '',
    ' , ',
    '*,example.com',
    'http://example.com',
    'example.com/path',
    'example.com:0',
    'example.com:70000',
    '::1',
    'exa mple.com',
  ])('refuses --allowed-hosts %p with a clear message', (bad) => {
    expect(() => parseGatewayConfig(['--allowed-hosts', bad], {})).toThrow(ConfigError);
    expect(() => parseGatewayConfig(['--allowed-hosts', bad], {})).toThrow(/--allowed-hosts (must|takes|entries)/);
  });

  it('reads the environment too', () => {
    const config = parseGatewayConfig([], {
      ORCHESTRATOR_ALLOWED_HOSTS: 'a.example,[fd00::1]:443',
      ORCHESTRATOR_TRUST_PROXY: 'true',
    })!;
    expect(config.allowedHosts).toEqual([{ name: 'a.example' }, { name: '[fd00::1]', port: 443 }]);
    expect(config.trustProxy).toBe(true);
    expect(parseGatewayConfig([], {})!.trustProxy).toBe(false);
    expect(() => parseGatewayConfig(['--trust-proxy=yes'], {})).toThrow(ConfigError);
  });

  it('beyond loopback without a list: IP addresses, the host name and private names are served, public names are not', () => {
    const hosts = new HostCheck({ host: '0.0.0.0', allowedHosts: undefined, trustProxy: false });
    for (const host of [
      '10.1.2.3:18080',
      '[fd00::1]:18080',
      'gateway',
      'gateway.prod.svc',
      'gateway.prod.svc.cluster.local:80',
      'localhost',
    ]) {
      expect([host, hosts.allowsHost(host)]).toEqual([host, true]);
    }
    for (const host of ['attacker.example', 'gateway.prod', '10.1.2.3.attacker.example', 'svc.example.com']) {
      expect([host, hosts.allowsHost(host)]).toEqual([host, false]);
    }
    // With a list, names are the listed ones; IP addresses stay served (kubelet probes send the pod IP).
    const listed = new HostCheck({
      host: '0.0.0.0',
      allowedHosts: [{ name: 'gateway.example.com' }],
      trustProxy: false,
    });
    expect(listed.allowsHost('gateway.example.com')).toBe(true);
    expect(listed.allowsHost('10.1.2.3:18080')).toBe(true);
    expect(listed.allowsHost('gateway.prod.svc')).toBe(false);
  });
});
