import cluster from 'node:cluster';
import { ipcRelay } from 'nest-prompt-orchestrator/low-level';
import type { SharedBreakerState } from 'nest-prompt-orchestrator/core';
import { AggregatorRegistry, Gauge } from 'prom-client';
import { capPortLabels } from '../common/label-bounds.js';
import {
  isGatewayMessage,
  type Gathered,
  type GatherReply,
  type ToPrimary,
  type ToWorker,
  type WorkerAsk,
} from './messages.js';

export interface PrimaryHubOptions {
  /** Events one flight may keep for workers that join it late; past this the flight is not joined any more. Default 32 MiB. */
  maxFlightBytes?: number;
  /** How long the prober's claim lasts without a probe renewing it. Default 5 000 ms. */
  proberLeaseMs?: number;
  /**
   * Longest a gathering waits for each worker's part, by what is gathered. Default 3 000 ms for a scrape (well
   * within Prometheus's 10 s), 1 000 ms for /health and the status page: a probe must not wait on a busy worker.
   */
  gatherTimeoutMs?: Partial<Record<Gathered, number>>;
  log?: (line: string) => void;
}

/** A worker as the hub uses it (node:cluster's `Worker` is one). */
export interface HubWorker {
  readonly id: number;
  readonly process: { readonly pid?: number };
  isConnected(): boolean;
  send(message: ToWorker, sendHandle: undefined, callback: (error: Error | null) => void): boolean;
}
type Worker = HubWorker;

interface Gathering {
  what: Gathered;
  asker: Worker;
  c: number;
  waiting: Map<number, number>;
  parts: Array<{ pid: number; data: unknown }>;
  timer: ReturnType<typeof setTimeout>;
}

// With a worker's share of a scrape, gauges whose sum would mean nothing: the port's breaker is as open as its most
// open worker's, and its store is up only if every worker reaches it.
const METRIC_AGGREGATORS: Record<string, 'max' | 'min'> = {
  orchestrator_breaker_state: 'max',
  orchestrator_breaker_consecutive_failures: 'max',
  orchestrator_store_up: 'min',
  // The port is one fleet only while every worker coordinates.
  gateway_redis_coordination_up: 'min',
  gateway_redis_keys_evictable: 'max',
};

/**
 * The primary's side of `--workers N`: what makes the workers one gateway.
 * It holds the relay of calls between the workers (the library's
 * `ipcRelay.IpcRelayHub`: one call per key, its events for workers that join
 * late, bounded by `maxFlightBytes`), the port's breaker state (failures
 * counted across workers, openings and closings told to all, one prober), and
 * gathers metrics, health and status figures from every worker for the one
 * that was asked.
 */
export class PrimaryHub {
  private readonly proberLeaseMs: number;
  private readonly gatherTimeoutMs: Record<Gathered, number>;
  private readonly log: (line: string) => void;
  private gatherSeq = 0;
  private readonly relay: ipcRelay.IpcRelayHub<Worker>;
  private readonly failures = new Map<string, { n: number; at: number }>();
  private readonly breakers = new Map<string, { state: SharedBreakerState; until: number }>();
  private readonly probers = new Map<string, { worker: number; until: number }>();
  private readonly gatherings = new Map<number, Gathering>();
  /** Workers that serve (they have listened): the ones asked for figures. */
  private readonly serving = new Map<number, Worker>();
  /** Workers that have spoken or listened: the ones told of breaker changes. */
  private readonly known = new Map<number, Worker>();
  /** Each live worker's counters as it last reported them in a scrape (a silent worker's stand in for it). */
  private readonly lastCounters = new Map<number, MetricList>();
  /**
   * The last counters of workers that have exited, merged into one list: a counter never goes down on the port
   * because a worker died (its replacement counts from zero on top of them).
   */
  private departed: MetricList = [];
  private merging: Promise<void> = Promise.resolve();

  constructor(options: PrimaryHubOptions = {}) {
    const maxFlightBytes = options.maxFlightBytes ?? 32 * 1024 * 1024;
    this.proberLeaseMs = options.proberLeaseMs ?? 5_000;
    this.gatherTimeoutMs = { metrics: 3_000, health: 1_000, status: 1_000, ...options.gatherTimeoutMs };
    this.log = options.log ?? ((line) => console.error(line));
    this.relay = new ipcRelay.IpcRelayHub<Worker>({
      maxFlightBytes,
      send,
      log: (line) => this.log(`gateway: ${line}`),
    });
  }

  /** Serves node:cluster's workers (the primary of `--workers`). */
  listen(): this {
    cluster.on('message', (worker, message: unknown) => this.receive(worker, message));
    cluster.on('listening', (worker) => this.serve(worker));
    cluster.on('exit', (worker) => this.gone(worker));
    return this;
  }

  /** Flights in progress (for tests and figures). */
  get flightCount(): number {
    return this.relay.flightCount;
  }

  /** A message from a worker (anything else on the channel is not ours and is ignored). */
  receive(worker: Worker, message: unknown): void {
    if (!isGatewayMessage<ToPrimary>(message)) return;
    this.known.set(worker.id, worker);
    switch (message.gw) {
      case 'publish':
      case 'unfollow':
        return this.relay.receive(worker, message);
      case 'reset':
        this.failures.delete(message.name);
        return;
      case 'part':
        return this.part(worker, message.g, message.data);
      default:
        return this.answer(worker, message);
    }
  }

  private answer(worker: Worker, ask: WorkerAsk): void {
    const reply = (v: unknown) => send(worker, { gw: 're', c: ask.c, v });
    switch (ask.gw) {
      case 'claim':
        return reply(this.relay.claim(worker, ask, ask.c));
      case 'fail':
        return reply(this.countFailure(ask.name));
      case 'announce':
        this.announce(worker, ask.name, ask.state);
        return reply(null);
      case 'watch': {
        const open = this.breakers.get(ask.name);
        return reply(open && open.until > Date.now() ? open.state : null);
      }
      case 'prober':
        return reply(this.isProber(worker, ask.name));
      case 'gather':
        return this.gather(worker, ask.c, ask.what);
    }
  }

  // ---- breakers ----

  private countFailure(name: string): number {
    const now = Date.now();
    const run = this.failures.get(name);
    // A run nobody added to for a minute is over (as the Redis coordinator's count expires).
    const n = run && now - run.at < 60_000 ? run.n + 1 : 1;
    this.failures.set(name, { n, at: now });
    if (n === 1) this.broadcast({ gw: 'failing', name });
    return n;
  }

  private announce(from: Worker, name: string, state: SharedBreakerState): void {
    if (state.state === 'open')
      this.breakers.set(name, { state, until: Date.now() + Math.max(1, state.openMs ?? 60_000) + this.proberLeaseMs });
    else {
      this.breakers.delete(name);
      this.failures.delete(name);
    }
    this.broadcast({ gw: 'breaker', name, state }, from);
  }

  private isProber(worker: Worker, name: string): boolean {
    const now = Date.now();
    const held = this.probers.get(name);
    if (held && held.worker !== worker.id && held.until > now) return false;
    this.probers.set(name, { worker: worker.id, until: now + this.proberLeaseMs });
    return true;
  }

  // ---- workers coming and going ----

  /** A worker listens: it is asked for its figures from now on. */
  serve(worker: Worker): void {
    this.serving.set(worker.id, worker);
    this.known.set(worker.id, worker);
  }

  /** A worker exited: whoever followed its calls takes them over, and nothing waits for it any more. */
  gone(worker: Worker): void {
    this.serving.delete(worker.id);
    this.known.delete(worker.id);
    const last = this.lastCounters.get(worker.id);
    this.lastCounters.delete(worker.id);
    if (last) {
      this.merging = this.merging.then(async () => {
        const merged = await AggregatorRegistry.aggregate([this.departed, last] as Parameters<
          typeof AggregatorRegistry.aggregate
        >[0]).getMetricsAsJSON();
        this.departed = countersOf(merged as unknown as MetricList);
      });
    }
    this.relay.workerGone(worker);
    for (const [name, prober] of this.probers) if (prober.worker === worker.id) this.probers.delete(name);
    for (const [g, gathering] of this.gatherings) {
      if (gathering.asker === worker) {
        clearTimeout(gathering.timer);
        this.gatherings.delete(g);
      } else if (gathering.waiting.delete(worker.id) && gathering.waiting.size === 0) void this.finish(g);
    }
  }

  // ---- figures from every worker ----

  private gather(asker: Worker, c: number, what: Gathered): void {
    const g = ++this.gatherSeq;
    const workers = [...this.serving.values()].filter((w) => w.isConnected());
    const gathering: Gathering = {
      what,
      asker,
      c,
      waiting: new Map(workers.map((w) => [w.id, w.process.pid ?? 0])),
      parts: [],
      // One timer per gathering (a scrape, a /health), never per proxied request.
      timer: setTimeout(() => void this.finish(g), this.gatherTimeoutMs[what]),
    };
    gathering.timer.unref();
    this.gatherings.set(g, gathering);
    for (const worker of workers) send(worker, { gw: 'collect', g, what });
    if (workers.length === 0) void this.finish(g);
  }

  private part(worker: Worker, g: number, data: unknown): void {
    const gathering = this.gatherings.get(g);
    if (!gathering || !gathering.waiting.delete(worker.id)) return;
    if (data !== null) gathering.parts.push({ pid: worker.process.pid ?? 0, data });
    if (gathering.what === 'metrics' && Array.isArray(data))
      this.lastCounters.set(worker.id, countersOf(data as MetricList));
    if (gathering.waiting.size === 0) void this.finish(g);
  }

  private async finish(g: number): Promise<void> {
    const gathering = this.gatherings.get(g);
    if (!gathering) return;
    this.gatherings.delete(g);
    clearTimeout(gathering.timer);
    const silent = [...gathering.waiting.values()];
    let reply: GatherReply;
    if (gathering.what === 'metrics') {
      await this.merging;
      // Counters of the workers gone, and of those too busy to answer this time, as they last reported them.
      const kept = [
        this.departed,
        ...[...gathering.waiting.keys()].map((id) => this.lastCounters.get(id) ?? []),
      ].filter((list) => list.length > 0);
      reply = {
        what: 'metrics',
        text: await aggregateMetrics(
          gathering.parts.map((p) => p.data),
          silent.length,
          kept,
        ),
      };
    } else reply = { what: gathering.what, parts: gathering.parts, silent };
    if (gathering.asker.isConnected()) send(gathering.asker, { gw: 're', c: gathering.c, v: reply });
  }

  private broadcast(message: ToWorker, except?: Worker): void {
    for (const worker of this.known.values()) {
      if (worker !== except) send(worker, message);
    }
  }
}

/** prom-client's metrics as JSON (what a worker sends for a scrape). */
type MetricList = Array<{ name: string; type?: string; aggregator?: string }>;

/** The metrics of a list that only ever grow (counters, histograms): what may stand for a worker no longer answering. */
function countersOf(list: MetricList): MetricList {
  return list.filter((metric) => metric.type === 'counter' || metric.type === 'histogram');
}

/**
 * Every worker's metrics as one registry's text: counters and histograms summed, a few gauges by max or min, and
 * the labels a request names (model, tenant) capped for the whole port, not per worker; `kept` adds counters of
 * workers that did not answer (gone, or silent this time).
 */
async function aggregateMetrics(parts: unknown[], silent: number, kept: MetricList[] = []): Promise<string> {
  const answered = parts.filter(Array.isArray) as MetricList[];
  const lists = capPortLabels([...answered, ...kept]).map((metrics) =>
    metrics.map((metric) => {
      const aggregator = METRIC_AGGREGATORS[metric.name];
      return aggregator ? { ...metric, aggregator } : metric;
    }),
  );
  const registry = AggregatorRegistry.aggregate(lists);
  const workers = new Gauge({
    name: 'gateway_workers',
    help: 'Workers whose figures this scrape adds up (reporting), and those that did not answer in time (silent).',
    labelNames: ['state'],
    registers: [registry],
  });
  workers.set({ state: 'reporting' }, answered.length);
  workers.set({ state: 'silent' }, silent);
  return registry.metrics();
}

function send(worker: Worker, message: ToWorker): void {
  // A worker that has just died: its 'exit' (handled above) follows; the failed send is not an error of ours.
  if (worker.isConnected()) worker.send(message, undefined, ignore);
}

const ignore = () => undefined;
