import autocannon from 'autocannon';
import { request } from 'undici';
import { percentile } from './metrics.js';
import { MockControl } from './mock-control.js';
import { startGateway, startMinimalProxy, startMockProvider, type ChildHandle } from './processes.js';
import { table } from './report.js';
import { BENCH_API_KEY, BENCH_MODEL } from './sdk-client.js';
import type { TargetCheck } from './targets.js';

/**
 * `npm run bench -- capacity`: the gateway's concurrency limit at its defaults, on loopback, bounded in time.
 *
 * 1. Throughput: a provider answering in 50 ms, 200 connections of distinct requests, through the leanest Node
 *    proxy (the floor) and through the gateway at its default flags. Target: the gateway serves at least 0.8x.
 * 2. A provider with a capacity (the mock's `--capacity N`: beyond N calls at once, latency grows with the calls in
 *    flight), 200 connections, straight through the floor and through the gateway: the gateway's adaptive limit
 *    (sampled from /health every 200 ms) should settle near N, and the provider's own latency (from the mock's call
 *    log) stay near its uncontended 50 ms instead of the floor's 200/N times that.
 */

const LATENCY_MS = 50;
const CONNECTIONS = 200;
const CAPACITY = 20;
const WARMUP_SEC = 2;
const THROUGHPUT_SEC = 5;
const CAPACITY_SEC = 12;
const HEADERS = { 'content-type': 'application/json', authorization: `Bearer ${BENCH_API_KEY}` };

export interface ThroughputRun {
  label: string;
  requestsPerSec: number;
  latencyP50: number;
  latencyP99: number;
  failed: number;
  /** The gateway's adaptive limit, sampled every 200 ms over the run. */
  limits?: number[];
}

export interface CapacityRun {
  label: string;
  requestsPerSec: number;
  /** The provider's own latency (request arrival to answer), second half of the run. */
  providerP50: number;
  providerP99: number;
  /** What the clients waited, queue included. */
  clientP99: number;
  failed: number;
}

export interface CapacityResult {
  throughput: ThroughputRun[];
  capacity: CapacityRun[];
  /** The gateway's limit over the capacity run: [seconds since start, limit]. */
  limitOverTime: Array<[number, number]>;
  /** Median of the limit over the second half of the run. */
  settledLimit: number;
  checks: TargetCheck[];
}

let counter = 0;
const run = `${process.pid}-${Date.now()}`;
const spec: autocannon.RequestSpec = {
  method: 'POST',
  path: '/v1/chat/completions',
  headers: HEADERS,
  setupRequest: (req) => {
    req.body = JSON.stringify({
      model: BENCH_MODEL,
      messages: [{ role: 'user', content: `Capacity ${run}-${++counter}: reply briefly.` }],
    });
    return req;
  },
};

function blast(url: string, durationSec: number) {
  return autocannon({ url, connections: CONNECTIONS, duration: durationSec, timeout: 20, requests: [spec] });
}

async function gatewayLimit(url: string): Promise<number | undefined> {
  try {
    const response = await request(`${url}/health`);
    const body = (await response.body.json()) as { upstreams?: Array<{ limit?: number }> };
    return body.upstreams?.[0]?.limit;
  } catch {
    return undefined;
  }
}

export async function runCapacity(log: (line: string) => void): Promise<CapacityResult> {
  const children: ChildHandle[] = [];
  const start = async (child: Promise<ChildHandle>) => {
    const handle = await child;
    children.push(handle);
    return handle;
  };
  try {
    // 1. Throughput at the defaults.
    const mock = await start(startMockProvider(LATENCY_MS));
    const throughput: ThroughputRun[] = [];
    for (const [label, child] of [
      ['floor (bare proxy)', await start(startMinimalProxy(mock.url, 256))],
      ['gateway, default flags', await start(startGateway(mock.url, []))],
    ] as const) {
      await blast(child.url, WARMUP_SEC);
      const limits: number[] = [];
      let sampling = label.startsWith('gateway');
      const sampler = (async () => {
        while (sampling) {
          const limit = await gatewayLimit(child.url);
          if (limit !== undefined) limits.push(limit);
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      })();
      const result = await blast(child.url, THROUGHPUT_SEC);
      sampling = false;
      await sampler;
      const entry = {
        label,
        requestsPerSec: result['2xx'] / result.duration,
        latencyP50: result.latency.p50,
        latencyP99: result.latency.p99,
        failed: result.non2xx + result.errors + result.timeouts,
        limits: limits.length > 0 ? limits : undefined,
      };
      throughput.push(entry);
      log(
        `    throughput ${label}: ${Math.round(entry.requestsPerSec)} req/s, p50 ${entry.latencyP50} ms, p99 ${entry.latencyP99} ms${limits.length > 0 ? `, limit ${limits.join(' ')}` : ''}`,
      );
    }

    // 2. A provider with a capacity.
    const limited = await start(startMockProvider(LATENCY_MS, ['--capacity', String(CAPACITY)]));
    const control = new MockControl(limited.url);
    const capacity: CapacityRun[] = [];
    const limitOverTime: Array<[number, number]> = [];
    for (const [label, child] of [
      ['floor (bare proxy)', await start(startMinimalProxy(limited.url, 256))],
      ['gateway, default flags', await start(startGateway(limited.url, []))],
    ] as const) {
      await control.reset();
      const isGateway = label.startsWith('gateway');
      const t0 = performance.now();
      let sampling = isGateway;
      const sampler = (async () => {
        while (sampling) {
          const limit = await gatewayLimit(child.url);
          if (limit !== undefined) limitOverTime.push([Math.round(performance.now() - t0) / 1000, limit]);
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      })();
      const result = await blast(child.url, CAPACITY_SEC);
      sampling = false;
      await sampler;
      const calls = await control.calls();
      const half = calls[0] ? calls[0].receivedAt + (CAPACITY_SEC * 1000) / 2 : 0;
      const latencies = calls
        .filter((c) => c.finishedAt !== undefined && c.receivedAt >= half)
        .map((c) => c.finishedAt! - c.receivedAt)
        .sort((a, b) => a - b);
      const entry = {
        label,
        requestsPerSec: result['2xx'] / result.duration,
        providerP50: Math.round(percentile(latencies, 50) ?? 0),
        providerP99: Math.round(percentile(latencies, 99) ?? 0),
        clientP99: result.latency.p99,
        failed: result.non2xx + result.errors + result.timeouts,
      };
      capacity.push(entry);
      log(
        `    capacity ${CAPACITY} ${label}: ${Math.round(entry.requestsPerSec)} req/s, provider p50 ${entry.providerP50} ms p99 ${entry.providerP99} ms`,
      );
    }
    const secondHalf = limitOverTime
      .filter(([t]) => t >= CAPACITY_SEC / 2)
      .map(([, l]) => l)
      .sort((a, b) => a - b);
    const settledLimit = percentile(secondHalf, 50) ?? 0;
    const ratio = throughput[1].requestsPerSec / throughput[0].requestsPerSec;
    const gw = capacity[1];
    const checks: TargetCheck[] = [
      {
        scenario: 'capacity',
        run: 'gateway',
        kind: 'timing',
        name: `throughput vs bare proxy, ${LATENCY_MS} ms provider, ${CONNECTIONS} conns`,
        target: '>= 0.8x',
        actual: `${ratio.toFixed(2)}x`,
        pass: ratio >= 0.8,
        scaling: 'none',
      },
      {
        scenario: 'capacity',
        run: 'gateway',
        kind: 'timing',
        name: `adaptive limit, provider capacity ${CAPACITY}`,
        target: `${CAPACITY * 0.75}..${CAPACITY * 1.5}`,
        actual: String(settledLimit),
        pass: settledLimit >= CAPACITY * 0.75 && settledLimit <= CAPACITY * 1.5,
        scaling: 'none',
      },
      {
        scenario: 'capacity',
        run: 'gateway',
        kind: 'timing',
        name: "provider's p99 under the adaptive limit",
        target: `<= 1.5x uncontended (${LATENCY_MS * 1.5} ms)`,
        actual: `${gw.providerP99} ms`,
        pass: gw.providerP99 <= LATENCY_MS * 1.5,
        scaling: 'none',
      },
    ];
    return { throughput, capacity, limitOverTime, settledLimit, checks };
  } finally {
    await Promise.all(children.map((c) => c.stop()));
  }
}

export function capacityTable(result: CapacityResult): string {
  const floor = result.throughput[0];
  return [
    `Throughput: distinct requests, ${CONNECTIONS} connections, provider ${LATENCY_MS} ms`,
    table(
      ['', 'req/s', 'vs floor', 'p50', 'p99', 'failed'],
      result.throughput.map((r) => [
        r.label,
        String(Math.round(r.requestsPerSec)),
        `${(r.requestsPerSec / floor.requestsPerSec).toFixed(2)}x`,
        `${r.latencyP50} ms`,
        `${r.latencyP99} ms`,
        String(r.failed),
      ]),
    ),
    '',
    `Provider with a capacity of ${CAPACITY} (latency x in-flight/${CAPACITY} beyond it), ${CONNECTIONS} connections; settled limit ${result.settledLimit}`,
    table(
      ['', 'req/s', 'provider p50', 'provider p99', 'client p99', 'failed'],
      result.capacity.map((r) => [
        r.label,
        String(Math.round(r.requestsPerSec)),
        `${r.providerP50} ms`,
        `${r.providerP99} ms`,
        `${r.clientP99} ms`,
        String(r.failed),
      ]),
    ),
  ].join('\n');
}

/** The gateway's limit over the capacity run, as a small SVG line chart. */
export function renderLimitSvg(result: CapacityResult): string {
  const width = 640;
  const height = 240;
  const pad = 40;
  const points = result.limitOverTime;
  const maxT = Math.max(CAPACITY_SEC, ...points.map(([t]) => t));
  const maxL = Math.max(CAPACITY * 2, ...points.map(([, l]) => l));
  const x = (t: number) => pad + ((width - 2 * pad) * t) / maxT;
  const y = (l: number) => height - pad - ((height - 2 * pad) * l) / maxL;
  const path = points.map(([t, l], i) => `${i === 0 ? 'M' : 'L'}${x(t).toFixed(1)},${y(l).toFixed(1)}`).join(' ');
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${pad}" y="16">Adaptive limit over time: provider capacity ${CAPACITY}, ${CONNECTIONS} connections, ${LATENCY_MS} ms</text>`,
    `<line x1="${pad}" y1="${height - pad}" x2="${width - pad}" y2="${height - pad}" stroke="#999"/>`,
    `<line x1="${pad}" y1="${pad}" x2="${pad}" y2="${height - pad}" stroke="#999"/>`,
    `<line x1="${pad}" y1="${y(CAPACITY)}" x2="${width - pad}" y2="${y(CAPACITY)}" stroke="#c33" stroke-dasharray="4 3"/>`,
    `<text x="${width - pad + 4}" y="${y(CAPACITY) + 4}" fill="#c33">N</text>`,
    ...[0, Math.round(maxL / 2), maxL].map((l) => `<text x="${pad - 6}" y="${y(l) + 4}" text-anchor="end">${l}</text>`),
    ...[0, maxT / 2, maxT].map(
      (t) => `<text x="${x(t)}" y="${height - pad + 14}" text-anchor="middle">${t.toFixed(0)} s</text>`,
    ),
    `<path d="${path}" fill="none" stroke="#2a6" stroke-width="2"/>`,
    '</svg>',
  ].join('\n');
}
