import { join } from 'node:path';
import { Agent, request } from 'undici';
import { startOwnedRedis } from '../support/redis-server.js';
import { MockControl, type MockMode } from './mock-control.js';
import { ENTRY, repoRoot, startGateway, startMockProvider } from './processes.js';
import { countsText, table } from './report.js';
import { BENCH_API_KEY, BENCH_MODEL } from './sdk-client.js';
import type { TargetCheck } from './targets.js';

/**
 * Mixed traffic through one gateway (with --redis, against a Redis this run owns) for a bounded time while faults
 * are injected on a schedule: Redis frozen, killed and restarted; the provider failing with 503s and cutting its
 * streams; eight 9 MB bodies at once. Every second: the gateway's RSS and event-loop delay (measured inside it by
 * a preloaded monitor), and the answers by kind.
 */

export interface SoakOptions {
  durationSec: number;
  log: (line: string) => void;
}

type Kind = 'repeat' | 'distinct' | 'stream' | 'embeddings' | 'large' | 'malformed' | 'oversized';

interface Fault {
  /** Start and end, as fractions of the run. */
  from: number;
  to: number;
  name: string;
  start(): Promise<void> | void;
  stop(): Promise<void> | void;
}

export interface SoakSecond {
  t: number;
  phase: string;
  answered: number;
  byStatus: Record<string, number>;
  rssMiB: number;
  loopP99Ms: number;
  loopMaxMs: number;
}

export interface SoakResult {
  durationSec: number;
  requests: number;
  byKindStatus: Record<string, Record<string, number>>;
  /** Requests that got no HTTP answer at all (reset, refused, timed out). */
  transportErrors: number;
  seconds: SoakSecond[];
  phases: Array<{
    phase: string;
    requests: number;
    ok: number;
    loopP99Ms: number;
    loopMaxMs: number;
    rssMaxMiB: number;
  }>;
  checks: TargetCheck[];
}

const CLIENTS = 16;
const MIB = 1_048_576;

export async function runSoak(options: SoakOptions): Promise<SoakResult> {
  const { log } = options;
  const durationMs = options.durationSec * 1000;
  const redis = await startOwnedRedis();
  const mock = await startMockProvider(20);
  const control = new MockControl(mock.url);
  const gateway = await startGateway(
    mock.url,
    [
      '--redis',
      redis.url,
      '--redis-prefix',
      'soak',
      '--dedup-window',
      '30',
      '--probe-interval',
      '0.5',
      '--breaker-open',
      '5',
    ],
    ['--import', join(repoRoot(), ENTRY.loopDelay)],
  );
  const agent = new Agent({ connections: CLIENTS + 16, pipelining: 1, headersTimeout: 30_000, bodyTimeout: 30_000 });
  const setMode = (mode: MockMode) => control.setMode(mode).then(() => undefined);
  const faults: Fault[] = [
    { from: 0.15, to: 0.25, name: 'Redis frozen', start: () => redis.freeze(), stop: () => redis.thaw() },
    { from: 0.3, to: 0.4, name: 'Redis killed', start: () => redis.kill(), stop: () => redis.restart() },
    { from: 0.45, to: 0.55, name: 'provider 503', start: () => setMode('error503'), stop: () => setMode('ok') },
    { from: 0.6, to: 0.68, name: 'streams cut', start: () => setMode('truncStream'), stop: () => setMode('ok') },
    { from: 0.75, to: 0.8, name: '8 x 9 MB bodies', start: () => void bigBodies(), stop: () => undefined },
  ];
  const phaseAt = (fraction: number) => faults.find((f) => fraction >= f.from && fraction < f.to)?.name ?? 'normal';
  // The provider's own faults, and the second after them the breaker's probe takes to see it back.
  const providerFaults = faults.filter((f) => f.name === 'provider 503' || f.name === 'streams cut');
  const providerFaulty = (fraction: number) =>
    providerFaults.some((f) => fraction >= f.from && fraction < f.to + 2_000 / durationMs);

  const byKindStatus: Record<string, Record<string, number>> = {};
  let transportErrors = 0;
  let requests = 0;
  let secondCounts: Record<string, number> = {};
  const phaseOf: Array<{ phase: string; status: number; providerFault: boolean }> = [];
  const started = performance.now();
  const fraction = () => (performance.now() - started) / durationMs;

  const headers = { 'content-type': 'application/json', authorization: `Bearer ${BENCH_API_KEY}` };
  const send = async (kind: Kind, path: string, body: string | Buffer): Promise<void> => {
    const phase = phaseAt(fraction());
    const providerFault = providerFaulty(fraction());
    let status = 0;
    try {
      const response = await request(`${gateway.url}${path}`, { method: 'POST', dispatcher: agent, headers, body });
      await response.body.arrayBuffer();
      status = response.statusCode;
    } catch {
      transportErrors++;
    }
    requests++;
    const key = status === 0 ? 'no answer' : String(status);
    (byKindStatus[kind] ??= {})[key] = (byKindStatus[kind][key] ?? 0) + 1;
    secondCounts[key] = (secondCounts[key] ?? 0) + 1;
    phaseOf.push({ phase, status, providerFault: providerFault || providerFaulty(fraction()) });
  };
  const chat = (content: string, stream = false) =>
    JSON.stringify({ model: BENCH_MODEL, stream, messages: [{ role: 'user', content }] });
  const longConversation = (n: number) =>
    JSON.stringify({
      model: BENCH_MODEL,
      messages: Array.from({ length: n }, (_, i) => ({
        role: i % 2 ? 'assistant' : 'user',
        content: `turn ${i} `.repeat(40),
      })),
    });
  const big = Buffer.from(
    JSON.stringify({ model: BENCH_MODEL, messages: [{ role: 'user', content: 'x'.repeat(9 * MIB) }] }),
  );
  const oversized = Buffer.alloc(11 * MIB, 'a');
  async function bigBodies(): Promise<void> {
    await Promise.all(Array.from({ length: 8 }, () => send('large', '/v1/chat/completions', big)));
  }

  let n = 0;
  const client = async (id: number) => {
    while (performance.now() - started < durationMs) {
      const roll = (n++ * 7919 + id * 104_729) % 100;
      if (roll < 35) await send('repeat', '/v1/chat/completions', chat(`soak repeat ${roll % 12}`));
      else if (roll < 65) await send('distinct', '/v1/chat/completions', chat(`soak distinct ${id} ${n}`));
      else if (roll < 80) await send('stream', '/v1/chat/completions', chat(`soak stream ${id} ${n % 40}`, true));
      else if (roll < 90)
        await send(
          'embeddings',
          '/v1/embeddings',
          JSON.stringify({ model: 'mock-embed', input: [`soak ${n}`, `soak ${n + 1}`] }),
        );
      else if (roll < 95) await send('large', '/v1/chat/completions', longConversation(500));
      else if (roll < 98) await send('malformed', '/v1/chat/completions', '{"model": "m", "messages": [');
      else await send('oversized', '/v1/chat/completions', oversized);
    }
  };

  const seconds: SoakSecond[] = [];
  const sampler = setInterval(() => {
    const line = gateway.lastLine('loop-delay ');
    const field = (name: string) => Number(new RegExp(`${name}=([\\d.]+)`).exec(line ?? '')?.[1] ?? NaN);
    const t = Math.round((performance.now() - started) / 1000);
    const counts = secondCounts;
    secondCounts = {};
    const answered = Object.entries(counts).reduce((sum, [, v]) => sum + v, 0);
    seconds.push({
      t,
      phase: phaseAt(fraction()),
      answered,
      byStatus: counts,
      rssMiB: field('rss'),
      loopP99Ms: field('p99'),
      loopMaxMs: field('max'),
    });
    if (t % 10 === 0)
      log(
        `    ${t}s ${phaseAt(fraction())}: ${answered} answers/s, RSS ${field('rss')} MiB, loop delay p99 ${field('p99')} ms, max ${field('max')} ms`,
      );
  }, 1_000);

  const timers: NodeJS.Timeout[] = [];
  const faultRuns: Promise<void>[] = [];
  for (const fault of faults) {
    faultRuns.push(
      // A fault that fails to start or stop fails the run instead of leaving it waiting.
      new Promise<void>((resolve, reject) => {
        timers.push(
          setTimeout(() => {
            log(`    ${Math.round(fault.from * options.durationSec)}s: ${fault.name}`);
            Promise.resolve(fault.start()).then(() => {
              timers.push(
                setTimeout(
                  () => {
                    Promise.resolve(fault.stop()).then(resolve, reject);
                  },
                  (fault.to - fault.from) * durationMs,
                ),
              );
            }, reject);
          }, fault.from * durationMs),
        );
      }),
    );
  }
  try {
    await Promise.all([...Array.from({ length: CLIENTS }, (_, i) => client(i)), ...faultRuns]);
  } finally {
    clearInterval(sampler);
    for (const timer of timers) clearTimeout(timer);
    await agent.close();
    await gateway.stop();
    await mock.stop();
    await redis.close();
  }

  const phases = ['normal', ...faults.map((f) => f.name)].map((phase) => {
    const mine = phaseOf.filter((p) => p.phase === phase);
    const secs = seconds.filter((s) => s.phase === phase);
    return {
      phase,
      requests: mine.length,
      ok: mine.filter((p) => p.status >= 200 && p.status < 300).length,
      loopP99Ms: Math.max(0, ...secs.map((s) => s.loopP99Ms).filter(Number.isFinite)),
      loopMaxMs: Math.max(0, ...secs.map((s) => s.loopMaxMs).filter(Number.isFinite)),
      rssMaxMiB: Math.max(0, ...secs.map((s) => s.rssMiB).filter(Number.isFinite)),
    };
  });
  // No sample at all (the monitor's lines never arrived) is a failed check, not a peak of 0.
  const rssSamples = seconds.map((x) => x.rssMiB).filter(Number.isFinite);
  const rssPeak = rssSamples.length ? Math.max(...rssSamples) : NaN;
  const answeredOutsideProviderFaults = phaseOf.filter((p) => !p.providerFault);
  const unexpected5xx = answeredOutsideProviderFaults.filter((p) => p.status >= 500).length;
  const check = (
    name: string,
    target: string,
    actual: string,
    pass: boolean,
    kind: TargetCheck['kind'] = 'count',
  ): TargetCheck => ({
    scenario: 'soak',
    run: 'gateway + Redis',
    kind,
    name,
    target,
    actual,
    pass,
    scaling: 'none',
  });
  const checks = [
    check('requests without any HTTP answer', '0', String(transportErrors), transportErrors === 0),
    check(
      '5xx outside the provider faults and the 2 s after them (Redis faults included)',
      '0',
      String(unexpected5xx),
      unexpected5xx === 0,
    ),
    check(
      'malformed and oversized bodies answered 4xx',
      'all',
      countsText({ ...byKindStatus.malformed, ...byKindStatus.oversized }),
      [byKindStatus.malformed, byKindStatus.oversized].every(
        (c) => !c || Object.keys(c).every((s) => s.startsWith('4')),
      ),
    ),
    check('gateway RSS peak', '< 512 MiB', `${rssPeak} MiB (${rssSamples.length} samples)`, rssPeak < 512),
  ];
  return { durationSec: options.durationSec, requests, byKindStatus, transportErrors, seconds, phases, checks };
}

export function soakTable(result: SoakResult): string {
  const kinds = table(
    ['request kind', 'answers by status'],
    Object.entries(result.byKindStatus).map(([kind, counts]) => [kind, countsText(counts)]),
  );
  const phases = table(
    ['phase', 'requests', '2xx', 'event-loop delay p99 (worst second)', 'max', 'RSS peak'],
    result.phases.map((p) => [
      p.phase,
      String(p.requests),
      String(p.ok),
      `${p.loopP99Ms} ms`,
      `${p.loopMaxMs} ms`,
      `${p.rssMaxMiB} MiB`,
    ]),
  );
  return `${result.requests} requests in ${result.durationSec} s, ${result.transportErrors} without an HTTP answer\n\n${kinds}\n\n${phases}`;
}
