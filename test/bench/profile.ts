import { table } from './report.js';

/** The parts of a V8 `.cpuprofile` (as `node --cpu-prof` writes it) the summary reads. */
export interface CpuProfile {
  nodes: Array<{
    id: number;
    callFrame: { functionName: string; url: string; lineNumber: number };
    children?: number[];
  }>;
  /** Microseconds, on the same monotonic clock as `process.hrtime`. */
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export const OWNERS = [
  'gc',
  'compiler',
  'kernel',
  'node',
  'writev',
  'fastify',
  'express',
  '@nestjs',
  'rxjs',
  'plugin',
  'gateway',
  'undici',
  'other libs',
  'program',
] as const;
export type Owner = (typeof OWNERS)[number];

export interface ProfileSummary {
  row: string;
  /** `cpu-prof`: V8's sampler, wall time of the main thread; `perf`: `perf record`, CPU time of every thread. */
  source: 'cpu-prof' | 'perf';
  requests: number;
  sampledMs: number;
  /** Self time per request, in microseconds, by who owns the code. */
  usPerRequest: Record<Owner, number>;
  /** The functions with the most self time, per request. */
  top: Array<{ owner: Owner; fn: string; where: string; usPerRequest: number }>;
}

const FASTIFY =
  /\/node_modules\/(fastify|@fastify|find-my-way|avvio|light-my-request|fast-json-stringify|fast-querystring|secure-json-parse|fast-content-type-parse|process-warning|toad-cache|abstract-logging|pino|rfdc|fast-decode-uri-component)\//;
const EXPRESS =
  /\/node_modules\/(express|body-parser|router|raw-body|on-finished|finalhandler|send|serve-static|type-is|content-type|iconv-lite|qs|debug|accepts|negotiator|mime-types|parseurl|path-to-regexp)\//;

/** Who owns a frame: node internals, a framework, the plugin, the gateway, undici or another library. */
export function ownerOf(functionName: string, url: string): Owner {
  if (functionName === '(garbage collector)') return 'gc';
  if (functionName === '(program)') return 'program';
  // Sampled time is wall time: a write that wakes the reader (on loopback, the provider or the client) is where this
  // process loses its core, so this frame also collects time spent waiting for one. Kept apart for that reason.
  if (functionName === 'writev' || functionName === 'writeBuffer' || functionName === 'writeUtf8String')
    return 'writev';
  if (!url || url.startsWith('node:')) return 'node';
  if (FASTIFY.test(url)) return 'fastify';
  if (EXPRESS.test(url)) return 'express';
  if (url.includes('/node_modules/@nestjs/')) return '@nestjs';
  if (url.includes('/node_modules/rxjs/')) return 'rxjs';
  if (url.includes('/node_modules/undici/')) return 'undici';
  if (url.includes('/libs/orchestrator/') || url.includes('/node_modules/nest-prompt-orchestrator/')) return 'plugin';
  if (url.includes('/apps/gateway/')) return 'gateway';
  return 'other libs';
}

/** Self time by owner over the samples taken between `from` and `to` (µs, hrtime clock; all samples when none fall there). */
export function profileByOwner(
  profile: CpuProfile,
  window: { from: number; to: number; requests: number; row: string },
): ProfileSummary {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const selfUs = new Map<number, number>();
  let t = profile.startTime;
  let inside = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i] ?? 0;
    // The sample's time is charged to the node seen at that tick; idle time is no one's.
    const delta = profile.timeDeltas[i + 1] ?? 0;
    if (t < window.from || t > window.to) continue;
    inside++;
    selfUs.set(profile.samples[i], (selfUs.get(profile.samples[i]) ?? 0) + delta);
  }
  if (inside === 0) {
    for (let i = 0; i < profile.samples.length; i++)
      selfUs.set(profile.samples[i], (selfUs.get(profile.samples[i]) ?? 0) + (profile.timeDeltas[i + 1] ?? 0));
  }
  const tally = new OwnerTally();
  for (const [id, us] of selfUs) {
    const node = byId.get(id);
    if (!node || node.callFrame.functionName === '(idle)') continue;
    const { functionName, url, lineNumber } = node.callFrame;
    const where = url ? `${shortPath(url)}:${lineNumber + 1}` : '';
    tally.charge({ owner: ownerOf(functionName, url), fn: functionName || '(anonymous)', where }, us);
  }
  return tally.summary(window, 'cpu-prof');
}

/** A script's path from the repository's `node_modules/`, `libs/` or `dist/` on (a file URL or a plain path). */
function shortPath(url: string): string {
  return url.replace(/^(file:\/\/)?\/.*?\/(node_modules|libs|dist)\//, '$2/');
}

/** Self time summed by owner and by function, then given per request. */
class OwnerTally {
  private readonly byOwner = Object.fromEntries(OWNERS.map((o) => [o, 0])) as Record<Owner, number>;
  private readonly functions = new Map<string, { owner: Owner; fn: string; where: string; us: number }>();
  private sampled = 0;

  charge(charged: { owner: Owner; fn: string; where: string }, us: number): void {
    this.byOwner[charged.owner] += us;
    this.sampled += us;
    const name = `${charged.fn} ${charged.where}`;
    const entry = this.functions.get(name) ?? { ...charged, us: 0 };
    entry.us += us;
    this.functions.set(name, entry);
  }

  summary(window: { requests: number; row: string }, source: ProfileSummary['source']): ProfileSummary {
    const requests = Math.max(1, window.requests);
    const usPerRequest = Object.fromEntries(OWNERS.map((o) => [o, this.byOwner[o] / requests])) as Record<
      Owner,
      number
    >;
    const top = [...this.functions.values()]
      .sort((a, b) => b.us - a.us)
      .slice(0, 60)
      .map((f) => ({ owner: f.owner, fn: f.fn, where: f.where, usPerRequest: f.us / requests }));
    return { row: window.row, requests: window.requests, source, sampledMs: this.sampled / 1000, usPerRequest, top };
  }
}

const GC_FRAME =
  /v8::internal::(Scavenger|ScavengerCollector|MarkCompactCollector|MinorMarkCompactCollector|ConcurrentMarking|Sweeper|Heap::|ArrayBufferSweeper|Evacuat|MarkingVisitor|IncrementalMarking)/;
const COMPILER_FRAME = /v8::internal::(OptimizingCompileDispatcher|compiler::|maglev::|Compiler::)/;
// A frame of `perf script -F period,ip,sym,dso`: address, symbol, (dso). JavaScript frames are named by the map
// `node --perf-basic-prof` writes: `JS:*name url:line:column`, the prefix saying how the function is compiled.
const PERF_FRAME = /^\s*[0-9a-f]+ (.*) \((.*)\)$/;
const JS_SYMBOL = /^JS:[*^~+]?(.*?) ?(\S+):(\d+):\d+$/;

/**
 * Self CPU time by owner from `perf record -g` of a gateway started with `--perf-basic-prof`, as `perf script -F
 * period,ip,sym,dso` prints it. Unlike V8's sampler this counts CPU time only (a thread waiting for a core is not
 * sampled) and every thread: the collector's helpers, the optimising compiler and the kernel's share (system calls,
 * the loopback network stack). A sample in the collector or the compiler is theirs; one in the kernel is the
 * kernel's; one in V8's builtins or native code is charged to the JavaScript function that called it. The top
 * functions name, for kernel samples, the function whose system call it was.
 */
export function perfByOwner(script: string, window: { requests: number; row: string }): ProfileSummary {
  const tally = new OwnerTally();
  for (const block of script.split(/\n\s*\n/)) {
    const lines = block.split('\n').filter((line) => line.trim() !== '');
    const period = Number(lines[0]?.trim());
    if (!Number.isFinite(period) || period <= 0) continue;
    const frames = lines.slice(1).flatMap((line) => {
      const match = PERF_FRAME.exec(line);
      return match ? [{ symbol: match[1], dso: match[2] }] : [];
    });
    if (frames.length === 0) continue;
    const us = period / 1000;
    const js = frames.find((frame) => frame.symbol.startsWith('JS:'));
    // The only WebAssembly in a gateway is undici's HTTP parser.
    const wasm = js !== undefined && js.symbol.startsWith('JS:wasm');
    const parsed = js && !wasm ? JS_SYMBOL.exec(js.symbol) : undefined;
    const fn = parsed ? parsed[1] || '(anonymous)' : wasm ? '(llhttp, wasm)' : '(native)';
    const where = parsed ? `${shortPath(parsed[2])}:${parsed[3]}` : '';
    // Native code with no JavaScript above it is named by its first frame outside the kernel (the event loop's own).
    const native = frames.find((frame) => frame.dso !== '[kernel.kallsyms]')?.symbol.slice(0, 80) ?? '?';
    let charged: { owner: Owner; fn: string; where: string };
    if (frames.some((frame) => GC_FRAME.test(frame.symbol)))
      charged = { owner: 'gc', fn: '(garbage collector)', where: '' };
    else if (frames.some((frame) => COMPILER_FRAME.test(frame.symbol)))
      charged = { owner: 'compiler', fn: '(optimising compiler)', where: '' };
    else if (frames[0].dso === '[kernel.kallsyms]')
      charged = { owner: 'kernel', fn: `(kernel) ${js ? fn : native}`, where };
    else if (wasm) charged = { owner: 'undici', fn, where: '' };
    else if (parsed) {
      const owner = ownerOf(fn, parsed[2]);
      // (`writev` as an owner is the V8 sampler's wall time in socket writes; here their CPU is the kernel's.)
      charged = { owner: owner === 'writev' ? 'node' : owner, fn, where };
    } else charged = { owner: 'node', fn: `(native) ${native}`, where: '' };
    tally.charge(charged, us);
  }
  return tally.summary(window, 'perf');
}

export function profileTable(summary: ProfileSummary): string {
  const total = OWNERS.reduce((sum, o) => sum + summary.usPerRequest[o], 0);
  const owners = OWNERS.filter((o) => summary.usPerRequest[o] > 0).map((o) => [
    o,
    summary.usPerRequest[o].toFixed(1),
    `${((summary.usPerRequest[o] / Math.max(1e-9, total)) * 100).toFixed(0)}%`,
  ]);
  return [
    `== CPU profile of the gateway, ${summary.row}: self time per request by owner (${summary.requests} requests, ${summary.sampledMs.toFixed(0)} ms sampled;` +
      (summary.source === 'perf'
        ? ' perf: CPU time of every thread; kernel = system calls and the network stack, named by the function that made them)'
        : ' writev = socket writes, including time waiting for a core)'),
    table(['owner', 'us/request', 'share'], [...owners, ['total', total.toFixed(1), '100%']]),
    '   top functions (self time):',
    table(
      ['function', 'owner', 'us/request'],
      summary.top.slice(0, 40).map((f) => [`${f.fn} ${f.where}`.slice(0, 110), f.owner, f.usPerRequest.toFixed(1)]),
    ),
  ].join('\n');
}
