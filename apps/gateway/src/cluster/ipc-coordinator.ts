import type { BreakerCoordinator, ErrorCodec, SharedBreakerState } from 'nest-prompt-orchestrator/core';
import { RelayCoordinator, ipcRelay } from 'nest-prompt-orchestrator/low-level';
import type { WorkerChannel } from './worker-channel.js';

export interface IpcCoordinatorOptions extends ipcRelay.IpcRelayWorkerOptions {
  /** How errors cross between workers (the gateway's carry the provider's status and bytes). */
  errorCodec?: ErrorCodec;
}

/**
 * The workers of `--workers N` (without `--redis`) as one gateway, through
 * their primary: calls go through the library's relay over IPC (one worker
 * makes the upstream call for a key, the others follow it); breakers share one
 * count of failures for the port, openings and closings told to every worker,
 * and one prober. A primary that dies closes the channel, which answers
 * everything still waiting (each worker then acts alone).
 */
export class IpcCoordinator extends RelayCoordinator implements BreakerCoordinator {
  private readonly ipc: ipcRelay.IpcRelayWorker;
  private readonly channel: WorkerChannel;
  /** Breakers whose run of failures may be running somewhere (a success must then end it). */
  private readonly failing = new Set<string>();
  private readonly watchers = new Map<string, (state: SharedBreakerState) => void>();

  constructor(channel: WorkerChannel, options: IpcCoordinatorOptions = {}) {
    const transport = new ipcRelay.IpcRelayWorker(
      {
        claim: (ask, onAnswer) => channel.ask(ask, (reply) => onAnswer(reply as ipcRelay.ClaimReply | undefined)),
        send: (message) => channel.send(message),
        get connected() {
          return channel.connected;
        },
      },
      options,
    );
    super(transport, { errorCodec: options.errorCodec });
    this.ipc = transport;
    this.channel = channel;
    channel.on('event', (message) => this.ipc.receive(message));
    channel.on('failing', ({ name }) => void this.failing.add(name));
    channel.on('breaker', ({ name, state }) => this.watchers.get(name)?.(state));
    channel.whenClosed(() => this.ipc.primaryGone());
  }

  close(): void {
    this.ipc.close();
  }

  // ---- breakers ----

  countFailure(name: string): Promise<number | undefined> {
    this.failing.add(name);
    return this.channel.request<number>({ gw: 'fail', name });
  }

  async resetFailures(name: string): Promise<void> {
    // Only when a run may be going on: a success is the common case and costs no message.
    if (this.failing.delete(name)) this.channel.send({ gw: 'reset', name });
  }

  async announce(name: string, state: SharedBreakerState): Promise<void> {
    // Answered once the primary has told the other workers: a caller's next request finds them in the same state.
    await this.channel.request({ gw: 'announce', name, state });
  }

  async watch(name: string, onChange: (state: SharedBreakerState) => void): Promise<SharedBreakerState | undefined> {
    this.watchers.set(name, onChange);
    return (await this.channel.request<SharedBreakerState | null>({ gw: 'watch', name })) ?? undefined;
  }

  async isProber(name: string): Promise<boolean> {
    // Alone (no primary), every worker probes for itself.
    return (await this.channel.request<boolean>({ gw: 'prober', name })) ?? true;
  }
}
