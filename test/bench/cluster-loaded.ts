import { spawn, type ChildProcess } from 'node:child_process';
import { Agent, request } from 'undici';
import { startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';
import { untilCoordinated } from '../support/gateway-process.js';
import { tally } from './cluster.js';
import { MockControl } from './mock-control.js';
import { startGateway, startMockProvider, type ChildHandle } from './processes.js';
import { countsText, table } from './report.js';
import { BENCH_API_KEY, BENCH_MODEL } from './sdk-client.js';
import { fmtMs, type TargetCheck } from './targets.js';

/**
 * The fleet's promises on a saturated machine: 4 replicas sharing one Redis,
 * default flags, while busy processes take every core. Herds round-robin over
 * the replicas; Redis frozen (SIGSTOP) under a herd on one replica and on
 * all four; a leader killed in the middle of a stream its followers on other
 * replicas are reading.
 */

export interface LoadedRow {
  what: string;
  requests: number;
  providerCalls: number;
  target: string;
  pass: boolean;
  outcomes: Record<string, number>;
  /** Slowest answer, ms (for the leader row: from the kill to the last follower's error event). */
  slowestMs: number;
  loadAverage: number;
}

export interface LoadedResult {
  burners: number;
  rows: LoadedRow[];
  checks: TargetCheck[];
}

const PROVIDER_LATENCY_MS = 300;
const LEASE_MS = 5_000; // the coordinator's default lease: a lost leader must be noticed within it

interface Answer {
  status: number;
  outcome: string;
  ms: number;
  endedAt: number;
  text: string;
}

const chatBody = (content: string, stream = false) =>
  JSON.stringify({ model: BENCH_MODEL, stream, messages: [{ role: 'user', content }] });

async function ask(agent: Agent, url: string, content: string, stream = false): Promise<Answer> {
  const started = performance.now();
  try {
    const response = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${BENCH_API_KEY}` },
      body: chatBody(content, stream),
      headersTimeout: 60_000,
      bodyTimeout: 60_000,
    });
    const text = await response.body.text();
    const endedAt = performance.now();
    return {
      status: response.statusCode,
      outcome: String(response.headers['x-orchestrator-dedup'] ?? '-'),
      ms: endedAt - started,
      endedAt,
      text,
    };
  } catch {
    return { status: 0, outcome: 'error', ms: performance.now() - started, endedAt: performance.now(), text: '' };
  }
}

/** Busy-looping processes that stop by themselves after `seconds` (and are stopped by PID when the run ends). */
function startBurners(count: number, seconds: number): ChildProcess[] {
  return Array.from({ length: count }, () =>
    spawn(process.execPath, ['-e', `const end = Date.now() + ${seconds * 1000}; while (Date.now() < end) {}`], {
      stdio: 'ignore',
    }),
  );
}

const loadAverage = async () => Number((await import('node:os')).loadavg()[0].toFixed(1));

export async function runClusterLoaded(log: (line: string) => void, burnerCount = 2): Promise<LoadedResult> {
  const mock = await startMockProvider(PROVIDER_LATENCY_MS);
  const control = new MockControl(mock.url);
  const redis: OwnedRedis = await startOwnedRedis();
  const agent = new Agent({ connections: 512, pipelining: 1 });
  let replicas: ChildHandle[] = [];
  const burners = startBurners(burnerCount, 600);
  const rows: LoadedRow[] = [];
  const row = async (
    what: string,
    answers: Answer[],
    target: string,
    pass: (calls: number) => boolean,
    calls: number,
    slowestMs?: number,
  ) => {
    const made: LoadedRow = {
      what,
      requests: answers.length,
      providerCalls: calls,
      target,
      pass: pass(calls) && answers.every((a) => a.status === 200 || what.startsWith('leader')),
      outcomes: tally(answers),
      slowestMs: slowestMs ?? Math.max(...answers.map((a) => a.ms)),
      loadAverage: await loadAverage(),
    };
    rows.push(made);
    log(
      `    ${what}: ${calls} provider calls (target ${target}), ${countsText(made.outcomes)}, slowest ${fmtMs(made.slowestMs)}, load ${made.loadAverage}${made.pass ? '' : '  << MISSED'}`,
    );
  };
  try {
    log(
      `  cluster --loaded: ${burnerCount} busy processes beside 4 replicas + Redis (${redis.url}), provider at ${PROVIDER_LATENCY_MS} ms`,
    );
    const prefix = `loaded-${Date.now()}`; // one fleet: one prefix
    replicas = await Promise.all(
      Array.from({ length: 4 }, () => startGateway(mock.url, ['--redis', redis.url, '--redis-prefix', prefix])),
    );
    await untilCoordinated(replicas, { timeoutMs: 20_000 });
    const urls = replicas.map((r) => r.url);

    for (let run = 1; run <= 3; run++) {
      await control.reset();
      const prompt = `loaded herd ${run} ${Date.now()}`;
      const answers = await Promise.all(Array.from({ length: 300 }, (_, i) => ask(agent, urls[i % 4], prompt)));
      await row(
        `herd of 300 over 4 replicas (#${run})`,
        answers,
        '1',
        (calls) => calls === 1,
        (await control.stats()).total,
      );
    }

    // Redis frozen: each replica on its own, and one call per replica at most.
    redis.freeze();
    try {
      await control.reset();
      const onePrompt = `frozen one ${Date.now()}`;
      const one = await Promise.all(Array.from({ length: 100 }, () => ask(agent, urls[0], onePrompt)));
      await row(
        'Redis frozen: herd of 100 on 1 replica',
        one,
        '1',
        (calls) => calls === 1,
        (await control.stats()).total,
      );
      await control.reset();
      const prompt = `frozen four ${Date.now()}`;
      const four = await Promise.all(Array.from({ length: 100 }, (_, i) => ask(agent, urls[i % 4], prompt)));
      await row(
        'Redis frozen: herd of 100 over 4 replicas',
        four,
        '<= 4',
        (calls) => calls <= 4,
        (await control.stats()).total,
      );
    } finally {
      redis.thaw();
    }
    await untilCoordinated(replicas, { timeoutMs: 20_000 });

    // A leader killed mid-stream: its followers on the other replicas get an error event within the lease time.
    await control.reset();
    await control.configure({ streamChunkDelayMs: 200 });
    const words = Array.from({ length: 60 }, (_, i) => `w${i}`).join(' ');
    const prompt = `leader dies ${Date.now()} ${words}`;
    const leader = ask(agent, urls[0], prompt, true);
    for (const deadline = Date.now() + 20_000; (await control.stats()).total < 1 && Date.now() < deadline;)
      await new Promise((r) => setTimeout(r, 20));
    const followers = Promise.all(
      [1, 2, 3].flatMap((r) => Array.from({ length: 10 }, () => ask(agent, urls[r], prompt, true))),
    );
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const killedAt = performance.now();
    process.kill(replicas[0].pid, 'SIGKILL');
    const answers = await followers;
    void leader;
    // Each follower ends with the leader's error event for a lost leader (promptly), or, if nothing had reached it yet,
    // with the whole answer of a takeover.
    const lost = answers.filter((a) => /leader_lost/.test(a.text));
    const whole = answers.filter((a) => !/leader_lost/.test(a.text) && /\[DONE\]/.test(a.text));
    const lostAfterMs = Math.max(0, ...lost.map((a) => a.endedAt - killedAt));
    await control.configure({ streamChunkDelayMs: 5 });
    await row(
      `leader killed mid-stream: 30 followers on 3 replicas (${lost.length} leader_lost, ${whole.length} taken over)`,
      answers,
      `every follower: leader_lost within ${LEASE_MS / 1000} s or the whole answer`,
      () => lost.length + whole.length === answers.length && lostAfterMs <= LEASE_MS + 1_000,
      (await control.stats()).total,
      lostAfterMs,
    );
    return {
      burners: burnerCount,
      rows,
      checks: rows.map((r) => ({
        scenario: 'cluster',
        run: 'loaded',
        kind: 'count',
        name: r.what,
        target: r.target,
        actual: String(r.providerCalls),
        pass: r.pass,
        scaling: 'none',
      })),
    };
  } finally {
    for (const burner of burners) burner.kill('SIGKILL');
    await Promise.all(replicas.map((r) => r.stop().catch(() => undefined)));
    await agent.close();
    await redis.close();
    await mock.stop();
  }
}

export function clusterLoadedTable(result: LoadedResult): string {
  return table(
    [
      'what (busy processes beside: ' + result.burners + ')',
      'requests',
      'provider calls',
      'target',
      'outcomes',
      'slowest',
      'load avg',
      'pass',
    ],
    result.rows.map((r) => [
      r.what,
      String(r.requests),
      String(r.providerCalls),
      r.target,
      countsText(r.outcomes),
      fmtMs(r.slowestMs),
      String(r.loadAverage),
      r.pass ? 'yes' : 'NO',
    ]),
  );
}
