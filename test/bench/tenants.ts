import { Agent, request } from 'undici';
import { percentile } from './metrics.js';
import { startGateway, startMockProvider, type ChildHandle } from './processes.js';
import { countsText, table } from './report.js';
import { BENCH_MODEL } from './sdk-client.js';
import { fmtMs, type TargetCheck } from './targets.js';

/**
 * One gateway shared by two keys: a heavy tenant floods it (64 callers, back to back) or poisons it (prompts the
 * provider fails with 500), while a light tenant asks once every 100 ms. What the light tenant gets: its answer rate
 * and its waits, with the fair queue (the default) and without it (`--no-fair-queue`).
 *
 * The poisoning tenant also poses as many (with the fair queue only): one key spelt differently on every request
 * beside a random `x-api-key` the provider never reads (`rotating`), or a fresh key on every request, each a new
 * tenant for the provider too (`swarm`). The light tenant has been answered once before any run starts, as a caller
 * that was being served when the attack began.
 */

type Scenario = 'flood' | 'poison' | 'rotating' | 'swarm';

const RUNS: Array<{ scenario: Scenario; fairQueue: boolean }> = [
  { scenario: 'flood', fairQueue: true },
  { scenario: 'flood', fairQueue: false },
  { scenario: 'poison', fairQueue: true },
  { scenario: 'poison', fairQueue: false },
  { scenario: 'rotating', fairQueue: true },
  { scenario: 'swarm', fairQueue: true },
];

const SPELLINGS = ['Bearer %', 'bearer %', 'BEARER %', 'Bearer  %', 'bEaReR %', 'Bearer\t%'];

export interface TenantRow {
  scenario: Scenario;
  fairQueue: boolean;
  heavyRequests: number;
  heavyOk: number;
  lightRequests: number;
  lightOk: number;
  lightP50: number;
  lightP99: number;
  lightStatuses: Record<string, number>;
}

export interface TenantsResult {
  rows: TenantRow[];
  checks: TargetCheck[];
}

const RUN_MS = 8_000;
const PROVIDER_LATENCY_MS = 100;
const CONCURRENCY = 8;

export async function runTenants(log: (line: string) => void): Promise<TenantsResult> {
  const mock = await startMockProvider(PROVIDER_LATENCY_MS);
  const rows: TenantRow[] = [];
  try {
    for (const { scenario, fairQueue } of RUNS) {
      const gateway = await startGateway(mock.url, [
        '--concurrency',
        String(CONCURRENCY),
        ...(fairQueue ? [] : ['--no-fair-queue']),
      ]);
      try {
        const row = await measure(gateway, scenario, fairQueue);
        rows.push(row);
        log(
          `    ${scenario}, ${fairQueue ? 'fair queue' : 'first come, first served'}: light tenant ${row.lightOk}/${row.lightRequests} answered, ` +
            `p50 ${fmtMs(row.lightP50)}, p99 ${fmtMs(row.lightP99)}; heavy tenant ${row.heavyOk}/${row.heavyRequests}`,
        );
      } finally {
        await gateway.stop();
      }
    }
  } finally {
    await mock.stop();
  }
  const checks: TargetCheck[] = rows
    .filter((r) => r.fairQueue)
    .map((r) => {
      const share = r.lightOk / Math.max(1, r.lightRequests);
      return {
        scenario: 'tenants',
        run: `${r.scenario}, fair queue`,
        kind: 'count',
        name: 'light tenant answered',
        target: '>= 99%',
        actual: `${(share * 100).toFixed(1)}%`,
        pass: share >= 0.99,
        scaling: 'none',
      };
    });
  return { rows, checks };
}

async function measure(gateway: ChildHandle, scenario: TenantRow['scenario'], fairQueue: boolean): Promise<TenantRow> {
  const agent = new Agent({ connections: 96, pipelining: 1 });
  const tag = `${scenario}-${fairQueue}-${Date.now()}`;
  const send = async (credentials: string | Record<string, string>, content: string) => {
    const started = performance.now();
    try {
      const response = await request(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        dispatcher: agent,
        headers: {
          'content-type': 'application/json',
          ...(typeof credentials === 'string' ? { authorization: `Bearer ${credentials}` } : credentials),
        },
        body: JSON.stringify({ model: BENCH_MODEL, messages: [{ role: 'user', content }] }),
        headersTimeout: 60_000,
        bodyTimeout: 60_000,
      });
      await response.body.arrayBuffer();
      return { status: response.statusCode, ms: performance.now() - started };
    } catch {
      return { status: 0, ms: performance.now() - started };
    }
  };
  // Answered once before the heavy tenant starts: a caller the gateway was already serving.
  await send('sk-light-tenant', `light ${tag} warm-up`);
  const until = performance.now() + RUN_MS;
  let heavyRequests = 0;
  let heavyOk = 0;
  let n = 0;
  const heavy = async () => {
    while (performance.now() < until) {
      // A poisoning tenant sends what the provider fails on (its own fault, not the provider's).
      const i = n++;
      const content = scenario === 'flood' ? `flood ${tag} ${i}` : `mock:fail-500 ${tag} ${i}`;
      const { status } = await send(heavyCredentials(scenario, i), content);
      heavyRequests++;
      if (status === 200) heavyOk++;
    }
  };
  const light: Array<{ status: number; ms: number }> = [];
  const lightLoop = async () => {
    let i = 0;
    const pending: Promise<void>[] = [];
    while (performance.now() < until) {
      pending.push(send('sk-light-tenant', `light ${tag} ${i++}`).then((answer) => void light.push(answer)));
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await Promise.all(pending);
  };
  const heavyCallers = scenario === 'flood' ? 64 : 8;
  await Promise.all([...Array.from({ length: heavyCallers }, heavy), lightLoop()]);
  await agent.close();
  const waits = light.filter((a) => a.status === 200).map((a) => a.ms);
  const statuses: Record<string, number> = {};
  for (const a of light) statuses[String(a.status)] = (statuses[String(a.status)] ?? 0) + 1;
  return {
    scenario,
    fairQueue,
    heavyRequests,
    heavyOk,
    lightRequests: light.length,
    lightOk: waits.length,
    lightP50: percentile(waits, 50) ?? NaN,
    lightP99: percentile(waits, 99) ?? NaN,
    lightStatuses: statuses,
  };
}

/** Who the heavy tenant says it is on its i-th request. */
function heavyCredentials(scenario: Scenario, i: number): string | Record<string, string> {
  if (scenario === 'rotating') {
    return {
      authorization: SPELLINGS[i % SPELLINGS.length].replace('%', 'sk-heavy-tenant'),
      'x-api-key': `sk-junk-${i}-${Math.random().toString(36).slice(2)}`,
    };
  }
  if (scenario === 'swarm') return `sk-swarm-${i}-${Math.random().toString(36).slice(2)}`;
  return 'sk-heavy-tenant';
}

const HEAVY: Record<Scenario, string> = {
  flood: '64 callers back to back',
  poison: '8 callers, prompts the provider fails',
  rotating: '8 callers, failing prompts, one key spelt 6 ways + a random x-api-key each time',
  swarm: '8 callers, failing prompts, a new key on every request',
};

export function tenantsTable(result: TenantsResult): string {
  return table(
    [
      'heavy tenant',
      'queue',
      'light: answered',
      'light p50 wait',
      'light p99 wait',
      'light statuses',
      'heavy: answered',
    ],
    result.rows.map((r) => [
      HEAVY[r.scenario],
      r.fairQueue ? 'fair (default)' : 'first come, first served',
      `${r.lightOk}/${r.lightRequests}`,
      fmtMs(r.lightP50),
      fmtMs(r.lightP99),
      countsText(r.lightStatuses),
      `${r.heavyOk}/${r.heavyRequests}`,
    ]),
  );
}
