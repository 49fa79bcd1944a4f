import { Registry } from 'prom-client';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_ERROR_CODEC } from '../shared-state/shared-state.js';
import { IpcCoordinator } from './ipc-coordinator.js';
import type { Gathered, GatherReply } from './messages.js';
import { WorkerChannel } from './worker-channel.js';

/** Longest a worker waits for the primary's gathering (which gives up on a silent worker sooner, see PrimaryHub). */
const GATHER_WAIT_MS = 8_000;

/** One worker's figures and every other worker's, as the primary gathered them. */
export interface PortView<T> {
  parts: Array<{ pid: number; data: T }>;
  /** Workers that did not answer in time. */
  silent: number[];
}

/**
 * What a worker of `--workers N` shares with the others through the primary:
 * the coordinator of calls and breakers (only without `--redis`, which then
 * coordinates instead), and the figures behind /metrics, /health and the
 * status page, so that whichever worker answers describes the whole port.
 * In a single process (or outside node:cluster) it holds nothing.
 */
export class WorkerCoordination {
  readonly channel?: WorkerChannel;
  readonly coordinator?: IpcCoordinator;

  constructor(config: GatewayConfig) {
    if (config.workers <= 1) return;
    this.channel = WorkerChannel.get();
    if (this.channel && !config.redisUrl)
      this.coordinator = new IpcCoordinator(this.channel, { errorCodec: GATEWAY_ERROR_CODEC });
  }

  /** Every worker's answer to `what` (this one's included), or `undefined` when alone or the primary is gone. */
  async gather<T>(what: Exclude<Gathered, 'metrics'>): Promise<PortView<T> | undefined> {
    if (!this.channel?.connected) return undefined;
    const reply = await this.channel.request<GatherReply>({ gw: 'gather', what }, GATHER_WAIT_MS);
    if (!reply || reply.what === 'metrics') return undefined;
    return { parts: reply.parts as PortView<T>['parts'], silent: reply.silent };
  }

  close(): void {
    this.coordinator?.close();
  }
}

/**
 * The metrics registry of a worker: a scrape answers the whole port's figures
 * (the primary adds up every worker's with prom-client's AggregatorRegistry),
 * and this worker's own only when the primary cannot be asked.
 */
export class PortRegistry extends Registry {
  constructor(private readonly channel: WorkerChannel) {
    super();
    channel.provide('metrics', () => this.getMetricsAsJSON());
  }

  override async metrics(): Promise<string> {
    const reply = this.channel.connected
      ? await this.channel.request<GatherReply>({ gw: 'gather', what: 'metrics' }, GATHER_WAIT_MS)
      : undefined;
    return reply?.what === 'metrics' ? reply.text : super.metrics();
  }
}

/** The registry behind the gateway's metrics route: the port's in a worker of `--workers`, the process's otherwise. */
export function metricsRegistry(config: GatewayConfig): Registry {
  const channel = config.workers > 1 ? WorkerChannel.get() : undefined;
  return channel ? new PortRegistry(channel) : new Registry();
}
