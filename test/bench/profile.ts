import { table } from './report.js';

/** The parts of a V8 `.cpuprofile` (as `node --cpu-prof` writes it) the summary reads. */
export interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }>;
  /** Microseconds, on the same monotonic clock as `process.hrtime`. */
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export const OWNERS = ['gc', 'node', 'writev', 'fastify', 'express', '@nestjs', 'rxjs', 'plugin', 'gateway', 'undici', 'other libs', 'program'] as const;
export type Owner = (typeof OWNERS)[number];

export interface ProfileSummary {
  row: string;
  requests: number;
  sampledMs: number;
  /** Self time per request, in microseconds, by who owns the code. */
  usPerRequest: Record<Owner, number>;
  /** The functions with the most self time, per request. */
  top: Array<{ owner: Owner; fn: string; where: string; usPerRequest: number }>;
}

const FASTIFY = /\/node_modules\/(fastify|@fastify|find-my-way|avvio|light-my-request|fast-json-stringify|fast-querystring|secure-json-parse|fast-content-type-parse|process-warning|toad-cache|abstract-logging|pino|rfdc|fast-decode-uri-component)\//;
const EXPRESS = /\/node_modules\/(express|body-parser|router|raw-body|on-finished|finalhandler|send|serve-static|type-is|content-type|iconv-lite|qs|debug|accepts|negotiator|mime-types|parseurl|path-to-regexp)\//;

/** Who owns a frame: node internals, a framework, the plugin, the gateway, undici or another library. */
export function ownerOf(functionName: string, url: string): Owner {
  if (functionName === '(garbage collector)') return 'gc';
  if (functionName === '(program)') return 'program';
  // Sampled time is wall time: a write that wakes the reader (on loopback, the provider or the client) is where this
  // process loses its core, so this frame also collects time spent waiting for one. Kept apart for that reason.
  if (functionName === 'writev' || functionName === 'writeBuffer' || functionName === 'writeUtf8String') return 'writev';
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
export function profileByOwner(profile: CpuProfile, window: { from: number; to: number; requests: number; row: string }): ProfileSummary {
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
    for (let i = 0; i < profile.samples.length; i++) selfUs.set(profile.samples[i], (selfUs.get(profile.samples[i]) ?? 0) + (profile.timeDeltas[i + 1] ?? 0));
  }
  const usPerRequest = Object.fromEntries(OWNERS.map((o) => [o, 0])) as Record<Owner, number>;
  const functions = new Map<string, { owner: Owner; fn: string; where: string; us: number }>();
  let sampled = 0;
  const requests = Math.max(1, window.requests);
  for (const [id, us] of selfUs) {
    const node = byId.get(id);
    if (!node || node.callFrame.functionName === '(idle)') continue;
    const { functionName, url, lineNumber } = node.callFrame;
    const owner = ownerOf(functionName, url);
    usPerRequest[owner] += us / requests;
    sampled += us;
    const where = url ? `${url.replace(/^file:\/\/.*?\/(node_modules|libs|dist)\//, '$1/')}:${lineNumber + 1}` : '';
    const name = `${functionName || '(anonymous)'} ${where}`;
    const entry = functions.get(name) ?? { owner, fn: functionName || '(anonymous)', where, us: 0 };
    entry.us += us;
    functions.set(name, entry);
  }
  const top = [...functions.values()]
    .sort((a, b) => b.us - a.us)
    .slice(0, 60)
    .map((f) => ({ owner: f.owner, fn: f.fn, where: f.where, usPerRequest: f.us / requests }));
  return { row: window.row, requests: window.requests, sampledMs: sampled / 1000, usPerRequest, top };
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
      ' writev = socket writes, including time waiting for a core)',
    table(['owner', 'us/request', 'share'], [...owners, ['total', total.toFixed(1), '100%']]),
    '   top functions (self time):',
    table(
      ['function', 'owner', 'us/request'],
      summary.top.slice(0, 40).map((f) => [`${f.fn} ${f.where}`.slice(0, 110), f.owner, f.usPerRequest.toFixed(1)]),
    ),
  ].join('\n');
}
