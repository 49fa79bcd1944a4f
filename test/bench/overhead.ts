import autocannon from 'autocannon';
import { execFile, spawn } from 'node:child_process';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basename, join } from 'node:path';
import { Pool, request } from 'undici';
import { percentile } from './metrics.js';
import { nginxBinary, startNginx } from './nginx.js';
import { perfByOwner, profileByOwner, profileTable, type ProfileSummary } from './profile.js';
import {
  ENTRY,
  repoRoot,
  runNodeScript,
  startGateway,
  startFixedAnswerServer,
  startMinimalProxy,
  startMockProvider,
  type ChildHandle,
} from './processes.js';
import { table } from './report.js';
import { startBurners, type Burners } from './burners.js';
import { BENCH_API_KEY, BENCH_MODEL } from './sdk-client.js';
import type { TargetCheck } from './targets.js';

export interface OverheadOptions {
  /** Seconds per measured stretch. */
  durationSec: number;
  /** Interleaved rounds: every row, floor and gateway alternately, once per round. */
  rounds: number;
  /** Requests in the herd row. */
  herd: number;
  /** Rows to run (ids of ROWS plus `herd`); all when empty. */
  only: string[];
  /** Takes a CPU profile of the gateway on the small and 200 KB rows, after the rounds. */
  profile: boolean;
  /** Profiles with `perf record` (CPU time of every thread, the kernel's included) instead of `--cpu-prof`. */
  perfProfile?: boolean;
  /** Where profiles go. */
  out: string;
  /** Seconds of unmeasured load before each measured stretch (`WARM_UP_SEC` when not given). */
  warmUpSec?: number;
  /** Busy-looping processes running beside every row, from the first warm-up to the end (`--loaded`): 0 for none. */
  burners?: number;
  /**
   * Another build's gateway entry (`--against DIR`): measured as a third side in the same rounds, so a change is
   * judged against the build before it under the same load (the A/B column).
   */
  againstEntry?: string;
  log?: (line: string) => void;
}

type Side = 'floor' | 'gateway' | 'against';
type BodyKind =
  | 'small-distinct'
  | 'small-same'
  | 'big-distinct'
  | 'big-same'
  | 'stream-distinct'
  | 'kb10-distinct'
  | 'kb100-distinct'
  | 'kb1000-distinct';

interface LoadRow {
  id: string;
  label: string;
  platform: 'fastify' | 'express';
  connections: number;
  body: BodyKind;
  /** Largest gateway/floor CPU ratio the row aims for (none: a reference row, see `subject`). */
  limit?: number;
  /**
   * What is measured in place of the gateway: `node`, node:http alone answering a fixed body (`fixed-answer-server.ts`),
   * against the same baseline: what Node's HTTP server costs by itself, a reference with no target of its own.
   */
  subject?: 'node';
  /** A gateway not as it starts by default (every other row runs it so): see `VARIANT_FLAGS`. */
  variant?: Variant;
  /** What the gateway is measured against instead of the floor proxy: nginx as a caching proxy (see `nginx.ts`). */
  against?: 'nginx';
  /** The provider's streams spaced in time (see `SPACED_STREAM_FLAGS`) instead of written in one go. */
  provider?: 'spaced';
  /**
   * Seconds one request of the row lasts: its measured stretch is then a count of whole requests (about the stretch's
   * length of them) instead of a length of time. A stretch cut by time ends with a connection's stream half sent, whose
   * CPU counts but whose request does not: with streams of half a second in a stretch of 3 s, that swung a round's CPU
   * per request by up to a fifth, on either side.
   */
  requestSec?: number;
}

/**
 * What a row's variant turns off or on: `quiet`, metrics, the request log and the status page off; `traced`, traces
 * exported (`--otlp-endpoint`, to a sink in this process that takes and drops them); `windowless`, answers not kept
 * in the window (the bench's requests give no temperature, so they are sampled: `--no-window-for-sampled` stores none).
 */
const VARIANT_FLAGS = {
  quiet: () => ['--no-metrics', '--no-request-log', '--no-status-page'],
  traced: (traces: string) => ['--otlp-endpoint', traces],
  windowless: () => ['--no-window-for-sampled'],
} satisfies Record<string, (traces: string) => string[]>;
type Variant = keyof typeof VARIANT_FLAGS;

const gatewayOf = (row: LoadRow) =>
  row.subject ??
  `${row.variant ? `${row.platform}-${row.variant}` : row.platform}${row.provider ? `-${row.provider}` : ''}`;
/** The process a row's gateway is measured against: the floor proxy (of the row's provider), or nginx. */
const baselineOf = (row: LoadRow) => `${row.against ?? 'floor'}${row.provider ? `-${row.provider}` : ''}`;
/** The flags a row's gateway runs with beyond its platform. */
const flagsOf = (row: LoadRow, traces: string) => (row.variant ? VARIANT_FLAGS[row.variant](traces) : []);

/** An OTLP/HTTP endpoint that reads each export and answers 200, so that tracing costs the gateway what it would. */
async function startTraceSink(): Promise<{ url: string; spans: () => number; close: () => Promise<void> }> {
  let exports = 0;
  const server = createServer((request, response) => {
    request.on('data', () => undefined);
    request.once('end', () => {
      exports++;
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans: () => exports,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** The spaced-stream row's provider: 8 events (about 1.9 KB) a write, every 2 ms: a stream of 2000 events takes about half a second. */
const SPACED_INTERVAL_MS = 2;
const SPACED_EVENTS_PER_WRITE = 8;
const SPACED_STREAM_SEC = 0.5;
const SPACED_STREAM_FLAGS = [
  '--fixed-answers',
  '2000',
  '--event-interval-ms',
  String(SPACED_INTERVAL_MS),
  '--events-per-write',
  String(SPACED_EVENTS_PER_WRITE),
];

/** The rows of the table the gateway is held to, each measured against the floor proxy in the same round. */
export const ROWS: readonly LoadRow[] = [
  {
    id: 'small32',
    label: 'small distinct, 32 conns',
    platform: 'fastify',
    connections: 32,
    body: 'small-distinct',
    limit: 2,
  },
  {
    id: 'quiet32',
    label: 'small distinct, 32 conns, metrics and logs off',
    platform: 'fastify',
    connections: 32,
    body: 'small-distinct',
    limit: 2,
    variant: 'quiet',
  },
  {
    id: 'traced32',
    label: 'small distinct, 32 conns, traces exported (--otlp-endpoint)',
    platform: 'fastify',
    connections: 32,
    body: 'small-distinct',
    limit: 2,
    variant: 'traced',
  },
  // What keeping every distinct answer for the next 10,000 requests costs: the same load, nothing kept.
  {
    id: 'nowindow32',
    label: 'small distinct, 32 conns, answers not kept (--no-window-for-sampled)',
    platform: 'fastify',
    connections: 32,
    body: 'small-distinct',
    limit: 2,
    variant: 'windowless',
  },
  {
    id: 'small200',
    label: 'small distinct, 200 conns',
    platform: 'fastify',
    connections: 200,
    body: 'small-distinct',
    limit: 2,
  },
  // A hit answers from memory: it should cost less than proxying does.
  {
    id: 'hits',
    label: 'window hits (identical small requests)',
    platform: 'fastify',
    connections: 32,
    body: 'small-same',
    limit: 0.7,
  },
  {
    id: 'kb10',
    label: 'body of 10 KB, distinct',
    platform: 'fastify',
    connections: 16,
    body: 'kb10-distinct',
    limit: 2,
  },
  {
    id: 'kb100',
    label: 'body of 100 KB, distinct',
    platform: 'fastify',
    connections: 8,
    body: 'kb100-distinct',
    limit: 1.7,
  },
  {
    id: 'kb1000',
    label: 'body of 1 MB, distinct',
    platform: 'fastify',
    connections: 4,
    body: 'kb1000-distinct',
    limit: 1.5,
  },
  {
    id: 'big',
    label: '200 KB conversation, distinct',
    platform: 'fastify',
    connections: 8,
    body: 'big-distinct',
    limit: 2,
  },
  {
    id: 'bighit',
    label: '200 KB conversation, window hit',
    platform: 'fastify',
    connections: 8,
    body: 'big-same',
    limit: 0.7,
  },
  {
    id: 'stream',
    label: 'streams of 2000 events, distinct',
    platform: 'fastify',
    connections: 8,
    body: 'stream-distinct',
    limit: 1.5,
  },
  {
    id: 'express',
    label: '--platform express, small distinct',
    platform: 'express',
    connections: 32,
    body: 'small-distinct',
    limit: 2.5,
  },
  // Streams as a generating provider sends them: a few events per write, spaced in time (not one write of 465 KB).
  {
    id: 'spaced',
    label: `streams of 2000 events, ${SPACED_EVENTS_PER_WRITE} a write every ${SPACED_INTERVAL_MS} ms, distinct`,
    platform: 'fastify',
    connections: 32,
    body: 'stream-distinct',
    limit: 1.3,
    provider: 'spaced',
    requestSec: SPACED_STREAM_SEC,
  },
  // The same hits against nginx's proxy_cache doing the same job (its key the URI and the body): the ratio is gateway / nginx.
  {
    id: 'nginxhits',
    label: 'window hits vs nginx proxy_cache hits (ratio: gateway / nginx)',
    platform: 'fastify',
    connections: 32,
    body: 'small-same',
    limit: 1.5,
    against: 'nginx',
  },
  // The same load on node:http alone answering a fixed body, against the same nginx: Node's HTTP server's own share.
  {
    id: 'nodehits',
    label: 'node:http alone, a fixed answer, vs nginx proxy_cache hits (reference, no gateway)',
    platform: 'fastify',
    connections: 32,
    body: 'small-same',
    against: 'nginx',
    subject: 'node',
  },
];

const HERD_LATENCY_MS = 300;
/**
 * An unmeasured stretch of the same load before each measured one, as long as a process takes to come back from the
 * minute or two it may sit idle between its rows (the Express gateway and the herd's gateway serve one row of the
 * round, the floor all of them): after idle minutes a gateway's first seconds of load cost several times its steady
 * CPU per request, whatever the V8 flags tried (docs/benchmarks/2026-12-02-after-idleness.md).
 */
const WARM_UP_SEC = 3;
/** A joined caller's answer costs at most this much CPU: it never reaches the provider. */
const HERD_CPU_PER_ANSWER_MS = 0.1;
/** A herd of 10 000 and more: its slowest answer within this much of the direct one (each caller is still parsed and answered). */
const BIG_HERD = 10_000;
const BIG_HERD_EXTRA_LIMIT_MS = 300;
/** Events of the stream row's answers. */
const STREAM_EVENTS = 2000;
/** A gateway's CPU per joined answer of a herd, at most this many times nginx's (proxy_cache_lock) for the same herd. */
const HERD_VS_NGINX_LIMIT = 1;
const HERD_EXTRA_LIMIT_MS = 30;
/** A round is disturbed when the floor's own CPU per request strays this far from its median over the rounds. */
const DISTURBED = 0.25;

export interface Stretch {
  row: string;
  round: number;
  side: Side;
  durationSec: number;
  ok: number;
  failed: number;
  requestsPerSec: number;
  latencyP50: number;
  latencyP99: number;
  cpuMsPerRequest: number;
}

export interface HerdShot {
  round: number;
  requests: number;
  /** Failed requests of the three sides together (direct, floor, gateway). */
  failed: number;
  /** Failed requests through the gateway. */
  gatewayFailed: number;
  directSlowestMs: number;
  gatewaySlowestMs: number;
  /** The floor proxy's CPU over the same herd (every request proxied), per request. */
  floorCpuMsPerRequest: number;
  /**
   * Gateway CPU over the herd, per answer, less its background: the /health probe (one every 10 ms) and its own timers,
   * at the rate measured over the second before the herd (the probe already running).
   */
  gatewayCpuMsPerAnswer: number;
  /** The background taken off, per answer (what the probe and timers cost over the herd's time). */
  backgroundCpuMsPerAnswer: number;
  /** The slowest GET /health round trip while the herd was answered (one probe every 10 ms, from a process of its own). */
  healthMaxMs: number;
  upstreamCalls: number;
  /** nginx's CPU over the same herd, per answer (its cache lock making one upstream call), where it ran. */
  nginxCpuMsPerAnswer?: number;
  nginxFailed?: number;
  nginxUpstreamCalls?: number;
}

export interface RowSummary {
  id: string;
  label: string;
  limit?: number;
  ratios: number[];
  ratioMedian: number;
  ratioMin: number;
  disturbedRounds: number[];
  floor: SideSummary;
  gateway: SideSummary;
  /** The other build's side (`--against`), and this build's CPU per request over that build's, round by round. */
  against?: SideSummary;
  abRatios?: number[];
  abMedian?: number;
  /** Requests per second the provider serves straight, with nothing in front (the floor's rate should stay below it). */
  providerRequestsPerSec?: number;
}

interface SideSummary {
  cpuMsPerRequest: number;
  requestsPerSec: number;
  latencyP50: number;
  latencyP99: number;
  failed: number;
}

export interface HerdSummary {
  requests: number;
  shots: HerdShot[];
  extraMsMedian: number;
  extraMsMin: number;
  cpuMsPerAnswerMedian: number;
  /** The /health probe's and timers' CPU over the herd, taken off the CPU per answer above. */
  backgroundCpuMsPerAnswerMedian: number;
  floorCpuMsPerRequest: number;
  healthMaxMs: number;
  /** Median over the rounds of nginx's CPU per answer, and of the gateway's / nginx's in the same round. */
  nginxCpuMsPerAnswerMedian?: number;
  vsNginxMedian?: number;
}

export interface OverheadResult {
  options: {
    durationSec: number;
    rounds: number;
    herd: number;
    burners?: number;
    warmUpSec?: number;
    againstEntry?: string;
  };
  stretches: Stretch[];
  rows: RowSummary[];
  herd?: HerdSummary;
  profiles: ProfileSummary[];
  /** Distinct requests at 200 connections to a provider that takes 50 ms: the floor and the gateway at two limits. */
  limits?: LimitRun[];
  checks: TargetCheck[];
}

const median = (values: readonly number[]) => percentile(values, 50) ?? Number.NaN;
const HEADERS = { 'content-type': 'application/json', authorization: `Bearer ${BENCH_API_KEY}` };

/** A conversation of ~200 KB in 523 turns, as JSON split around a marker where a counter makes each body distinct. */
function bigConversation(): [string, string] {
  const messages: Array<{ role: string; content: string }> = [
    { role: 'system', content: 'You are a careful assistant. #MARK#' },
  ];
  for (let i = 0; messages.length < 523; i++) {
    const words: string[] = [];
    for (let w = 0; words.join(' ').length < 340; w++) words.push(`word${(i * 7919 + w * 104729) % 100_000}`);
    messages.push({ role: i % 2 === 0 ? 'user' : 'assistant', content: `Turn ${i}: ${words.join(' ')}` });
  }
  const [head, tail] = JSON.stringify({ model: BENCH_MODEL, temperature: 0.2, max_tokens: 64, messages }).split(
    '#MARK#',
  );
  return [head, tail];
}

function streamPrompt(): [string, string] {
  const words = Array.from({ length: 2000 }, (_, i) => `w${i}`).join(' ');
  const [head, tail] = JSON.stringify({
    model: BENCH_MODEL,
    stream: true,
    messages: [{ role: 'user', content: `#MARK# ${words}` }],
  }).split('#MARK#');
  return [head, tail];
}

function smallPrompt(): [string, string] {
  const [head, tail] = JSON.stringify({
    model: BENCH_MODEL,
    messages: [{ role: 'user', content: 'Overhead prompt #MARK#: reply briefly.' }],
  }).split('#MARK#');
  return [head, tail];
}

let counter = 0;
const run = `${process.pid}-${Date.now()}`;

/** One user message of about `kb` KB (words, as a pasted document would be). */
function sizedPrompt(kb: number): [string, string] {
  const words: string[] = [];
  for (let length = 0, i = 0; length < kb * 1024; i++) {
    const word = `word${(i * 7919) % 100_000}`;
    words.push(word);
    length += word.length + 1;
  }
  const [head, tail] = JSON.stringify({
    model: BENCH_MODEL,
    max_tokens: 64,
    messages: [{ role: 'user', content: `#MARK# ${words.join(' ')}` }],
  }).split('#MARK#');
  return [head, tail];
}

function promptOf(kind: BodyKind): [string, string] {
  if (kind.startsWith('big')) return bigConversation();
  if (kind.startsWith('stream')) return streamPrompt();
  if (kind.startsWith('kb')) return sizedPrompt(Number(/^kb(\d+)/.exec(kind)![1]));
  return smallPrompt();
}

function requestSpec(kind: BodyKind): autocannon.RequestSpec {
  const [head, tail] = promptOf(kind);
  const base = { method: 'POST', path: '/v1/chat/completions', headers: HEADERS };
  // A body sent again and again gets the same answer from the window; one new per run so the first is a miss.
  if (kind.endsWith('same')) return { ...base, body: `${head}same-${run}${tail}` };
  return {
    ...base,
    setupRequest: (req) => {
      req.body = `${head}${run}-${++counter}${tail}`;
      return req;
    },
  };
}

/** `durationSec` of the row's load; `whole`: as many whole requests as fill it on a row of long ones (`requestSec`). */
function blast(url: string, row: LoadRow, durationSec: number, spec: autocannon.RequestSpec, whole = false) {
  const length =
    whole && row.requestSec !== undefined
      ? { amount: row.connections * Math.max(2, Math.round(durationSec / row.requestSec)) }
      : { duration: durationSec };
  return autocannon({ url, connections: row.connections, ...length, timeout: 20, requests: [spec] });
}

/**
 * The gateway's per-request overhead against the leanest Node proxy (`minimal-proxy.ts`), row by row. One mock
 * provider (latency 0) serves every row; in each round every row runs its floor and its gateway back to back (the
 * order alternating between rounds), and each round gives a ratio of CPU per request. CPU is the proxy process's own
 * time on a core (`processCpuMs`).
 */
export async function runOverhead(options: OverheadOptions): Promise<OverheadResult> {
  const log = options.log ?? (() => undefined);
  const nginx = nginxBinary();
  const rows = ROWS.filter((row) => options.only.length === 0 || options.only.includes(row.id)).filter((row) => {
    if (row.against !== 'nginx' || nginx) return true;
    log(`  overhead: row ${row.id} skipped: no nginx on this machine (apt-get install -y nginx)`);
    return false;
  });
  const withHerd = options.only.length === 0 || options.only.includes('herd');
  const withLimits = options.only.length === 0 || options.only.includes('limit');
  const children: ChildHandle[] = [];
  let traces: Awaited<ReturnType<typeof startTraceSink>> | undefined;
  let burners: Burners | undefined;
  const start = async <T extends ChildHandle>(child: Promise<T>) => {
    const handle = await child;
    children.push(handle);
    return handle;
  };
  try {
    // One prepared answer per call (a stream of 2000 events in one write, as a fast provider's back-to-back events
    // arrive coalesced), the request never parsed: the provider costs less per request than the floor proxy, so
    // the floor measures the proxy, not the provider (its own rate is printed beside the floor's).
    const mock = await start(startMockProvider(0, ['--fixed-answers', String(STREAM_EVENTS)]));
    if (options.burners) {
      // Started before any process warms up, so that each warms up and is measured beside them.
      burners = startBurners(options.burners, 3600);
      log(`  overhead --loaded: ${options.burners} busy processes beside every row (PIDs ${burners.pids.join(' ')})`);
    }
    const floor = await start(startMinimalProxy(mock.url, 256));
    traces = await startTraceSink();
    const gateways: Record<string, ChildHandle> = {};
    const againstGateways: Record<string, ChildHandle> = {};
    const baselines = await startBaselines(rows, mock, floor, nginx, start);
    const upstreamOf = (row: LoadRow) => (row.provider ? baselines.providers[row.provider]!.url : mock.url);
    for (const row of rows) {
      gateways[gatewayOf(row)] ??= await start(
        row.subject === 'node'
          ? startFixedAnswerServer()
          : startGateway(upstreamOf(row), ['--platform', row.platform, ...flagsOf(row, traces.url)]),
      );
      if (options.againstEntry && !row.subject)
        againstGateways[gatewayOf(row)] ??= await start(
          startGateway(upstreamOf(row), ['--platform', row.platform, ...flagsOf(row, traces.url)], [], {
            entry: options.againstEntry,
          }),
        );
      if (row.variant === 'traced') log(`    traces of ${row.id} go to ${traces.url}`);
    }
    const servers = [
      ...Object.entries(baselines.servers).map(([p, g]) => `${p} ${g.url}`),
      ...Object.entries(gateways).map(([p, g]) => `gateway ${p} ${g.url}`),
      ...Object.entries(againstGateways).map(([p, g]) => `against ${p} ${g.url}`),
    ];
    log(`  overhead: provider ${mock.url}, ${servers.join(', ')}`);

    const specs = new Map(rows.map((row) => [row.id, requestSpec(row.body)]));
    const warmSec = Math.min(2, options.durationSec);
    const providerAlone = new Map<string, number>();
    for (const row of rows) {
      await blast(baselines.servers[baselineOf(row)].url, row, warmSec, specs.get(row.id)!);
      await blast(gateways[gatewayOf(row)].url, row, warmSec, specs.get(row.id)!);
      const against = againstGateways[gatewayOf(row)];
      if (against) await blast(against.url, row, warmSec, specs.get(row.id)!);
      // What the provider serves on its own, with nothing in front: the ceiling of any proxy's rate on this row.
      const alone = await blast(upstreamOf(row), row, warmSec, specs.get(row.id)!);
      providerAlone.set(row.id, alone['2xx'] / alone.duration);
    }

    let herdSetup: HerdSetup | undefined;
    if (withHerd) {
      const herdMock = await start(startMockProvider(HERD_LATENCY_MS));
      herdSetup = {
        mock: herdMock,
        floor: await start(startMinimalProxy(herdMock.url, options.herd)),
        // The default flags: the default connection cap (16384) lets a herd of 10,000 in.
        gateway: await start(startGateway(herdMock.url, ['--platform', 'fastify'])),
        nginx: await startHerdNginx(nginx, herdMock.url, options.herd, start, log),
      };
      // Warm-up: a herd of the full size (the first herds a process answers run code the JIT has not compiled yet;
      // a smaller warm-up left the first measured round dearer per answer than the later ones).
      await herdShot(herdSetup, options.herd, -1);
    }

    const stretches: Stretch[] = [];
    const shots: HerdShot[] = [];
    for (let round = 1; round <= options.rounds; round++) {
      for (const row of rows) {
        const order: Side[] =
          options.againstEntry && !row.subject ? ['floor', 'gateway', 'against'] : ['floor', 'gateway'];
        const sides = round % 2 === 1 ? order : order.reverse();
        for (const side of sides) {
          const server =
            side === 'floor'
              ? baselines.servers[baselineOf(row)]
              : (side === 'gateway' ? gateways : againstGateways)[gatewayOf(row)];
          // Not measured: a proxy in service, not one back from the minute the other rows took (see WARM_UP_SEC).
          const warmUpSec = options.warmUpSec ?? WARM_UP_SEC;
          if (warmUpSec > 0) await blast(server.url, row, warmUpSec, specs.get(row.id)!);
          const before = server.cpuMs();
          const result = await blast(server.url, row, options.durationSec, specs.get(row.id)!, true);
          const cpuMs = server.cpuMs() - before;
          const ok = result['2xx'];
          const stretch: Stretch = {
            row: row.id,
            round,
            side,
            durationSec: result.duration,
            ok,
            failed: result.non2xx + result.errors + result.timeouts,
            requestsPerSec: ok / result.duration,
            latencyP50: result.latency.p50,
            latencyP99: result.latency.p99,
            cpuMsPerRequest: cpuMs / Math.max(1, ok),
          };
          stretches.push(stretch);
          log(
            `    round ${round} ${row.id} ${side}: ${Math.round(stretch.requestsPerSec)} req/s, p50 ${stretch.latencyP50} ms, p99 ${stretch.latencyP99} ms, ` +
              `${stretch.cpuMsPerRequest.toFixed(3)} CPU ms/req${stretch.failed ? `, ${stretch.failed} failed` : ''}`,
          );
        }
      }
      if (herdSetup) {
        const shot = await herdShot(herdSetup, options.herd, round);
        shots.push(shot);
        log(
          `    round ${round} herd of ${shot.requests}: slowest ${shot.gatewaySlowestMs.toFixed(0)} ms (direct ${shot.directSlowestMs.toFixed(0)} ms), ` +
            `${shot.gatewayCpuMsPerAnswer.toFixed(3)} CPU ms per answer (+${shot.backgroundCpuMsPerAnswer.toFixed(3)} background taken off; floor ${shot.floorCpuMsPerRequest.toFixed(3)} per proxied request), /health max ${shot.healthMaxMs.toFixed(1)} ms, ${shot.upstreamCalls} upstream call(s)${shot.failed ? `, ${shot.failed} failed (${shot.gatewayFailed} through the gateway)` : ''}` +
            (shot.nginxCpuMsPerAnswer === undefined
              ? ''
              : `; nginx ${shot.nginxCpuMsPerAnswer.toFixed(3)} CPU ms per answer, ${shot.nginxUpstreamCalls} upstream call(s)${shot.nginxFailed ? `, ${shot.nginxFailed} failed` : ''}`),
        );
      }
    }

    const summaries = rows.map((row) => ({
      ...summarise(row, stretches),
      providerRequestsPerSec: providerAlone.get(row.id) ?? Number.NaN,
    }));
    const herd = shots.length
      ? {
          requests: options.herd,
          shots,
          extraMsMedian: median(shots.map((s) => s.gatewaySlowestMs - s.directSlowestMs)),
          extraMsMin: Math.min(...shots.map((s) => s.gatewaySlowestMs - s.directSlowestMs)),
          ...herdVsNginx(shots),
          cpuMsPerAnswerMedian: median(shots.map((s) => s.gatewayCpuMsPerAnswer)),
          backgroundCpuMsPerAnswerMedian: median(shots.map((s) => s.backgroundCpuMsPerAnswer)),
          floorCpuMsPerRequest: median(shots.map((s) => s.floorCpuMsPerRequest)),
          healthMaxMs: Math.max(...shots.map((s) => s.healthMaxMs)),
        }
      : undefined;

    const profiles: ProfileSummary[] = [];
    if (options.profile) {
      // The small and 200 KB rows, or whichever of the profiled rows --only names.
      const named = ROWS.filter((r) => !r.subject && options.only.includes(r.id)).map((r) => r.id);
      for (const id of named.length ? named : ['small32', 'big']) {
        const row = ROWS.find((r) => r.id === id)!;
        profiles.push(
          await profileRow(
            row,
            row.provider ? baselines.providers[row.provider]!.url : mock.url,
            traces.url,
            options,
            log,
          ),
        );
      }
    }
    const limits = withLimits ? await runLimits(options, start, log) : undefined;
    const checks = [...checksOf(summaries, herd), ...nginxHerdChecks(herd)];
    return {
      options: {
        durationSec: options.durationSec,
        rounds: options.rounds,
        herd: options.herd,
        burners: options.burners ?? 0,
        warmUpSec: options.warmUpSec ?? WARM_UP_SEC,
        againstEntry: options.againstEntry,
      },
      stretches,
      rows: summaries,
      herd,
      profiles,
      limits,
      checks,
    };
  } finally {
    burners?.stop();
    await Promise.all(children.reverse().map((child) => child.stop()));
    await traces?.close();
  }
}

/** How the table says the machine was loaded: nothing, or the busy processes `--loaded` ran beside it. */
const loadedNote = (result: OverheadResult) =>
  (result.options.burners ? `; LOADED: ${result.options.burners} busy processes beside every row (--loaded)` : '') +
  (result.options.warmUpSec !== undefined && result.options.warmUpSec !== WARM_UP_SEC
    ? `; ${result.options.warmUpSec} s of load before each stretch`
    : '');

export interface LimitRun {
  label: string;
  requestsPerSec: number;
  latencyP50: number;
  latencyP99: number;
  failed: number;
}

const LIMIT_LATENCY_MS = 50;

/**
 * The default concurrency limit against a provider that takes 50 ms, at 200 connections of distinct requests: the
 * floor (no limit), the gateway at its defaults and at --concurrency 256, each for two stretches (the best of the two kept).
 */
async function runLimits(
  options: OverheadOptions,
  start: (child: Promise<ChildHandle>) => Promise<ChildHandle>,
  log: (line: string) => void,
): Promise<LimitRun[]> {
  const mock = await start(startMockProvider(LIMIT_LATENCY_MS));
  const targets: Array<[string, ChildHandle]> = [
    ['floor (no limit)', await start(startMinimalProxy(mock.url, 256))],
    ['gateway, default flags', await start(startGateway(mock.url, []))],
    ['gateway, --concurrency 256', await start(startGateway(mock.url, ['--concurrency', '256']))],
  ];
  const row = { ...ROWS[1], connections: 200 };
  const spec = requestSpec('small-distinct');
  const runs: LimitRun[] = [];
  for (const [label, child] of targets) {
    await blast(child.url, row, 1, spec);
    let best: LimitRun | undefined;
    for (let i = 0; i < 2; i++) {
      const result = await blast(child.url, row, options.durationSec, spec);
      const run = {
        label,
        requestsPerSec: result['2xx'] / result.duration,
        latencyP50: result.latency.p50,
        latencyP99: result.latency.p99,
        failed: result.non2xx + result.errors + result.timeouts,
      };
      if (!best || run.requestsPerSec > best.requestsPerSec) best = run;
    }
    runs.push(best!);
    log(
      `    limits ${label}: ${Math.round(best!.requestsPerSec)} req/s, p50 ${best!.latencyP50} ms, p99 ${best!.latencyP99} ms`,
    );
  }
  return runs;
}

function limitsMarkdown(limits: LimitRun[]): string {
  const floor = limits[0];
  return [
    `Distinct requests, 200 connections, provider latency ${LIMIT_LATENCY_MS} ms:`,
    '',
    '| | req/s | vs floor | p50 | p99 | failed |',
    '|---|---|---|---|---|---|',
    ...limits.map(
      (l) =>
        `| ${l.label} | ${Math.round(l.requestsPerSec)} | ${(l.requestsPerSec / floor.requestsPerSec).toFixed(2)}x | ${l.latencyP50} ms | ${l.latencyP99} ms | ${l.failed} |`,
    ),
  ].join('\n');
}

function summarise(row: LoadRow, stretches: Stretch[]): RowSummary {
  const mine = stretches.filter((s) => s.row === row.id);
  const rounds = [...new Set(mine.map((s) => s.round))];
  const side = (name: Side): SideSummary => {
    const list = mine.filter((s) => s.side === name);
    return {
      cpuMsPerRequest: median(list.map((s) => s.cpuMsPerRequest)),
      requestsPerSec: median(list.map((s) => s.requestsPerSec)),
      latencyP50: median(list.map((s) => s.latencyP50)),
      latencyP99: median(list.map((s) => s.latencyP99)),
      failed: list.reduce((sum, s) => sum + s.failed, 0),
    };
  };
  const floor = side('floor');
  const ratios: number[] = [];
  const disturbedRounds: number[] = [];
  for (const round of rounds) {
    const f = mine.find((s) => s.round === round && s.side === 'floor');
    const g = mine.find((s) => s.round === round && s.side === 'gateway');
    if (!f || !g) continue;
    ratios.push(g.cpuMsPerRequest / f.cpuMsPerRequest);
    if (Math.abs(f.cpuMsPerRequest / floor.cpuMsPerRequest - 1) > DISTURBED) disturbedRounds.push(round);
  }
  const abRatios: number[] = [];
  for (const round of rounds) {
    const g = mine.find((s) => s.round === round && s.side === 'gateway');
    const a = mine.find((s) => s.round === round && s.side === 'against');
    if (g && a) abRatios.push(g.cpuMsPerRequest / a.cpuMsPerRequest);
  }
  const ab = abRatios.length ? { against: side('against'), abRatios, abMedian: median(abRatios) } : {};
  return {
    id: row.id,
    label: row.label,
    limit: row.limit,
    ratios,
    ratioMedian: median(ratios),
    ratioMin: Math.min(...ratios),
    disturbedRounds,
    floor,
    gateway: side('gateway'),
    ...ab,
  };
}

interface HerdSetup {
  mock: ChildHandle;
  floor: ChildHandle;
  gateway: ChildHandle;
  /** nginx caching in front of the herd's provider (`proxy_cache_lock`), where it is installed. */
  nginx?: ChildHandle;
}

/**
 * `count` identical requests at once (a new prompt per shot), straight to a provider that takes HERD_LATENCY_MS,
 * over connections opened beforehand, through the floor proxy (every one proxied: its CPU per request is the yardstick), then
 * through the gateway: the slowest answer of direct and gateway, the gateway's CPU per answer, and how long GET /health
 * waits meanwhile (a herd must not freeze the event loop).
 */
async function herdShot(setup: HerdSetup, count: number, round: number): Promise<HerdShot> {
  const bodyOf = (what: string) =>
    JSON.stringify({
      model: BENCH_MODEL,
      messages: [{ role: 'user', content: `Herd ${run} round ${round}${what}: one answer for all.` }],
    });
  const body = bodyOf('');
  const fire = async (url: string, measured?: ChildHandle, beforeHerd?: () => Promise<number>) => {
    const pool = new Pool(url, { connections: count, pipelining: 1 });
    // Every connection opened first (not timed): 1000 connects at once overflow the listen backlog, and a dropped SYN
    // is retried a whole second later, which would be measured instead of the herd.
    await Promise.all(
      Array.from({ length: count }, async () => {
        const res = await pool
          .request({ path: '/health', method: 'GET', headersTimeout: 30_000, bodyTimeout: 30_000 })
          .catch(() => undefined);
        await res?.body.arrayBuffer();
      }),
    );
    let failed = 0;
    const herd = (bytes: string, t0: number) =>
      Promise.all(
        Array.from({ length: count }, async () => {
          try {
            const res = await pool.request({
              path: '/v1/chat/completions',
              method: 'POST',
              headers: HEADERS,
              body: bytes,
              headersTimeout: 30_000,
              bodyTimeout: 30_000,
            });
            await res.body.arrayBuffer();
            if (res.statusCode !== 200) failed++;
          } catch {
            failed++;
          }
          return performance.now() - t0;
        }),
      );
    // A proxy in service, not one back from a minute of idleness: both the floor and the gateway answer herds of
    // other prompts first, for WARM_UP_SEC (not measured). A process idle for the tens of seconds between rounds
    // answers its next seconds of load at up to several times its cost once busy, whatever it runs (the floor too).
    if (measured) {
      const until = performance.now() + WARM_UP_SEC * 1000;
      for (let shot = 0; shot === 0 || performance.now() < until; shot++)
        await herd(bodyOf(` warm-up ${shot}`), performance.now());
      failed = 0;
    }
    const background = (await beforeHerd?.()) ?? 0;
    const cpuBefore = measured?.cpuMs() ?? 0;
    const t0 = performance.now();
    const times = await herd(body, t0);
    const cpuMs = (measured?.cpuMs() ?? 0) - cpuBefore;
    const backgroundMs = background * (performance.now() - t0);
    await pool.close();
    return { slowest: Math.max(...times), failed, cpuMs, backgroundMs };
  };
  const direct = await fire(setup.mock.url);

  const floor = await fire(setup.floor.url, setup.floor);
  // Its upstream calls counted from the end of its warm-up herds (each of those makes its own call).
  let nginxCallsBefore = 0;
  const nginx = setup.nginx
    ? await fire(
        setup.nginx.url,
        setup.nginx,
        async () => ((nginxCallsBefore = await upstreamCalls(setup.mock.url)), 0),
      )
    : undefined;
  const nginxCalls = setup.nginx ? (await upstreamCalls(setup.mock.url)) - nginxCallsBefore : undefined;
  let callsBefore = 0;
  // The probe runs from its own process, starts a moment before the herd and outlasts it.
  let probe: Promise<string> | undefined;
  // Returns the gateway's background CPU (ms per ms) with the probe running: taken off the herd's CPU, which is
  // measured while the probe goes on (its /health answers, each through Nest, cost about as much CPU as the herd's
  // own answers).
  const startProbe = async () => {
    callsBefore = await upstreamCalls(setup.mock.url);
    probe = runNodeScript(
      ENTRY.healthProbe,
      ['--url', setup.gateway.url, '--every', '10', '--for', String(HERD_LATENCY_MS * 3 + 4_000)],
      { timeoutMs: 60_000 },
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    const from = setup.gateway.cpuMs();
    const t = performance.now();
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    return (setup.gateway.cpuMs() - from) / (performance.now() - t);
  };
  const gateway = await fire(setup.gateway.url, setup.gateway, startProbe);
  const healthMaxMs = (JSON.parse(await probe!) as { maxMs: number }).maxMs;
  return {
    round,
    requests: count,
    failed: gateway.failed + direct.failed + floor.failed,
    gatewayFailed: gateway.failed,
    floorCpuMsPerRequest: floor.cpuMs / count,
    directSlowestMs: direct.slowest,
    gatewaySlowestMs: gateway.slowest,
    gatewayCpuMsPerAnswer: Math.max(0, gateway.cpuMs - gateway.backgroundMs) / count,
    backgroundCpuMsPerAnswer: gateway.backgroundMs / count,
    healthMaxMs,
    upstreamCalls: (await upstreamCalls(setup.mock.url)) - callsBefore,
    ...(nginx
      ? { nginxCpuMsPerAnswer: nginx.cpuMs / count, nginxFailed: nginx.failed, nginxUpstreamCalls: nginxCalls }
      : {}),
  };
}

/**
 * The processes the rows' gateways are measured against, by `baselineOf`: the floor proxy in front of the fixed
 * provider; a provider of spaced streams and a floor proxy in front of it; nginx in front of the fixed provider.
 */
async function startBaselines(
  rows: readonly LoadRow[],
  mock: ChildHandle,
  floor: ChildHandle,
  nginx: string | undefined,
  start: (child: Promise<ChildHandle>) => Promise<ChildHandle>,
): Promise<{ servers: Record<string, ChildHandle>; providers: Partial<Record<'spaced', ChildHandle>> }> {
  const servers: Record<string, ChildHandle> = { floor };
  const providers: Partial<Record<'spaced', ChildHandle>> = {};
  if (rows.some((row) => row.provider === 'spaced')) {
    providers.spaced = await start(startMockProvider(0, SPACED_STREAM_FLAGS));
    servers['floor-spaced'] = await start(startMinimalProxy(providers.spaced.url, 256));
  }
  if (nginx && rows.some((row) => row.against === 'nginx')) servers.nginx = await start(startNginx(nginx, mock.url));
  return { servers, providers };
}

/** nginx in front of the herd's provider, or undefined (with a line saying so) where nginx is not installed. */
async function startHerdNginx(
  nginx: string | undefined,
  upstream: string,
  herd: number,
  start: (child: Promise<ChildHandle>) => Promise<ChildHandle>,
  log: (line: string) => void,
): Promise<ChildHandle | undefined> {
  if (!nginx) {
    log('  overhead: herd vs nginx skipped: no nginx on this machine (apt-get install -y nginx)');
    return undefined;
  }
  return start(startNginx(nginx, upstream, herd));
}

/** The herd's nginx figures over the rounds (none when nginx did not run). */
function herdVsNginx(shots: readonly HerdShot[]): Pick<HerdSummary, 'nginxCpuMsPerAnswerMedian' | 'vsNginxMedian'> {
  const withNginx = shots.filter((s) => s.nginxCpuMsPerAnswer !== undefined);
  if (withNginx.length === 0) return {};
  return {
    nginxCpuMsPerAnswerMedian: median(withNginx.map((s) => s.nginxCpuMsPerAnswer!)),
    vsNginxMedian: median(withNginx.map((s) => s.gatewayCpuMsPerAnswer / s.nginxCpuMsPerAnswer!)),
  };
}

function nginxHerdChecks(herd: HerdSummary | undefined): TargetCheck[] {
  if (herd?.vsNginxMedian === undefined) return [];
  return [
    {
      scenario: 'overhead',
      run: `herd of ${herd.requests}`,
      kind: 'timing',
      name: `CPU per joined answer <= ${HERD_VS_NGINX_LIMIT}x nginx's (proxy_cache_lock)`,
      target: `<= ${HERD_VS_NGINX_LIMIT.toFixed(2)}x`,
      actual: `${herd.vsNginxMedian.toFixed(2)}x (${ms(herd.cpuMsPerAnswerMedian)} vs ${ms(herd.nginxCpuMsPerAnswerMedian!)} ms)`,
      pass: herd.vsNginxMedian <= HERD_VS_NGINX_LIMIT,
      scaling: 'none',
    },
  ];
}

/** The herd's line comparing with nginx, for the Markdown table (empty when nginx did not run). */
function nginxHerdMarkdown(h: HerdSummary, before: HerdSummary | undefined, withBefore: boolean): string[] {
  if (h.vsNginxMedian === undefined) return [];
  const b = before?.vsNginxMedian;
  return [
    `| herd: CPU per joined answer vs nginx (proxy_cache_lock) | ${withBefore ? `${b === undefined ? '-' : `${b.toFixed(2)}x`} | ` : ''}${h.vsNginxMedian.toFixed(2)}x | ` +
      `${ms(h.cpuMsPerAnswerMedian)} (nginx ${ms(h.nginxCpuMsPerAnswerMedian!)}) | - | - | <= ${HERD_VS_NGINX_LIMIT}x | ${h.vsNginxMedian <= HERD_VS_NGINX_LIMIT ? 'met' : '**not met**'} | - |`,
  ];
}

/** Samples per second of CPU time perf takes (2 kHz: one every 0.5 ms of a thread's CPU). */
const PERF_HZ = 2000;
const PERF_WARM_UP_STRETCHES = 3;

/** A command's stdout (perf's output of a 10 s recording runs to some tens of MB). */
function stdoutOf(command: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) =>
    execFile(command, args, { maxBuffer: 1024 * 1024 * 1024 }, (error, stdout) =>
      // ExecFileException is an Error, spelt with Omit<>, which the rule does not see through.
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      error ? reject(error) : resolve(stdout),
    ),
  );
}

async function upstreamCalls(mockUrl: string): Promise<number> {
  const res = await request(`${mockUrl}/__mock/stats`);
  return ((await res.body.json()) as { total: number }).total;
}

/** A gateway loaded like the row for twice the stretch, profiled with --cpu-prof or (`perfProfile`) perf. */
function profileRow(
  row: LoadRow,
  upstream: string,
  traces: string,
  options: OverheadOptions,
  log: (line: string) => void,
): Promise<ProfileSummary> {
  return options.perfProfile
    ? perfProfileRow(row, upstream, traces, options, log)
    : cpuProfileRow(row, upstream, traces, options, log);
}

/**
 * The row's load on a gateway started with `--perf-basic-prof` (so that perf can name its JavaScript), recorded by
 * `perf record -e cpu-clock -g` over the measured stretch only: CPU time of every thread, the kernel's included.
 */
async function perfProfileRow(
  row: LoadRow,
  upstream: string,
  traces: string,
  options: OverheadOptions,
  log: (line: string) => void,
): Promise<ProfileSummary> {
  const data = join(options.out, `perf-${row.id}-${Date.now()}.data`);
  await mkdir(options.out, { recursive: true });
  const gateway = await startGateway(
    upstream,
    ['--platform', row.platform, ...flagsOf(row, traces)],
    ['--perf-basic-prof'],
  );
  const spec = requestSpec(row.body);
  let requests: number;
  try {
    try {
      // perf sees the optimising compiler's thread too: a new process compiles for its first ten seconds or so of
      // load, and again after the connections of its first loads close; three stretches of load let it settle.
      for (let stretch = 0; stretch < PERF_WARM_UP_STRETCHES; stretch++)
        await blast(gateway.url, row, Math.max(3, options.durationSec), spec);
      const seconds = options.durationSec * 2;
      const recording = spawn(
        'perf',
        [
          'record',
          '-q',
          '-e',
          'cpu-clock',
          '-F',
          String(PERF_HZ),
          '-g',
          '-o',
          data,
          '-p',
          String(gateway.pid),
          '--',
          'sleep',
          String(seconds),
        ],
        { stdio: 'ignore' },
      );
      const recorded = new Promise<number | null>((resolve, reject) =>
        recording.once('error', reject).once('close', resolve),
      );
      requests = (await blast(gateway.url, row, seconds, spec))['2xx'];
      const status = await recorded;
      if (status !== 0) throw new Error(`perf record exited with ${status}`);
    } finally {
      await gateway.stop();
    }
    // perf reads the map the gateway wrote (named after its pid) to name its JavaScript frames.
    const script = await stdoutOf('perf', ['script', '-i', data, '-F', 'period,ip,sym,dso']);
    const summary = perfByOwner(script, { requests, row: row.label });
    await writeFile(join(options.out, `profile-${row.id}.json`), JSON.stringify(summary, null, 1));
    log(`    perf profile ${row.id}: ${requests} requests, ${summary.sampledMs.toFixed(0)} ms of CPU sampled`);
    return summary;
  } finally {
    // Also when the recording failed: neither the data nor the map the gateway wrote is left behind.
    await rm(data, { force: true });
    await rm(`/tmp/perf-${gateway.pid}.map`, { force: true });
  }
}

/** A gateway started with --cpu-prof, loaded like the row for twice the stretch; samples outside the load are left out. */
async function cpuProfileRow(
  row: LoadRow,
  upstream: string,
  traces: string,
  options: OverheadOptions,
  log: (line: string) => void,
): Promise<ProfileSummary> {
  const dir = join(options.out, `profile-${row.id}-${Date.now()}`);
  await mkdir(dir, { recursive: true });
  const gateway = await startGateway(
    upstream,
    ['--platform', row.platform, ...flagsOf(row, traces)],
    ['--cpu-prof', '--cpu-prof-dir', dir],
  );
  const spec = requestSpec(row.body);
  let requests: number;
  let from: bigint;
  let to: bigint;
  try {
    await blast(gateway.url, row, Math.min(3, options.durationSec), spec);
    from = process.hrtime.bigint() / 1000n;
    const result = await blast(gateway.url, row, options.durationSec * 2, spec);
    to = process.hrtime.bigint() / 1000n;
    requests = result['2xx'];
  } finally {
    await gateway.stop();
  }
  const file = (await readdir(dir)).find((name) => name.endsWith('.cpuprofile'));
  if (!file) throw new Error(`no CPU profile written in ${dir}`);
  const summary = profileByOwner(JSON.parse(await readFile(join(dir, file), 'utf8')), {
    from: Number(from),
    to: Number(to),
    requests,
    row: row.label,
  });
  await writeFile(join(options.out, `profile-${row.id}.json`), JSON.stringify(summary, null, 1));
  await rm(dir, { recursive: true, force: true });
  log(`    profile ${row.id}: ${requests} requests, ${summary.sampledMs.toFixed(0)} ms sampled`);
  return summary;
}

function checksOf(rows: RowSummary[], herd: HerdSummary | undefined): TargetCheck[] {
  const targeted = rows.filter((row): row is RowSummary & { limit: number } => row.limit !== undefined);
  const checks: TargetCheck[] = targeted.map((row) => ({
    scenario: 'overhead',
    run: row.label,
    kind: 'timing',
    name: `CPU per request <= ${row.limit}x the floor`,
    target: `<= ${row.limit.toFixed(2)}x`,
    actual: `${row.ratioMedian.toFixed(2)}x (min ${row.ratioMin.toFixed(2)}x)`,
    pass: row.ratioMedian <= row.limit,
    scaling: 'none',
  }));
  if (herd) {
    const extra = herdExtraLimitMs(herd.requests);
    checks.push(
      {
        scenario: 'overhead',
        run: `herd of ${herd.requests}`,
        kind: 'count',
        name: 'one upstream call, every caller answered',
        target: '1 call, 0 failed',
        actual: `${herd.shots.map((s) => s.upstreamCalls).join('/')} call(s), ${herd.shots.reduce((n, s) => n + s.gatewayFailed, 0)} failed through the gateway`,
        pass: herd.shots.every((s) => s.upstreamCalls === 1 && s.gatewayFailed === 0),
        scaling: 'none',
      },
      {
        scenario: 'overhead',
        run: `herd of ${herd.requests}`,
        kind: 'timing',
        name: `slowest within ${extra} ms of direct`,
        target: `<= +${extra} ms`,
        actual: `${signed(herd.extraMsMedian)} ms`,
        pass: herd.extraMsMedian <= extra,
        scaling: 'none',
      },
      {
        scenario: 'overhead',
        run: `herd of ${herd.requests}`,
        kind: 'timing',
        name: `CPU per joined answer <= ${HERD_CPU_PER_ANSWER_MS} ms`,
        target: `<= ${HERD_CPU_PER_ANSWER_MS.toFixed(3)} ms (floor ${herd.floorCpuMsPerRequest.toFixed(3)} per proxied request)`,
        actual: `${herd.cpuMsPerAnswerMedian.toFixed(3)} ms`,
        pass: herd.cpuMsPerAnswerMedian <= HERD_CPU_PER_ANSWER_MS,
        scaling: 'none',
      },
    );
  }
  return checks;
}

const ms = (v: number) => (v < 1 ? v.toFixed(3) : v.toFixed(2));

const signed = (v: number) => `${v >= 0 ? '+' : ''}${v.toFixed(0)}`;

function herdExtraLimitMs(requests: number): number {
  return requests >= BIG_HERD ? BIG_HERD_EXTRA_LIMIT_MS : HERD_EXTRA_LIMIT_MS;
}

/** A row's target and whether it was met, as two Markdown cells (a reference row has neither). */
function targetCells(row: RowSummary): string {
  if (row.limit === undefined) return 'reference | -';
  return `<= ${row.limit}x | ${row.ratioMedian <= row.limit ? 'met' : '**not met**'}`;
}

/** The overhead table as Markdown, optionally with the median ratios of an earlier run (`before`) beside it. */
export function overheadMarkdown(result: OverheadResult, before?: OverheadResult): string {
  const beforeRow = (id: string) => before?.rows.find((r) => r.id === id);
  const header = [
    'work',
    ...(before ? ['before'] : []),
    'gateway / floor CPU per request: median (min)',
    'CPU ms/req gateway (floor)',
    'req/s gateway (floor) [provider alone]',
    'p50 / p99 ms gateway (floor)',
    'target',
    '',
    'disturbed rounds',
  ];
  const lines = [`| ${header.join(' | ')} |`, `|${header.map(() => '---').join('|')}|`];
  for (const row of result.rows) {
    const b = beforeRow(row.id);
    lines.push(
      `| ${row.label} | ${before ? `${b ? `${b.ratioMedian.toFixed(2)}x` : '-'} | ` : ''}${row.ratioMedian.toFixed(2)}x (${row.ratioMin.toFixed(2)}x) | ` +
        `${ms(row.gateway.cpuMsPerRequest)} (${ms(row.floor.cpuMsPerRequest)}) | ${Math.round(row.gateway.requestsPerSec)} (${Math.round(row.floor.requestsPerSec)})` +
        `${row.providerRequestsPerSec === undefined ? '' : ` [${Math.round(row.providerRequestsPerSec)}]`} | ` +
        `${row.gateway.latencyP50} / ${row.gateway.latencyP99} (${row.floor.latencyP50} / ${row.floor.latencyP99}) | ${targetCells(row)} | ${row.disturbedRounds.length ? row.disturbedRounds.join(', ') : '-'} |`,
    );
  }
  if (result.herd) {
    const h = result.herd;
    const b = before?.herd;
    lines.push(
      `| herd of ${h.requests} on one call: slowest vs direct | ${before ? `${b ? `${signed(b.extraMsMedian)} ms` : '-'} | ` : ''}${signed(h.extraMsMedian)} ms (${signed(h.extraMsMin)} ms) | ` +
        `- | - | /health max ${h.healthMaxMs.toFixed(1)} ms during the herd | <= +${herdExtraLimitMs(h.requests)} ms | ${h.extraMsMedian <= herdExtraLimitMs(h.requests) ? 'met' : '**not met**'} | - |`,
      `| herd: CPU per joined answer | ${before ? `${b ? `${ms(b.cpuMsPerAnswerMedian)} ms` : '-'} | ` : ''}${ms(h.cpuMsPerAnswerMedian)} ms | ${ms(h.cpuMsPerAnswerMedian)} (${ms(h.floorCpuMsPerRequest)} per proxied request; ${ms(h.backgroundCpuMsPerAnswerMedian)} of /health probes and timers taken off) | - | - | ` +
        `<= ${HERD_CPU_PER_ANSWER_MS} ms | ${h.cpuMsPerAnswerMedian <= HERD_CPU_PER_ANSWER_MS ? 'met' : '**not met**'} | - |`,
      ...nginxHerdMarkdown(h, b, before !== undefined),
    );
  }
  return lines.join('\n');
}

/** The table in plain text for the terminal. */
export function overheadTable(result: OverheadResult): string {
  const withAgainst = result.rows.some((row) => row.abMedian !== undefined);
  const rows = result.rows.map((row) => [
    row.label,
    `${row.ratioMedian.toFixed(2)}x`,
    `${row.ratioMin.toFixed(2)}x`,
    row.limit === undefined ? 'reference' : `<= ${row.limit}x`,
    ms(row.gateway.cpuMsPerRequest),
    ms(row.floor.cpuMsPerRequest),
    String(Math.round(row.gateway.requestsPerSec)),
    String(Math.round(row.floor.requestsPerSec)),
    row.providerRequestsPerSec === undefined ? '-' : String(Math.round(row.providerRequestsPerSec)),
    `${row.gateway.latencyP50}/${row.gateway.latencyP99}`,
    `${row.floor.latencyP50}/${row.floor.latencyP99}`,
    String(row.gateway.failed + row.floor.failed),
    row.disturbedRounds.join(',') || '-',
    ...(withAgainst
      ? [
          row.abMedian === undefined ? '-' : `${row.abMedian.toFixed(2)}x`,
          row.against ? ms(row.against.cpuMsPerRequest) : '-',
        ]
      : []),
  ]);
  const { durationSec, rounds } = result.options;
  const out = [
    `== overhead: ${rounds} interleaved rounds, ${durationSec} s per stretch; floor = node:http + undici Pool piping bytes (test/bench/minimal-proxy.ts)${loadedNote(result)}`,
    table(
      [
        'row',
        'ratio med',
        'min',
        'target',
        'gw CPU ms',
        'floor CPU ms',
        'gw req/s',
        'floor req/s',
        'provider alone req/s',
        'gw p50/p99',
        'floor p50/p99',
        'failed',
        'disturbed',
        ...(withAgainst ? ['A/B med', 'against CPU ms'] : []),
      ],
      rows,
    ),
    '   ratio: gateway CPU per request / floor CPU per request in the same round; a round is disturbed when the floor strays > 25% from its median.',
    ...(withAgainst
      ? [
          `   A/B: this build's CPU per request / the --against build's (${result.options.againstEntry}) in the same round.`,
        ]
      : []),
  ];
  if (result.herd) {
    const h = result.herd;
    out.push(
      `   herd of ${h.requests}: slowest ${signed(h.extraMsMedian)} ms vs direct (min ${signed(h.extraMsMin)}), ${ms(h.cpuMsPerAnswerMedian)} CPU ms per answer ` +
        `(floor ${ms(h.floorCpuMsPerRequest)} per proxied request), /health max ${h.healthMaxMs.toFixed(1)} ms during the herd`,
    );
    if (h.vsNginxMedian !== undefined)
      out.push(
        `   herd vs nginx (proxy_cache_lock): ${h.vsNginxMedian.toFixed(2)}x nginx's CPU per answer (nginx ${ms(h.nginxCpuMsPerAnswerMedian!)} ms)`,
      );
  }
  if (result.limits) out.push('', limitsMarkdown(result.limits));
  for (const profile of result.profiles) out.push('', profileTable(profile));
  return out.join('\n');
}

const START = '<!-- overhead-table:start -->';
const END = '<!-- overhead-table:end -->';

/**
 * Writes the table into docs/benchmarks.md between its markers, and the run's profile summaries (if it took any) to a
 * dated file under docs/benchmarks/ that the table links to: the page keeps the current figures only.
 * Returns the files written.
 */
export async function writeOverheadDocs(
  result: OverheadResult,
  before: OverheadResult | undefined,
  command: string,
): Promise<string[]> {
  const file = join(repoRoot(), 'docs', 'benchmarks.md');
  const text = await readFile(file, 'utf8');
  const from = text.indexOf(START);
  const to = text.indexOf(END);
  if (from < 0 || to < from) throw new Error(`docs/benchmarks.md has no ${START} ... ${END} markers`);
  const date = new Date().toISOString().slice(0, 10);
  const generated = `Generated by \`${command}\` (${result.options.rounds} rounds, ${result.options.durationSec} s per stretch, ${date}${loadedNote(result)})`;
  const written: string[] = [];
  let profilesNote: string[] = [];
  if (result.profiles.length) {
    const profiles = await writeOverheadProfiles(result, `${generated}.`, date);
    written.push(profiles);
    profilesNote = ['', `CPU profiles of this run: [${basename(profiles)}](benchmarks/${basename(profiles)}).`];
  }
  const block = [
    START,
    `${generated}.`,
    '',
    overheadMarkdown(result, before),
    ...(result.limits ? ['', limitsMarkdown(result.limits)] : []),
    ...profilesNote,
    END,
  ].join('\n');
  await writeFile(file, text.slice(0, from) + block + text.slice(to + END.length));
  written.push(file);
  return written;
}

/** Writes a run's profile summaries to docs/benchmarks/DATE-overhead-profiles.md (numbered when that is taken). */
async function writeOverheadProfiles(result: OverheadResult, generated: string, date: string): Promise<string> {
  const dir = join(repoRoot(), 'docs', 'benchmarks');
  await mkdir(dir, { recursive: true });
  const taken = new Set(await readdir(dir));
  let name = `${date}-overhead-profiles.md`;
  for (let n = 2; taken.has(name); n++) name = `${date}-overhead-profiles-${n}.md`;
  const file = join(dir, name);
  const text = [
    `# CPU profiles of the overhead bench, ${date}`,
    '',
    `${generated} The table of the same run is in [the benchmarks page](../benchmarks.md).`,
    ...result.profiles.flatMap((p) => ['', '```', profileTable(p), '```']),
    '',
  ].join('\n');
  await writeFile(file, text);
  return file;
}
