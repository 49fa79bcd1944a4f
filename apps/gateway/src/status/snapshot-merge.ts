import type { FlightSnapshot } from 'nest-prompt-orchestrator/core';
import type { ErrorCause } from './error-causes.js';
import type { HourHistory } from './hour-history.js';
import type { SpendRow } from './spend-table.js';

// The board's outcome names and row limits, shared so a merged snapshot keeps the shape and the caps of one.
export const OUTCOMES = ['miss', 'joined', 'cached', 'none'] as const;
export const MAX_ERRORS = 20;
/** Rows of the spend tables and calls in flight a snapshot carries. */
export const TOP_ROWS = 10;

type Outcome = (typeof OUTCOMES)[number];

/**
 * What `mergeSnapshots` adds up of a board's snapshot, spelled out here so this file need not import the board
 * (which calls it); every other field is the answering worker's.
 */
export interface MergeableSnapshot {
  startedAt: number;
  upstreams: Array<{ name: string; limiter?: { inFlight: number; queued: number; limit: number; queueSize: number } }>;
  totals: Record<Outcome, number>;
  history: Array<{ at: number } & Record<Outcome, number>>;
  upstreamCalls: Record<string, number>;
  saved: { calls: number; tokens: number; dollars: number; priced: boolean };
  spent: Record<string, number>;
  refusals: Record<string, number>;
  tenants: Array<{ tenant: string; requests: number }>;
  errors: Array<{ at: number }>;
  causes: ErrorCause[];
  callersWaiting: number;
  flights: FlightSnapshot[];
  hour: ReturnType<HourHistory['summary']>;
  spendByModel: SpendRow[];
  spendByKey: SpendRow[];
  window: { entries: number; bytes: number; maxBytes: number };
}

/** A worker's state in the merged snapshot: answered, or silent past the wait. */
export type WorkerState = { pid: number; state: 'ok' | 'silent' };

/**
 * Every worker's board as one: counts are summed (history second by second,
 * newest aligned), tenants and errors merged; breaker states and timelines
 * are the answering worker's (the workers share their breaker).
 */
export function mergeSnapshots<S extends MergeableSnapshot>(
  local: S,
  parts: Array<{ pid: number; data: S }>,
  silent: number[],
): S & { workers: WorkerState[] } {
  const boards = parts.map((p) => p.data);
  const sum = <K extends string>(read: (board: S) => Record<K, number>): Record<K, number> => {
    const total = { ...read(local) };
    for (const key of Object.keys(total) as K[])
      total[key] = boards.reduce<number>((n, board) => n + (read(board)[key] ?? 0), 0);
    return total;
  };
  const length = Math.max(0, ...boards.map((b) => b.history.length));
  const history = Array.from({ length }, (_, i) => {
    const second = { at: 0, miss: 0, joined: 0, cached: 0, none: 0 };
    for (const board of boards) {
      const entry = board.history[board.history.length - length + i];
      if (!entry) continue;
      second.at = Math.max(second.at, entry.at);
      for (const outcome of OUTCOMES) second[outcome] += entry[outcome];
    }
    return second;
  });
  const tenants = new Map<string, number>();
  for (const board of boards)
    for (const { tenant, requests } of board.tenants) tenants.set(tenant, (tenants.get(tenant) ?? 0) + requests);
  const upstreams = local.upstreams.map((upstream) => {
    const limiters = boards
      .map((b) => b.upstreams.find((u) => u.name === upstream.name)?.limiter)
      .filter((l) => l !== undefined);
    const limiter = upstream.limiter && {
      inFlight: limiters.reduce((n, l) => n + l.inFlight, 0),
      queued: limiters.reduce((n, l) => n + l.queued, 0),
      limit: limiters.reduce((n, l) => n + l.limit, 0),
      queueSize: limiters.reduce((n, l) => n + l.queueSize, 0),
    };
    return { ...upstream, limiter };
  });
  return {
    ...local,
    startedAt: Math.min(local.startedAt, ...boards.map((b) => b.startedAt)),
    upstreams,
    totals: sum((b) => b.totals),
    history,
    upstreamCalls: sum((b) => b.upstreamCalls),
    saved: {
      calls: boards.reduce((n, b) => n + b.saved.calls, 0),
      tokens: boards.reduce((n, b) => n + b.saved.tokens, 0),
      dollars: boards.reduce((n, b) => n + b.saved.dollars, 0),
      priced: boards.some((b) => b.saved.priced),
    },
    spent: sum((b) => b.spent),
    refusals: sum((b) => b.refusals),
    tenants: [...tenants.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 10)
      .map(([tenant, requests]) => ({ tenant, requests })),
    errors: boards
      .flatMap((b) => b.errors)
      .sort((a, b) => b.at - a.at)
      .slice(0, MAX_ERRORS),
    causes: mergeCauses(boards.map((b) => b.causes)),
    callersWaiting: boards.reduce((n, b) => n + b.callersWaiting, 0),
    flights: mergeFlights(boards.map((b) => b.flights)),
    hour: mergeHours(boards.map((b) => b.hour)),
    spendByModel: mergeSpend(boards.map((b) => b.spendByModel)),
    spendByKey: mergeSpend(boards.map((b) => b.spendByKey)),
    window: {
      ...local.window,
      entries: boards.reduce((n, b) => n + b.window.entries, 0),
      bytes: boards.reduce((n, b) => n + b.window.bytes, 0),
      maxBytes: boards.reduce((n, b) => n + b.window.maxBytes, 0),
    },
    workers: [
      ...parts.map(({ pid }) => ({ pid, state: 'ok' as const })),
      ...silent.map((pid) => ({ pid, state: 'silent' as const })),
    ].sort((a, b) => a.pid - b.pid),
  };
}

/** The workers' calls in flight: the same call (the same key) on two workers is one call with both workers' callers. */
function mergeFlights(lists: MergeableSnapshot['flights'][]): MergeableSnapshot['flights'] {
  const byKey = new Map<string, MergeableSnapshot['flights'][number]>();
  for (const flight of lists.flat()) {
    const seen = byKey.get(flight.key);
    byKey.set(
      flight.key,
      seen
        ? { ...seen, callers: seen.callers + flight.callers, ageMs: Math.max(seen.ageMs, flight.ageMs) }
        : { ...flight },
    );
  }
  return [...byKey.values()].sort((a, b) => b.callers - a.callers).slice(0, TOP_ROWS);
}

function mergeCauses(lists: MergeableSnapshot['causes'][]): MergeableSnapshot['causes'] {
  const byCause = new Map<string, MergeableSnapshot['causes'][number]>();
  for (const cause of lists.flat()) {
    const id = `${cause.cause}\n${cause.status}\n${cause.route}`;
    const seen = byCause.get(id);
    if (!seen) byCause.set(id, { ...cause });
    else {
      seen.count += cause.count;
      seen.firstAt = Math.min(seen.firstAt, cause.firstAt);
      if (cause.lastAt > seen.lastAt) Object.assign(seen, { lastAt: cause.lastAt, lastRequestId: cause.lastRequestId });
    }
  }
  return [...byCause.values()].sort((a, b) => b.lastAt - a.lastAt).slice(0, MAX_ERRORS);
}

function mergeSpend(lists: SpendRow[][]): SpendRow[] {
  const byName = new Map<string, SpendRow>();
  for (const row of lists.flat()) {
    const seen = byName.get(row.name);
    if (!seen) byName.set(row.name, { ...row });
    else
      for (const k of ['requests', 'spentTokens', 'spentDollars', 'savedTokens', 'savedDollars', 'savedCalls'] as const)
        seen[k] += row[k];
  }
  return [...byName.values()]
    .sort((a, b) => b.spentDollars + b.savedDollars - (a.spentDollars + a.savedDollars) || b.requests - a.requests)
    .slice(0, TOP_ROWS);
}

/**
 * The workers' last hours, minute by minute: counts are summed; a minute's
 * percentiles are the slowest worker's (an upper bound: the histograms stay in
 * each worker).
 */
function mergeHours(hours: MergeableSnapshot['hour'][]): MergeableSnapshot['hour'] {
  const byMinute = new Map<number, MergeableSnapshot['hour']['minutes'][number]>();
  for (const minute of hours.flatMap((h) => h.minutes)) {
    const seen = byMinute.get(minute.at);
    if (!seen) {
      byMinute.set(minute.at, { ...minute });
      continue;
    }
    for (const k of ['requests', 'errors', 'miss', 'joined', 'cached', 'none', 'unrouted'] as const)
      seen[k] += minute[k];
    for (const k of ['p50', 'p95', 'p99'] as const) seen[k] = Math.max(seen[k] ?? 0, minute[k] ?? 0);
  }
  const outcomes = { miss: 0, joined: 0, cached: 0, none: 0, unrouted: 0 };
  for (const h of hours)
    for (const k of Object.keys(outcomes) as Array<keyof typeof outcomes>) outcomes[k] += h.hour.outcomes[k];
  const slowest = (k: 'p50' | 'p95' | 'p99') => Math.max(0, ...hours.map((h) => h.hour.latencyMs?.[k] ?? 0));
  const requests = hours.reduce((n, h) => n + h.hour.requests, 0);
  return {
    minutes: [...byMinute.values()].sort((a, b) => a.at - b.at),
    hour: {
      requests,
      errors: hours.reduce((n, h) => n + h.hour.errors, 0),
      outcomes,
      latencyMs: requests === 0 ? null : { p50: slowest('p50'), p95: slowest('p95'), p99: slowest('p99') },
    },
  };
}
