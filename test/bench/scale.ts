import { Agent, request } from 'undici';
import { MockControl } from './mock-control.js';
import { percentile } from './metrics.js';
import { ENTRY, runNodeScript, startGateway, startMockProvider, type ChildHandle } from './processes.js';
import { countsText, table } from './report.js';
import { BENCH_API_KEY, BENCH_MODEL, ScenarioClock } from './sdk-client.js';
import { fmtMs, type TargetCheck } from './targets.js';
import type { WindowMemoryReport } from './window-memory.js';

export interface BigHerdResult {
  target: 'gateway' | 'direct';
  requests: number;
  connections: number;
  latencyMs: number;
  providerCalls: number;
  statuses: Record<string, number>;
  dedup: Record<string, number>;
  /** ms to open the pool's connections before the herd (not part of the waits). */
  preconnectMs: number;
  /** ms the harness took to hand all requests to the pool. */
  dispatchMs: number;
  waitP50: number;
  waitP99: number;
  waitMax: number;
  makespanMs: number;
  failures: number;
}

export interface ScaleResult {
  herd: BigHerdResult;
  /** The same herd sent straight to the mock provider: what answering 10 000 requests costs a bare Node server. */
  herdDirect: BigHerdResult;
  window: WindowMemoryReport & { wallMs: number };
  checks: TargetCheck[];
}

const HERD_SIZE = 10_000;

/**
 * 10 000 identical requests at once through the gateway (or straight to the mock provider, as a floor). The
 * official SDK is too heavy for 10 000 clients in one process, so this uses undici's `request` over one Agent
 * with 10 000 keep-alive connections, opened before the herd (the servers listen with Node's default backlog
 * of 511: 10 000 simultaneous connects would mostly measure SYN retransmits).
 */
export async function runBigHerd(
  scale: number,
  target: 'gateway' | 'direct',
  log: (line: string) => void,
): Promise<BigHerdResult> {
  const latencyMs = 1_500 * scale;
  const children: ChildHandle[] = [];
  const agent = new Agent({
    connections: HERD_SIZE,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 30_000,
    headersTimeout: 120_000,
    bodyTimeout: 120_000,
    connectTimeout: 30_000,
  });
  try {
    const mock = await startMockProvider(0);
    children.push(mock);
    const gateway = target === 'gateway' ? await startGateway(mock.url, []) : undefined;
    if (gateway) children.push(gateway);
    const control = new MockControl(mock.url);
    const base = gateway?.url ?? mock.url;
    log(
      `  scale (i): ${HERD_SIZE} identical requests ${gateway ? `through the gateway ${gateway.url}` : 'straight to'} provider ${mock.url}`,
    );

    // Open every connection of the pool with a request the server answers itself (never counted as a call).
    const preStart = performance.now();
    const health = await Promise.all(
      Array.from({ length: HERD_SIZE }, () =>
        request(gateway ? `${gateway.url}/health` : `${mock.url}/__mock/stats`, { dispatcher: agent }).then(
          async (r) => {
            await r.body.dump();
            return r.statusCode;
          },
          () => 0,
        ),
      ),
    );
    const preconnectMs = performance.now() - preStart;
    if (health.some((status) => status !== 200))
      log(`    ${health.filter((s) => s !== 200).length} pre-connect requests failed`);
    await control.configure({ latencyMs: Math.round(latencyMs) });
    await control.reset();

    const body = JSON.stringify({
      model: BENCH_MODEL,
      messages: [{ role: 'user', content: 'The same question, ten thousand times.' }],
    });
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${BENCH_API_KEY}` };
    const clock = new ScenarioClock();
    const waits: number[] = [];
    const statuses: Record<string, number> = {};
    const dedup: Record<string, number> = {};
    let lastEnd = 0;
    let failures = 0;
    const pending: Promise<void>[] = [];
    for (let i = 0; i < HERD_SIZE; i++) {
      const start = clock.now();
      pending.push(
        request(`${base}/v1/chat/completions`, { method: 'POST', body, headers, dispatcher: agent }).then(
          async (r) => {
            await r.body.text();
            const end = clock.now();
            waits.push(end - start);
            lastEnd = Math.max(lastEnd, end);
            statuses[r.statusCode] = (statuses[r.statusCode] ?? 0) + 1;
            const outcome = String(r.headers['x-orchestrator-dedup'] ?? 'none');
            dedup[outcome] = (dedup[outcome] ?? 0) + 1;
          },
          () => {
            failures++;
          },
        ),
      );
    }
    const dispatchMs = clock.now();
    await Promise.all(pending);
    const providerCalls = (await control.calls()).filter((c) => c.route.includes('chat/completions')).length;
    return {
      target,
      requests: HERD_SIZE,
      connections: HERD_SIZE,
      latencyMs,
      providerCalls,
      statuses,
      dedup,
      preconnectMs,
      dispatchMs,
      waitP50: percentile(waits, 50) ?? Number.NaN,
      waitP99: percentile(waits, 99) ?? Number.NaN,
      waitMax: waits.length ? Math.max(...waits) : Number.NaN,
      makespanMs: lastEnd,
      failures,
    };
  } finally {
    await agent.close().catch(() => undefined);
    await Promise.all(children.reverse().map((child) => child.stop()));
  }
}

export async function runWindowMemory(count: number, every: number): Promise<WindowMemoryReport & { wallMs: number }> {
  const started = performance.now();
  const stdout = await runNodeScript(
    ENTRY.windowMemory,
    ['--count', String(count), '--every', String(every), '--concurrency', '64'],
    {
      nodeArgs: ['--expose-gc'],
      timeoutMs: 600_000,
    },
  );
  const report = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as WindowMemoryReport;
  return { ...report, wallMs: performance.now() - started };
}

/** Memory may not grow by more than this from the 100k sample to the end (an unbounded window would add ~1 GB). */
const HEAP_GROWTH_LIMIT_MB = 8;
const RSS_GROWTH_LIMIT_MB = 32;

export async function runScale(scale: number, log: (line: string) => void): Promise<ScaleResult> {
  const herd = await runBigHerd(scale, 'gateway', log);
  const herdDirect = await runBigHerd(scale, 'direct', log);
  log(`  scale (ii): 1,000,000 distinct requests through the dedup window, in-process (OrchestratorService.run)`);
  const window = await runWindowMemory(1_000_000, 50_000);
  const scaled: TargetCheck['scaling'] = scale === 1 ? 'none' : 'scaled';
  const afterFill = window.samples.filter((s) => s.requests >= 100_000);
  const first = afterFill[0];
  const maxRss = Math.max(...window.samples.map((s) => s.rssMb));
  const rssGrowth = first ? Math.max(...afterFill.map((s) => s.rssMb)) - first.rssMb : Number.NaN;
  const heapGrowth = first ? Math.max(...afterFill.map((s) => s.heapUsedMb)) - first.heapUsedMb : Number.NaN;
  const checks: TargetCheck[] = [
    {
      scenario: 'scale',
      run: '10k herd',
      kind: 'count',
      name: 'provider calls',
      target: '= 1',
      actual: String(herd.providerCalls),
      pass: herd.providerCalls === 1,
      scaling: 'none',
    },
    {
      scenario: 'scale',
      run: '10k herd',
      kind: 'timing',
      name: 'slowest answer <= latency + 200 ms',
      target: `<= ${fmtMs(herd.latencyMs + 200 * scale)}`,
      actual: fmtMs(herd.waitMax),
      pass: herd.waitMax <= herd.latencyMs + 200 * scale,
      scaling: scaled,
    },
    {
      scenario: 'scale',
      run: '1M distinct',
      kind: 'timing',
      name: `memory flat once the window is full (heap +<= ${HEAP_GROWTH_LIMIT_MB} MB, RSS +<= ${RSS_GROWTH_LIMIT_MB} MB after 100k)`,
      target: 'flat',
      actual: `heap +${heapGrowth.toFixed(1)} MB, RSS +${rssGrowth.toFixed(1)} MB; max RSS ${maxRss} MB`,
      pass: heapGrowth <= HEAP_GROWTH_LIMIT_MB && rssGrowth <= RSS_GROWTH_LIMIT_MB,
      scaling: 'none',
    },
  ];
  return { herd, herdDirect, window, checks };
}

export function scaleTable(result: ScaleResult, scale: number): string {
  const h = result.herd;
  const d = result.herdDirect;
  const w = result.window;
  const both = (f: (x: BigHerdResult) => string) => [f(h), f(d)];
  const herdRows = [
    ['requests / connections', ...both((x) => `${x.requests} / ${x.connections}`)],
    ['provider latency', ...both((x) => fmtMs(x.latencyMs))],
    ['provider calls', ...both((x) => String(x.providerCalls))],
    ['x-orchestrator-dedup', ...both((x) => countsText(x.dedup))],
    [
      'HTTP statuses (transport failures)',
      ...both(
        (x) =>
          `${Object.entries(x.statuses)
            .map(([k, v]) => `${k}: ${v}`)
            .join(', ')} (${x.failures})`,
      ),
    ],
    ['pre-connect of the pool (not timed)', ...both((x) => fmtMs(x.preconnectMs))],
    ['time to hand all requests to the pool', ...both((x) => fmtMs(x.dispatchMs))],
    ['wait p50 / p99 / slowest', ...both((x) => `${fmtMs(x.waitP50)} / ${fmtMs(x.waitP99)} / ${fmtMs(x.waitMax)}`)],
    ['last answer after the first request', ...both((x) => fmtMs(x.makespanMs))],
  ];
  const windowFull = w.samples.find((s) => s.requests >= 50_000);
  const maxRss = Math.max(...w.samples.map((s) => s.rssMb));
  const windowRows = [
    [
      'requests (all distinct, all misses)',
      `${w.count} (miss ${w.outcomes.miss}, joined ${w.outcomes.joined}, cached ${w.outcomes.cached})`,
    ],
    ['window bound', `${w.windowEntries} answers of ${w.answerBytes} bytes (JSON), 5 min`],
    ['RSS before / at 50k / max', `${w.baseline.rssMb} / ${windowFull?.rssMb ?? '-'} / ${maxRss} MB`],
    [
      'heap after GC before / at 50k / at the end',
      `${w.baseline.heapUsedMb} / ${windowFull?.heapUsedMb ?? '-'} / ${w.samples.at(-1)?.heapUsedMb ?? '-'} MB`,
    ],
    ['RSS every 50k (MB)', w.samples.map((s) => String(Math.round(s.rssMb))).join(' ')],
    ['time', `${fmtMs(w.wallMs)} (${((w.wallMs * 1000) / w.count).toFixed(1)} us per request, key included)`],
  ];
  return [
    `== scale (i): ${h.requests} identical requests at once through the gateway${scale === 1 ? '' : ` (scale ${scale})`}`,
    '   client: undici request() over one Agent with 10,000 pre-opened keep-alive connections (10,000 SDK clients are too heavy for one process)',
    table(['', 'gateway (defaults)', 'direct (floor: a bare Node server)'], herdRows),
    '   direct = the same herd straight to the mock provider: 10,000 calls, but also what answering 10,000 requests costs any Node server here.',
    `== scale (ii): ${w.count} distinct requests through the dedup window, in-process (OrchestratorService.run + dedupKey, default window)`,
    table(['', ''], windowRows),
  ].join('\n');
}
