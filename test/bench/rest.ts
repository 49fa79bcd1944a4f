import { startBurners } from './burners.js';
import { readFileSync } from 'node:fs';
import { request } from 'undici';
import { processCpuMs, startGateway, startMinimalProxy, startMockProvider, type ChildHandle } from './processes.js';
import { table } from './report.js';
import { BENCH_API_KEY, BENCH_MODEL } from './sdk-client.js';
import type { TargetCheck } from './targets.js';

/*
 * Start and rest: for the floor (test/bench/minimal-proxy.ts) and the gateway at its default flags (as `npm start`
 * runs it), measured in the same rounds against one mock provider:
 *  - spawn to first proxied answer: from spawning the process to the end of the first chat completion through it;
 *  - idle RSS: resident memory once it has started and answered one request, after the rest below;
 *  - idle CPU: CPU time (`processCpuMs`) per second of a window that starts REST_MS after its last request.
 * With `--loaded`, the same beside two busy processes that take every core of a 2-core machine.
 */

const HEADERS = { 'content-type': 'application/json', authorization: `Bearer ${BENCH_API_KEY}` };
/** How long each process rests after its last request before its CPU is counted. */
export const REST_MS = 20_000;

export interface RestSample {
  startMs: number;
  rssMb: number;
  idleCpuMsPerSec: number;
}

export interface RestResult {
  rounds: number;
  windowSec: number;
  loaded: boolean;
  floor: RestSample[];
  gateway: RestSample[];
  checks: TargetCheck[];
}

function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? NaN);
  return kb / 1024;
}

async function chat(url: string, round: number): Promise<void> {
  const body = JSON.stringify({
    model: BENCH_MODEL,
    messages: [{ role: 'user', content: `Rest round ${round}: one answer.` }],
  });
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: HEADERS,
    body,
    headersTimeout: 60_000,
    bodyTimeout: 60_000,
  });
  await res.body.arrayBuffer();
  if (res.statusCode !== 200) throw new Error(`${url}: first request answered ${res.statusCode}`);
}

/** Spawns a process, waits for its listening line, sends one chat completion: the time from spawn to its answer. */
async function startAndAnswer(
  start: () => Promise<ChildHandle>,
  round: number,
): Promise<{ child: ChildHandle; startMs: number }> {
  const t0 = performance.now();
  const child = await start();
  await chat(child.url, round);
  return { child, startMs: performance.now() - t0 };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

export async function runRest(options: {
  rounds: number;
  windowSec: number;
  loaded: boolean;
  log: (line: string) => void;
}): Promise<RestResult> {
  const { rounds, windowSec, loaded, log } = options;
  const perRoundSec = 15 + REST_MS / 1000 + windowSec;
  const burners = loaded ? startBurners(2, rounds * perRoundSec + 60) : undefined;
  if (burners) log(`  beside 2 busy processes (PIDs ${burners.pids.join(' ')})`);
  const mock = await startMockProvider(0);
  const floor: RestSample[] = [];
  const gateway: RestSample[] = [];
  try {
    for (let round = 0; round < rounds; round++) {
      // The order alternates, so that neither always starts on a machine the other just warmed (file cache, CPU).
      const order = round % 2 === 0 ? (['floor', 'gateway'] as const) : (['gateway', 'floor'] as const);
      const started: Record<string, { child: ChildHandle; startMs: number; lastRequest: number }> = {};
      try {
        for (const which of order) {
          const { child, startMs } = await startAndAnswer(
            () => (which === 'floor' ? startMinimalProxy(mock.url) : startGateway(mock.url, [])),
            round,
          );
          started[which] = { child, startMs, lastRequest: performance.now() };
        }
        // Both rest together: the window opens REST_MS after the later of the two last requests.
        const rested = Math.max(started.floor.lastRequest, started.gateway.lastRequest) + REST_MS;
        await sleep(rested - performance.now());
        const cpu0 = { floor: processCpuMs(started.floor.child.pid), gateway: processCpuMs(started.gateway.child.pid) };
        const t0 = performance.now();
        const rss = { floor: rssMb(started.floor.child.pid), gateway: rssMb(started.gateway.child.pid) };
        await sleep(windowSec * 1000);
        const seconds = (performance.now() - t0) / 1000;
        for (const which of ['floor', 'gateway'] as const) {
          const sample = {
            startMs: started[which].startMs,
            rssMb: rss[which],
            idleCpuMsPerSec: (processCpuMs(started[which].child.pid) - cpu0[which]) / seconds,
          };
          (which === 'floor' ? floor : gateway).push(sample);
          log(
            `  round ${round + 1} ${which.padEnd(7)}: start ${sample.startMs.toFixed(0)} ms, RSS ${sample.rssMb.toFixed(1)} MB, idle CPU ${sample.idleCpuMsPerSec.toFixed(2)} ms/s`,
          );
        }
      } finally {
        await Promise.all(Object.values(started).map(({ child }) => child.stop()));
      }
    }
  } finally {
    await mock.stop();
    burners?.stop();
  }
  const startRatio = median(gateway.map((s) => s.startMs)) / median(floor.map((s) => s.startMs));
  const rss = median(gateway.map((s) => s.rssMb));
  const cpu = median(gateway.map((s) => s.idleCpuMsPerSec));
  const checks: TargetCheck[] = [
    {
      scenario: 'rest',
      run: loaded ? 'loaded' : 'quiet',
      scaling: 'none',
      kind: 'timing',
      name: 'rest: spawn to first proxied answer <= 2x the floor',
      target: '<= 2x',
      actual: `${startRatio.toFixed(2)}x`,
      pass: startRatio <= 2,
    },
    {
      scenario: 'rest',
      run: loaded ? 'loaded' : 'quiet',
      scaling: 'none',
      kind: 'timing',
      name: 'rest: idle RSS <= 90 MB',
      target: '<= 90 MB',
      actual: `${rss.toFixed(1)} MB`,
      pass: rss <= 90,
    },
    {
      scenario: 'rest',
      run: loaded ? 'loaded' : 'quiet',
      scaling: 'none',
      kind: 'timing',
      name: `rest: idle CPU <= 1 ms/s, ${REST_MS / 1000} s after the last request`,
      target: '<= 1 ms/s',
      actual: `${cpu.toFixed(2)} ms/s`,
      pass: cpu <= 1,
    },
  ];
  return { rounds, windowSec, loaded, floor, gateway, checks };
}

export function restTable(result: RestResult): string {
  const row = (name: string, pick: (s: RestSample) => number, digits: number, unit: string) => {
    const f = median(result.floor.map(pick));
    const g = median(result.gateway.map(pick));
    const all = (samples: RestSample[]) => samples.map((s) => pick(s).toFixed(digits)).join(' / ');
    return [
      name,
      `${f.toFixed(digits)} ${unit}`,
      `${g.toFixed(digits)} ${unit}`,
      f > 0 ? `${(g / f).toFixed(2)}x` : g > 0 ? 'inf' : '-',
      all(result.floor),
      all(result.gateway),
    ];
  };
  return [
    `start and rest, ${result.rounds} rounds${result.loaded ? ', beside 2 busy processes' : ''}; medians, then every round (floor / gateway)`,
    `idle CPU over ${result.windowSec} s from ${REST_MS / 1000} s after the last request`,
    table(
      ['', 'floor', 'gateway', 'ratio', 'floor rounds', 'gateway rounds'],
      [
        row('spawn to first proxied answer', (s) => s.startMs, 0, 'ms'),
        row('idle RSS', (s) => s.rssMb, 1, 'MB'),
        row('idle CPU', (s) => s.idleCpuMsPerSec, 2, 'ms/s'),
      ],
    ),
  ].join('\n');
}
