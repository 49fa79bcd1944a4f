import autocannon from 'autocannon';
import { Agent, request } from 'undici';
import { startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';
import { untilCoordinated } from '../support/gateway-process.js';
import { MockControl } from './mock-control.js';
import { percentile } from './metrics.js';
import { startGateway, startMockProvider, type ChildHandle } from './processes.js';
import { countsText, table } from './report.js';
import { BENCH_API_KEY, BENCH_MODEL } from './sdk-client.js';
import { fmtMs, type TargetCheck } from './targets.js';

/**
 * Replicas as separate gateway processes in front of one mock provider, with
 * and without a shared Redis: what a herd, distinct prompts and an outage cost
 * the provider over 1, 2 and 4 replicas; the latency Redis adds to a miss and
 * to a join; and throughput with `--workers` on this machine.
 */

export interface FleetRow {
  scenario: 'herd' | 'distinct' | 'outage';
  replicas: number;
  redis: boolean;
  requests: number;
  providerCalls: number;
  outcomes: Record<string, number>;
  waitP50: number;
  waitP99: number;
  /** outage: ms from the provider's recovery until every replica answered 200 again. */
  recoveryMs?: number;
}

export interface RedisCostRow {
  what: 'miss' | 'join';
  /** p50 / p99 without Redis (miss: one replica alone; join: two callers on one replica). */
  aloneP50: number;
  aloneP99: number;
  /** p50 / p99 with Redis (join: the follower on another replica). */
  redisP50: number;
  redisP99: number;
  samples: number;
}

export interface WorkersRow {
  workers: number;
  redis: boolean;
  requestsPerSec: number;
  latencyP50: number;
  latencyP99: number;
  failed: number;
}

export interface ClusterResult {
  fleet: FleetRow[];
  redisCost: RedisCostRow[];
  workers: WorkersRow[];
  checks: TargetCheck[];
}

const HERD = 200;
const PROVIDER_LATENCY_MS = 300;

interface Answer {
  status: number;
  outcome: string;
  ms: number;
  endedAt: number;
}

const chatBody = (content: string) => JSON.stringify({ model: BENCH_MODEL, messages: [{ role: 'user', content }] });

function ask(agent: Agent, url: string, content: string): Promise<Answer> {
  const started = performance.now();
  return request(`${url}/v1/chat/completions`, {
    method: 'POST',
    dispatcher: agent,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${BENCH_API_KEY}` },
    body: chatBody(content),
    headersTimeout: 30_000,
    bodyTimeout: 30_000,
  }).then(
    async (response) => {
      await response.body.arrayBuffer();
      const endedAt = performance.now();
      return {
        status: response.statusCode,
        outcome: String(response.headers['x-orchestrator-dedup'] ?? '-'),
        ms: endedAt - started,
        endedAt,
      };
    },
    () => ({ status: 0, outcome: 'error', ms: performance.now() - started, endedAt: performance.now() }),
  );
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Answers counted by how they were answered (`miss`, `joined`, `cached`), or by status when not 200. */
export function tally(answers: ReadonlyArray<{ status: number; outcome: string }>): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const answer of answers) {
    const key = answer.status === 200 ? answer.outcome : String(answer.status);
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

interface Fleet {
  urls: string[];
  stop(): Promise<void>;
}

async function startFleet(
  upstream: string,
  count: number,
  redisUrl: string | undefined,
  prefix: string,
  extra: string[] = [],
): Promise<Fleet> {
  const flags = [...(redisUrl ? ['--redis', redisUrl, '--redis-prefix', prefix] : []), ...extra];
  const replicas: ChildHandle[] = await Promise.all(Array.from({ length: count }, () => startGateway(upstream, flags)));
  if (redisUrl) {
    // Traffic starts once every replica has reached Redis.
    await untilCoordinated(replicas);
  }
  return {
    urls: replicas.map((r) => r.url),
    stop: async () => void (await Promise.all(replicas.map((r) => r.stop()))),
  };
}

/** Every answer of a round-robin burst over the fleet, all sent at once. */
async function burst(agent: Agent, fleet: Fleet, prompts: (i: number) => string): Promise<Answer[]> {
  return Promise.all(Array.from({ length: HERD }, (_, i) => ask(agent, fleet.urls[i % fleet.urls.length], prompts(i))));
}

async function fleetRows(mock: ChildHandle, redis: OwnedRedis, log: (line: string) => void): Promise<FleetRow[]> {
  const control = new MockControl(mock.url);
  const agent = new Agent({ connections: 256, pipelining: 1 });
  const rows: FleetRow[] = [];
  let run = 0;
  try {
    for (const replicas of [1, 2, 4]) {
      for (const withRedis of replicas === 1 ? [false] : [false, true]) {
        const fleet = await startFleet(mock.url, replicas, withRedis ? redis.url : undefined, `bench${++run}`, [
          '--probe-interval',
          '0.5',
        ]);
        try {
          for (const scenario of ['herd', 'distinct'] as const) {
            await control.configure({ latencyMs: PROVIDER_LATENCY_MS });
            await control.reset();
            const tag = `${scenario}-${run}-${Date.now()}`;
            const answers = await burst(agent, fleet, (i) =>
              scenario === 'herd' ? `fleet ${tag}` : `fleet ${tag} #${i}`,
            );
            const waits = answers.map((a) => a.ms);
            const row: FleetRow = {
              scenario,
              replicas,
              redis: withRedis,
              requests: answers.length,
              providerCalls: (await control.stats()).total,
              outcomes: tally(answers),
              waitP50: percentile(waits, 50) ?? NaN,
              waitP99: percentile(waits, 99) ?? NaN,
            };
            rows.push(row);
            log(
              `    ${scenario} x${replicas}${withRedis ? ' + Redis' : ''}: ${row.providerCalls} provider calls, p50 ${fmtMs(row.waitP50)}, p99 ${fmtMs(row.waitP99)}`,
            );
          }
          rows.push(await outage(agent, control, fleet, replicas, withRedis, log));
        } finally {
          await fleet.stop();
        }
      }
    }
  } finally {
    await agent.close();
  }
  return rows;
}

/**
 * The provider answers 503 for 3 s while each replica is asked every 50 ms;
 * then it recovers, and the clock runs until every replica answers 200.
 */
async function outage(
  agent: Agent,
  control: MockControl,
  fleet: Fleet,
  replicas: number,
  withRedis: boolean,
  log: (line: string) => void,
): Promise<FleetRow> {
  await control.configure({ latencyMs: 20 });
  await control.reset();
  await control.setMode('error503');
  const answers: Answer[] = [];
  let n = 0;
  const until = performance.now() + 3_000;
  await Promise.all(
    fleet.urls.map(async (url) => {
      while (performance.now() < until) {
        answers.push(await ask(agent, url, `outage ${n++}`));
        await sleep(50);
      }
    }),
  );
  const calls = (await control.stats()).byRoute['/v1/chat/completions'] ?? 0;
  await control.setMode('ok');
  const recovered = performance.now();
  await Promise.all(
    fleet.urls.map(async (url) => {
      for (const deadline = recovered + 15_000; performance.now() < deadline;) {
        if ((await ask(agent, url, `recovery ${n++}`)).status === 200) return;
        await sleep(20);
      }
    }),
  );
  const waits = answers.map((a) => a.ms);
  const row: FleetRow = {
    scenario: 'outage',
    replicas,
    redis: withRedis,
    requests: answers.length,
    providerCalls: calls,
    outcomes: tally(answers),
    waitP50: percentile(waits, 50) ?? NaN,
    waitP99: percentile(waits, 99) ?? NaN,
    recoveryMs: performance.now() - recovered,
  };
  log(
    `    outage x${replicas}${withRedis ? ' + Redis' : ''}: ${calls} calls reached the failing provider of ${answers.length} requests; all replicas back in ${fmtMs(row.recoveryMs)}`,
  );
  return row;
}

/**
 * What Redis adds: to a miss (sequential distinct requests to one replica, provider latency 0), and to a join
 * (the same prompt sent to two replicas 5 ms apart: how long after the leader's caller the follower's caller has
 * its answer; without Redis, two callers of one replica).
 */
async function redisCost(mock: ChildHandle, redis: OwnedRedis, log: (line: string) => void): Promise<RedisCostRow[]> {
  const control = new MockControl(mock.url);
  const agent = new Agent({ connections: 8, pipelining: 1 });
  const SAMPLES = 200;
  const JOINS = 60;
  const alone = await startFleet(mock.url, 2, undefined, 'unused');
  const shared = await startFleet(mock.url, 2, redis.url, 'benchcost');
  try {
    await control.configure({ latencyMs: 0 });
    const missWaits = async (url: string, tag: string) => {
      const waits: number[] = [];
      for (let i = 0; i < 30; i++) await ask(agent, url, `warm ${tag} ${i}`);
      for (let i = 0; i < SAMPLES; i++) waits.push((await ask(agent, url, `miss ${tag} ${i} ${Date.now()}`)).ms);
      return waits;
    };
    const missAlone = await missWaits(alone.urls[0], 'alone');
    const missShared = await missWaits(shared.urls[0], 'shared');

    await control.configure({ latencyMs: 50 });
    const joinDelays = async (first: string, second: string, tag: string) => {
      const delays: number[] = [];
      for (let i = 0; i < JOINS; i++) {
        const prompt = `join ${tag} ${i} ${Date.now()}`;
        const leader = ask(agent, first, prompt);
        await sleep(5);
        const follower = ask(agent, second, prompt);
        const [a, b] = await Promise.all([leader, follower]);
        if (a.outcome === 'miss' && b.outcome === 'joined') delays.push(Math.max(0, b.endedAt - a.endedAt));
      }
      return delays;
    };
    const joinAlone = await joinDelays(alone.urls[0], alone.urls[0], 'alone');
    const joinShared = await joinDelays(shared.urls[0], shared.urls[1], 'shared');
    const row = (what: RedisCostRow['what'], a: number[], b: number[]): RedisCostRow => ({
      what,
      aloneP50: percentile(a, 50) ?? NaN,
      aloneP99: percentile(a, 99) ?? NaN,
      redisP50: percentile(b, 50) ?? NaN,
      redisP99: percentile(b, 99) ?? NaN,
      samples: Math.min(a.length, b.length),
    });
    const rows = [row('miss', missAlone, missShared), row('join', joinAlone, joinShared)];
    for (const r of rows) {
      log(
        `    ${r.what}: alone p50 ${r.aloneP50.toFixed(2)} ms, with Redis p50 ${r.redisP50.toFixed(2)} ms (+${(r.redisP50 - r.aloneP50).toFixed(2)} ms), ${r.samples} samples`,
      );
    }
    return rows;
  } finally {
    await alone.stop();
    await shared.stop();
    await agent.close();
  }
}

/** Small distinct requests (provider latency 0) for 5 s at 64 connections through `--workers N`. */
async function workersRows(mock: ChildHandle, redis: OwnedRedis, log: (line: string) => void): Promise<WorkersRow[]> {
  const control = new MockControl(mock.url);
  await control.configure({ latencyMs: 0 });
  const rows: WorkersRow[] = [];
  let counter = 0;
  for (const [workers, withRedis] of [
    [1, false],
    [2, false],
    [4, false],
    [2, true],
  ] as const) {
    const gateway = await startGateway(mock.url, [
      '--workers',
      String(workers),
      ...(withRedis ? ['--redis', redis.url, '--redis-prefix', 'benchworkers'] : []),
    ]);
    try {
      const run = () =>
        autocannon({
          url: gateway.url,
          connections: 64,
          duration: 5,
          timeout: 10,
          requests: [
            {
              method: 'POST',
              path: '/v1/chat/completions',
              headers: { 'content-type': 'application/json', authorization: `Bearer ${BENCH_API_KEY}` },
              setupRequest: (req) => {
                req.body = chatBody(`workers prompt #${++counter}`);
                return req;
              },
            },
          ],
        });
      await autocannon({
        url: gateway.url,
        connections: 16,
        duration: 1,
        requests: [{ method: 'GET', path: '/health' }],
      });
      const result = await run();
      const row: WorkersRow = {
        workers,
        redis: withRedis,
        requestsPerSec: result['2xx'] / result.duration,
        latencyP50: result.latency.p50,
        latencyP99: result.latency.p99,
        failed: result.non2xx + result.errors + result.timeouts,
      };
      rows.push(row);
      log(
        `    --workers ${workers}${withRedis ? ' + Redis' : ''}: ${Math.round(row.requestsPerSec)} req/s, p50 ${row.latencyP50} ms, p99 ${row.latencyP99} ms`,
      );
    } finally {
      await gateway.stop();
    }
  }
  return rows;
}

export async function runCluster(log: (line: string) => void): Promise<ClusterResult> {
  const mock = await startMockProvider(PROVIDER_LATENCY_MS);
  const redis = await startOwnedRedis();
  try {
    log(`  cluster: provider ${mock.url}, Redis ${redis.url} (this run's own)`);
    log('  fleets (200 requests round-robin over the replicas, all at once):');
    const fleet = await fleetRows(mock, redis, log);
    log('  what Redis adds:');
    const cost = await redisCost(mock, redis, log);
    log('  --workers (one port, node:cluster):');
    const workers = await workersRows(mock, redis, log);
    return { fleet, redisCost: cost, workers, checks: clusterChecks(fleet, cost) };
  } finally {
    await redis.close();
    await mock.stop();
  }
}

function clusterChecks(fleet: FleetRow[], cost: RedisCostRow[]): TargetCheck[] {
  const checks: TargetCheck[] = [];
  const check = (
    run: string,
    kind: TargetCheck['kind'],
    name: string,
    target: string,
    actual: string,
    pass: boolean,
  ): void => {
    checks.push({ scenario: 'cluster', run, kind, name, target, actual, pass, scaling: 'none' });
  };
  const one = fleet.find((r) => r.scenario === 'outage' && r.replicas === 1);
  for (const row of fleet.filter((r) => r.redis)) {
    const run = `${row.replicas} replicas + Redis`;
    if (row.scenario === 'herd')
      check(run, 'count', 'herd: provider calls', '1', String(row.providerCalls), row.providerCalls === 1);
    if (row.scenario === 'outage' && one) {
      check(
        run,
        'count',
        'outage: calls into the failing provider',
        `<= ${one.providerCalls + 2} (1 replica: ${one.providerCalls})`,
        String(row.providerCalls),
        row.providerCalls <= one.providerCalls + 2,
      );
      check(
        run,
        'timing',
        'outage: every replica answering again',
        '<= 1 s',
        fmtMs(row.recoveryMs),
        (row.recoveryMs ?? Infinity) <= 1_000,
      );
    }
  }
  for (const row of cost) {
    const added = row.redisP50 - row.aloneP50;
    check(
      '2 replicas + Redis',
      'timing',
      `latency Redis adds to a ${row.what} (p50)`,
      '< 2 ms',
      `${added.toFixed(2)} ms`,
      added < 2,
    );
  }
  return checks;
}

export function clusterTable(result: ClusterResult): string {
  const fleet = table(
    ['scenario', 'replicas', 'Redis', 'requests', 'provider calls', 'outcomes', 'p50 wait', 'p99 wait', 'recovery'],
    result.fleet.map((r) => [
      r.scenario,
      String(r.replicas),
      r.redis ? 'yes' : 'no',
      String(r.requests),
      String(r.providerCalls),
      countsText(r.outcomes),
      fmtMs(r.waitP50),
      fmtMs(r.waitP99),
      r.recoveryMs === undefined ? '' : fmtMs(r.recoveryMs),
    ]),
  );
  const cost = table(
    ['added to a', 'alone p50', 'alone p99', 'with Redis p50', 'with Redis p99', 'Redis adds (p50)', 'samples'],
    result.redisCost.map((r) => [
      r.what,
      `${r.aloneP50.toFixed(2)} ms`,
      `${r.aloneP99.toFixed(2)} ms`,
      `${r.redisP50.toFixed(2)} ms`,
      `${r.redisP99.toFixed(2)} ms`,
      `${(r.redisP50 - r.aloneP50).toFixed(2)} ms`,
      String(r.samples),
    ]),
  );
  const workers = table(
    ['--workers', 'Redis', 'req/s', 'p50', 'p99', 'failed'],
    result.workers.map((r) => [
      String(r.workers),
      r.redis ? 'yes' : 'no',
      String(Math.round(r.requestsPerSec)),
      `${r.latencyP50} ms`,
      `${r.latencyP99} ms`,
      String(r.failed),
    ]),
  );
  return `${fleet}\n\n${cost}\n\n${workers}`;
}
