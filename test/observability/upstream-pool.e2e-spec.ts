import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { ensureBuilt, startGatewayProcess, type GatewayProcess } from '../support/gateway-process.js';
import { startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';

/**
 * What an operator sees of a pool of two upstreams, both failing: the port's
 * breaker, the process's row in the fleet, the request lines and the status
 * page's upstream cards speak of the pool's members (`upstream@host:port`),
 * not of a breaker named `upstream` that a pool does not have.
 */

interface Health {
  upstream: { state: string; breaker: string };
  fleet: Array<{ self: boolean; breaker: string }>;
}
interface Snapshot {
  upstreams: Array<{
    name: string;
    breaker?: { state: string };
    member?: { health: string; available: boolean; limitMode: string | null };
  }>;
}

async function waitFor<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string): Promise<T> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('a pool of two failing upstreams, as /health, the fleet, the request lines and the status page show it', () => {
  let redis: OwnedRedis;
  let providers: MockProvider[];
  let gateway: GatewayProcess;

  beforeAll(async () => {
    await ensureBuilt();
    redis = await startOwnedRedis();
    providers = await Promise.all([startMockProvider({ latencyMs: 5 }), startMockProvider({ latencyMs: 5 })]);
    for (const p of providers) p.setMode('error503');
    gateway = await startGatewayProcess([
      ...providers.flatMap((p) => ['--upstream', p.url]),
      ...[
        '--redis',
        redis.url,
        '--redis-prefix',
        'pool-view',
        '--breaker-failures',
        '2',
        '--retries',
        '0',
        '--breaker-open',
        '60',
      ],
    ]);
  }, 180_000);

  afterAll(async () => {
    gateway?.kill();
    await gateway?.exited;
    await Promise.all((providers ?? []).map((p) => p.close()));
    await redis?.close();
  });

  it('says the pool is open once every member is', async () => {
    const ask = () =>
      fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer sk-pool' },
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: `pool ${Math.random()}` }] }),
      });
    const health = () => fetch(`${gateway.url}/health`).then((r) => r.json() as Promise<Health>);
    for (let i = 0; i < 8 && (await health()).upstream.breaker !== 'open'; i++) expect((await ask()).status).toBe(503);
    const open = await health();
    expect(open.upstream).toMatchObject({ state: 'unavailable', breaker: 'open' });
    // The fleet row is written by the heartbeat, once a second.
    await waitFor(health, (h) => h.fleet.find((m) => m.self)?.breaker === 'open', "the fleet row's breaker");

    const snapshot = (await (await fetch(`${gateway.url}/orchestrator/snapshot`)).json()) as Snapshot;
    const members = snapshot.upstreams.filter((u) => u.name.startsWith('upstream@'));
    expect(members).toHaveLength(2);
    for (const member of members) {
      expect(member.breaker?.state).toBe('open');
      expect(member.member).toMatchObject({ health: 'up', available: false, limitMode: 'adaptive' });
    }

    // A request line names the breaker of the member its call went to (lines reach stdout in batches: wait for them).
    const failedLines = async () =>
      gateway
        .output()
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as { msg?: string; error?: string; breaker?: string | null })
        .filter((l) => l.msg === 'request' && l.error === 'upstream_error');
    const failed = await waitFor(failedLines, (lines) => lines.length > 0, "the failed requests' lines");
    for (const line of failed) expect(['closed', 'open', 'half_open']).toContain(line.breaker);
  }, 60_000);
});
