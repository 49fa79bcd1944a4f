import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseGatewayConfig, type ProviderKind } from '../../apps/gateway/src/config/gateway-config.js';
import { createProvider } from '../../apps/gateway/src/providers/provider.factory.js';
import { ROUTES, routePaths, type GatewayRoute } from '../../apps/gateway/src/providers/provider.js';

/**
 * docs/gateway.md's route table says, for every route, its method and paths,
 * its kind, whether it is deduplicated, and what each provider does with it.
 * It must say what the code does: the ROUTES table and the provider classes.
 */

const PROVIDERS: ProviderKind[] = ['openai', 'llama', 'anthropic'];

interface Row {
  route: string;
  method: string;
  paths: string[];
  kind: string;
  dedup: string;
  providers: Record<ProviderKind, string>;
}

function documentedRows(): Row[] {
  const doc = readFileSync(join(dirname(fileURLToPath(import.meta.url)), '../../docs/gateway.md'), 'utf8');
  const section = doc.slice(doc.indexOf('## Routes'), doc.indexOf('\n## ', doc.indexOf('## Routes') + 1));
  return section
    .split('\n')
    .filter((line) => /^\| `[\w-]+` \|/.test(line))
    .map((line) => {
      const cells = line
        .split('|')
        .slice(1, -1)
        .map((c) => c.trim());
      const codes = [...cells[1].matchAll(/`([^`]+)`/g)].map((m) => m[1]);
      const [method, first] = codes[0].split(' ');
      return {
        route: cells[0].replace(/`/g, ''),
        method,
        paths: [first, ...codes.slice(1)],
        kind: cells[2],
        dedup: cells[3],
        providers: { openai: cells[4], llama: cells[5], anthropic: cells[6] },
      };
    });
}

describe('the route table in docs/gateway.md', () => {
  const rows = documentedRows();
  const providers = Object.fromEntries(
    PROVIDERS.map((kind) => [
      kind,
      createProvider(parseGatewayConfig(['--provider', kind, '--upstream', 'http://127.0.0.1:9'], {})!),
    ]),
  ) as Record<ProviderKind, ReturnType<typeof createProvider>>;

  it('lists every route in ROUTES, once', () => {
    expect(rows.map((r) => r.route).sort()).toEqual(Object.keys(ROUTES).sort());
  });

  it.each(Object.keys(ROUTES) as GatewayRoute[])('%s: method, paths, kind and dedup as in ROUTES', (route) => {
    const row = rows.find((r) => r.route === route)!;
    const info = ROUTES[route];
    expect({ method: row.method, paths: row.paths, kind: row.kind, dedup: row.dedup }).toEqual({
      method: info.method,
      paths: routePaths(route),
      kind: info.kind,
      dedup: info.kind === 'generation' ? 'yes' : 'no',
    });
  });

  it.each(Object.keys(ROUTES) as GatewayRoute[])('%s: what each provider does, as its class says', (route) => {
    const row = rows.find((r) => r.route === route)!;
    for (const kind of PROVIDERS) {
      const provider = providers[kind];
      const actual = !provider.serves(route) ? '501' : provider.plan(route).translation ? 'translated' : 'proxied';
      expect({ route, provider: kind, does: row.providers[kind] }).toEqual({ route, provider: kind, does: actual });
    }
  });
});
