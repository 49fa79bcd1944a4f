import autocannon from 'autocannon';
import { percentile } from './metrics.js';
import { startGateway, startMinimalProxy, startMockProvider, type ChildHandle } from './processes.js';
import { table } from './report.js';
import { BENCH_API_KEY, BENCH_MODEL } from './sdk-client.js';
import type { TargetCheck } from './targets.js';

export interface OverheadOptions {
  /** Seconds per measured stretch. */
  durationSec: number;
  /** Rounds of a,b,c,d,e (at least 2). */
  rounds: number;
  connections: number;
  log?: (line: string) => void;
}

type TargetKey = 'a' | 'b' | 'c' | 'd' | 'e';

export interface OverheadStretch {
  round: number;
  target: TargetKey;
  durationSec: number;
  requests2xx: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  requestsPerSec: number;
  latencyP50: number;
  latencyP99: number;
  /** CPU ms the measured server process used (the proxy; for (a) the mock itself). */
  serverCpuMs: number;
  /** CPU ms the mock provider used behind it. */
  providerCpuMs: number;
}

export interface OverheadSummary {
  target: TargetKey;
  label: string;
  requests2xx: number;
  failed: number;
  requestsPerSec: number;
  latencyP50: number;
  latencyP99: number;
  cpuMsPerRequest: number;
  providerCpuMsPerRequest: number;
}

export interface OverheadResult {
  options: Omit<OverheadOptions, 'log'>;
  stretches: OverheadStretch[];
  summary: OverheadSummary[];
  checks: TargetCheck[];
}

const LABELS: Record<TargetKey, string> = {
  a: '(a) mock provider direct, latency 0',
  b: '(b) minimal undici proxy',
  c: '(c) gateway (default platform: fastify), dedup on, metrics + request log on',
  d: '(d) gateway on express, dedup on, metrics + request log on',
  e: '(e) gateway (fastify), metrics, request log, status page off',
};

/**
 * Throughput and CPU cost per request of the gateway against the floor for a Node proxy. One mock provider
 * (latency 0) serves all five; the targets run alternately (a,b,c,d,e, a,b,c,d,e, ...) with the same body shape
 * (every body distinct) and connection count. CPU time is read from /proc/<pid>/stat before and after.
 */
export async function runOverhead(options: OverheadOptions): Promise<OverheadResult> {
  const log = options.log ?? (() => undefined);
  const children: ChildHandle[] = [];
  try {
    const mock = await startMockProvider(0);
    children.push(mock);
    const proxy = await startMinimalProxy(mock.url);
    children.push(proxy);
    const fastify = await startGateway(mock.url, ['--platform', 'fastify']);
    children.push(fastify);
    const express = await startGateway(mock.url, ['--platform', 'express']);
    children.push(express);
    const quiet = await startGateway(mock.url, ['--platform', 'fastify', '--no-metrics', '--no-request-log', '--no-status-page']);
    children.push(quiet);
    const servers: Record<TargetKey, ChildHandle> = { a: mock, b: proxy, c: fastify, d: express, e: quiet };
    log(`  overhead: provider ${mock.url}, minimal proxy ${proxy.url}, gateway express ${express.url}, gateway fastify ${fastify.url}`);

    let counter = 0;
    const blast = (target: TargetKey, durationSec: number) =>
      autocannon({
        url: servers[target].url,
        connections: options.connections,
        duration: durationSec,
        timeout: 10,
        requests: [
          {
            method: 'POST',
            path: '/v1/chat/completions',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${BENCH_API_KEY}` },
            setupRequest: (request) => {
              counter++;
              request.body = JSON.stringify({
                model: BENCH_MODEL,
                messages: [{ role: 'user', content: `Overhead prompt #${String(counter).padStart(9, '0')}: reply briefly.` }],
              });
              return request;
            },
          },
        ],
      });

    const keys: TargetKey[] = ['a', 'b', 'c', 'd', 'e'];
    // Warm-up (not measured): JIT, connection pools, and a full answer window on the gateways.
    const warmSec = Math.max(3, Math.round(options.durationSec / 3));
    for (const key of keys) await blast(key, warmSec);

    const stretches: OverheadStretch[] = [];
    for (let round = 1; round <= options.rounds; round++) {
      for (const key of keys) {
        const server = servers[key];
        const serverBefore = server.cpuMs();
        const providerBefore = mock.cpuMs();
        const result = await blast(key, options.durationSec);
        const serverCpuMs = server.cpuMs() - serverBefore;
        const providerCpuMs = key === 'a' ? serverCpuMs : mock.cpuMs() - providerBefore;
        const stretch: OverheadStretch = {
          round,
          target: key,
          durationSec: result.duration,
          requests2xx: result['2xx'],
          non2xx: result.non2xx,
          errors: result.errors,
          timeouts: result.timeouts,
          requestsPerSec: result['2xx'] / result.duration,
          latencyP50: result.latency.p50,
          latencyP99: result.latency.p99,
          serverCpuMs,
          providerCpuMs,
        };
        stretches.push(stretch);
        log(
          `    round ${round} ${LABELS[key]}: ${Math.round(stretch.requestsPerSec)} req/s, p50 ${stretch.latencyP50} ms, p99 ${stretch.latencyP99} ms, ` +
            `${(serverCpuMs / Math.max(1, stretch.requests2xx)).toFixed(3)} CPU ms/req${stretch.non2xx + stretch.errors ? `, ${stretch.non2xx} non-2xx, ${stretch.errors} errors` : ''}`,
        );
      }
    }

    const summary = keys.map((key): OverheadSummary => {
      const mine = stretches.filter((s) => s.target === key);
      const ok = mine.reduce((sum, s) => sum + s.requests2xx, 0);
      const seconds = mine.reduce((sum, s) => sum + s.durationSec, 0);
      return {
        target: key,
        label: LABELS[key],
        requests2xx: ok,
        failed: mine.reduce((sum, s) => sum + s.non2xx + s.errors + s.timeouts, 0),
        requestsPerSec: ok / seconds,
        latencyP50: percentile(mine.map((s) => s.latencyP50), 50) ?? 0,
        latencyP99: Math.max(...mine.map((s) => s.latencyP99)),
        cpuMsPerRequest: mine.reduce((sum, s) => sum + s.serverCpuMs, 0) / Math.max(1, ok),
        providerCpuMsPerRequest: mine.reduce((sum, s) => sum + s.providerCpuMs, 0) / Math.max(1, ok),
      };
    });
    const floor = summary.find((s) => s.target === 'b');
    const checks: TargetCheck[] = (['c', 'd', 'e'] as const).map((key) => {
      const row = summary.find((s) => s.target === key);
      const ratio = row && floor ? row.cpuMsPerRequest / floor.cpuMsPerRequest : Number.NaN;
      return {
        scenario: 'overhead',
        run: LABELS[key],
        kind: 'timing',
        name: 'CPU per request <= 2x minimal proxy',
        target: '<= 2.00x',
        actual: `${ratio.toFixed(2)}x`,
        pass: ratio <= 2,
        scaling: 'none',
      };
    });
    return { options: { durationSec: options.durationSec, rounds: options.rounds, connections: options.connections }, stretches, summary, checks };
  } finally {
    await Promise.all(children.reverse().map((child) => child.stop()));
  }
}

export function overheadTable(result: OverheadResult): string {
  const floor = result.summary.find((s) => s.target === 'b');
  const rows = result.summary.map((s) => [
    s.label,
    String(Math.round(s.requestsPerSec)),
    floor ? `${(s.requestsPerSec / floor.requestsPerSec).toFixed(2)}x` : '-',
    `${s.latencyP50} ms`,
    `${s.latencyP99} ms`,
    s.cpuMsPerRequest.toFixed(3),
    floor ? `${(s.cpuMsPerRequest / floor.cpuMsPerRequest).toFixed(2)}x` : '-',
    s.target === 'a' ? '-' : s.providerCpuMsPerRequest.toFixed(3),
    String(s.failed),
  ]);
  const { durationSec, rounds, connections } = result.options;
  return [
    `== overhead: autocannon, ${connections} connections, ${durationSec} s per stretch, ${rounds} rounds of a,b,c,d,e (every body distinct)`,
    table(['', 'req/s', 'vs (b)', 'p50', 'p99', 'CPU ms/req', 'vs (b)', 'provider CPU ms/req', 'failed'], rows),
    '   CPU ms/req: user+system time of that server process (for (a), the mock itself) per 2xx answer; p50 is the median of the rounds, p99 the worst.',
  ].join('\n');
}
