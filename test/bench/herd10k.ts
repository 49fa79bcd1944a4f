import { readFileSync } from 'node:fs';
import { Pool, request } from 'undici';
import { startGateway, startMockProvider, type ChildHandle } from './processes.js';
import type { TargetCheck } from './targets.js';

/**
 * `npm run bench -- herd10k`: 10,000 identical requests at once, each on a connection of its own opened with it (no
 * connection opened beforehand, as a herd of fresh clients arrives), to the gateway at its default flags and, in
 * the same round, straight to the mock provider (`direct`). Per round: how many connections failed to open, how many
 * were reset, whether every caller got the same answer, how many calls reached the provider, and the slowest answer
 * of each. Targets: every connection opens, one provider call, every answer identical, slowest within
 * HERD10K_EXTRA_LIMIT_MS of direct's.
 *
 * Needs about two file descriptors per request between this process and the gateway (it checks `ulimit -n`), and
 * as many local ports (the loopback range is checked too).
 */

export const HERD10K_REQUESTS = 10_000;
/** The provider's latency: long enough that the whole herd arrives while its one call is in flight. */
const LATENCY_MS = 300;
export const HERD10K_EXTRA_LIMIT_MS = 300;
const MODEL = 'bench-model';

export interface HerdCount {
  /** Connections that never opened (refused, or not accepted within undici's connect timeout). */
  failedToOpen: number;
  /** Connections reset or closed before their answer. */
  resets: number;
  /** Other failures: a status other than 200, a timeout. */
  otherFailures: number;
  /** Answers with a body other than the first one's. */
  differing: number;
  answered: number;
  slowestMs: number;
  /** The first failure's message, for the report. */
  firstError?: string;
}

export interface Herd10kRound {
  round: number;
  direct: HerdCount;
  gateway: HerdCount;
  /** Calls the provider received for the gateway's herd. */
  providerCalls: number;
}

export interface Herd10kResult {
  requests: number;
  rounds: Herd10kRound[];
  checks: TargetCheck[];
}

/** The soft limit on open files of this process (what its sockets and the gateway's, which inherits it, may use). */
export function openFilesLimit(): number {
  const line = readFileSync('/proc/self/limits', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('Max open files'));
  const soft = line?.split(/\s{2,}/)[1];
  return soft === undefined || soft === 'unlimited' ? Number.POSITIVE_INFINITY : Number(soft);
}

function localPorts(): number {
  try {
    const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    return high - low + 1;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}

const CONNECT_CODES = new Set(['ECONNREFUSED', 'UND_ERR_CONNECT_TIMEOUT', 'ETIMEDOUT', 'EADDRNOTAVAIL', 'EMFILE']);
const RESET_CODES = new Set(['ECONNRESET', 'UND_ERR_SOCKET', 'EPIPE']);

/** `count` identical requests at once, each on a new connection, to `url`: what came back. */
export async function herd(url: string, count: number, body: string): Promise<HerdCount> {
  const pool = new Pool(url, { connections: count, pipelining: 1, connectTimeout: 10_000 });
  const result: HerdCount = { failedToOpen: 0, resets: 0, otherFailures: 0, differing: 0, answered: 0, slowestMs: 0 };
  let first: string | undefined;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: count }, async () => {
      try {
        const res = await pool.request({
          path: '/v1/chat/completions',
          method: 'POST',
          headers: { 'content-type': 'application/json', host: 'localhost' },
          body,
          headersTimeout: 60_000,
          bodyTimeout: 60_000,
        });
        const text = await res.body.text();
        result.slowestMs = Math.max(result.slowestMs, performance.now() - t0);
        if (res.statusCode !== 200) {
          result.otherFailures++;
          result.firstError ??= `status ${res.statusCode}: ${text.slice(0, 200)}`;
          return;
        }
        result.answered++;
        // The id and the content are the provider's; the gateway's headers (request id, timing) are not compared.
        first ??= text;
        if (text !== first) result.differing++;
      } catch (error) {
        const code = (error as { code?: string }).code ?? '';
        if (CONNECT_CODES.has(code)) result.failedToOpen++;
        else if (RESET_CODES.has(code)) result.resets++;
        else result.otherFailures++;
        result.firstError ??= `${code} ${(error as Error).message}`;
      }
    }),
  );
  await pool.destroy();
  return result;
}

async function providerCalls(mockUrl: string): Promise<number> {
  const res = await request(`${mockUrl}/__mock/stats`);
  return ((await res.body.json()) as { total: number }).total;
}

export async function runHerd10k(options: {
  rounds: number;
  requests?: number;
  log: (line: string) => void;
}): Promise<Herd10kResult> {
  const count = options.requests ?? HERD10K_REQUESTS;
  // This process holds one socket per request, the gateway one per request and one to the provider.
  const needed = count + 512;
  if (openFilesLimit() < needed)
    throw new Error(
      `herd10k needs ulimit -n of at least ${needed} (now ${openFilesLimit()}): raise it in the shell that runs the bench`,
    );
  // Each round opens `count` connections to each of the two ports; closed ones wait in TIME_WAIT on the client's side.
  if (localPorts() < count)
    throw new Error(`herd10k needs ${count} local ports; ip_local_port_range has ${localPorts()}`);
  const children: ChildHandle[] = [];
  try {
    const mock = await startMockProvider(LATENCY_MS);
    children.push(mock);
    // The gateway at its default flags.
    const gateway = await startGateway(mock.url, []);
    children.push(gateway);
    const run = `${process.pid}-${Date.now()}`;
    const rounds: Herd10kRound[] = [];
    for (let round = 1; round <= options.rounds; round++) {
      const bodyOf = (what: string) =>
        JSON.stringify({
          model: MODEL,
          messages: [{ role: 'user', content: `herd10k ${run} round ${round} ${what}` }],
        });
      const direct = await herd(mock.url, count, bodyOf('direct'));
      const before = await providerCalls(mock.url);
      const through = await herd(gateway.url, count, bodyOf('gateway'));
      const calls = (await providerCalls(mock.url)) - before;
      rounds.push({ round, direct, gateway: through, providerCalls: calls });
      options.log(
        `  round ${round}: direct slowest ${direct.slowestMs.toFixed(0)} ms (${direct.failedToOpen} not opened, ${direct.resets} reset); ` +
          `gateway slowest ${through.slowestMs.toFixed(0)} ms (+${(through.slowestMs - direct.slowestMs).toFixed(0)}), ${through.answered} answered, ` +
          `${through.failedToOpen} not opened, ${through.resets} reset, ${through.otherFailures} other, ${through.differing} differing, ${calls} provider call(s)` +
          (through.firstError ? `; first error: ${through.firstError}` : ''),
      );
    }
    return { requests: count, rounds, checks: checksOf(rounds, count) };
  } finally {
    for (const child of children.reverse()) await child.stop();
  }
}

function checksOf(rounds: Herd10kRound[], count: number): TargetCheck[] {
  const checks: TargetCheck[] = [];
  const check = (run: string, kind: TargetCheck['kind'], name: string, target: string, actual: string, pass: boolean) =>
    checks.push({ scenario: 'herd10k', run, kind, name, target, actual, pass, scaling: 'none' });
  for (const r of rounds) {
    const run = `herd of ${count}, round ${r.round}`;
    const g = r.gateway;
    check(run, 'count', 'connections that failed to open', '0', String(g.failedToOpen), g.failedToOpen === 0);
    check(run, 'count', 'connections reset', '0', String(g.resets), g.resets === 0);
    check(
      run,
      'count',
      'answered identically',
      String(count),
      String(g.answered - g.differing),
      g.answered === count && g.differing === 0,
    );
    check(run, 'count', 'provider calls', '1', String(r.providerCalls), r.providerCalls === 1);
    const extra = g.slowestMs - r.direct.slowestMs;
    const actual = `${extra >= 0 ? '+' : ''}${extra.toFixed(0)} ms (${g.slowestMs.toFixed(0)} vs ${r.direct.slowestMs.toFixed(0)})`;
    check(
      run,
      'timing',
      'slowest answer over direct',
      `<= +${HERD10K_EXTRA_LIMIT_MS} ms`,
      actual,
      extra <= HERD10K_EXTRA_LIMIT_MS,
    );
  }
  return checks;
}

export function herd10kTable(result: Herd10kResult): string {
  const lines = [
    '| round | direct slowest | gateway slowest | not opened | reset | answered | provider calls |',
    '| --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const r of result.rounds) {
    const g = r.gateway;
    lines.push(
      `| ${r.round} | ${r.direct.slowestMs.toFixed(0)} ms | ${g.slowestMs.toFixed(0)} ms | ${g.failedToOpen} | ${g.resets} | ${g.answered - g.differing} | ${r.providerCalls} |`,
    );
  }
  return lines.join('\n');
}
