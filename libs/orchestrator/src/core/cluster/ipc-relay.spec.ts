import { describe, expect, it } from '@jest/globals';
import { Subject, type Observable } from 'rxjs';
import { ChunkEvent, type CallEvent } from '../events.js';
import type { FollowClaim, LeadClaim } from './coordination.js';
import { IpcRelayHub, IpcRelayWorker, type ClaimReply, type FromHub, type ToHub } from './ipc-relay.js';
import { RelayCoordinator } from './relay.js';

interface HubWorker {
  readonly id: number;
}

/**
 * A primary and its workers in one process, with node:cluster's channel as it behaves: while a connection's handle
 * is on its way to a worker (round-robin scheduling sends one per accepted connection), `worker.send` queues the
 * messages after it *by reference* and serializes them only once the worker acknowledges the handle.
 */
class Cluster {
  readonly hub: IpcRelayHub<HubWorker>;
  private readonly workers = new Map<number, IpcRelayWorker>();
  private readonly answers = new Map<number, (reply: ClaimReply | undefined) => void>();
  /** Messages to workers not serialized yet: set while a handle is in flight. */
  private queued?: Array<{ to: number; message: FromHub | { re: number; reply: ClaimReply } }>;
  private claimSeq = 0;

  constructor() {
    this.hub = new IpcRelayHub<HubWorker>({
      maxFlightBytes: 1 << 20,
      send: (worker, message) => this.toWorker(worker.id, message),
      log: () => undefined,
    });
  }

  worker(id: number): IpcRelayWorker {
    const link = {
      connected: true,
      claim: (ask: { gw: 'claim'; key: string }, onAnswer: (reply: ClaimReply | undefined) => void) => {
        const c = ++this.claimSeq;
        this.answers.set(c, onAnswer);
        const reply = this.hub.claim({ id }, ask, c);
        this.toWorker(id, { re: c, reply });
        return c;
      },
      send: (message: ToHub) => this.hub.receive({ id }, JSON.parse(JSON.stringify(message)) as ToHub),
    };
    const worker = new IpcRelayWorker(link);
    this.workers.set(id, worker);
    return worker;
  }

  /** A connection's handle leaves for a worker: what is sent to workers from now on waits in the queue. */
  handleInFlight(): void {
    this.queued ??= [];
  }

  /** The handle is acknowledged: the queued messages are serialized now, and delivered in order. */
  handleAcknowledged(): void {
    const queued = this.queued ?? [];
    this.queued = undefined;
    for (const { to, message } of queued) this.deliver(to, JSON.stringify(message));
  }

  private toWorker(to: number, message: FromHub | { re: number; reply: ClaimReply }): void {
    if (this.queued) this.queued.push({ to, message });
    else this.deliver(to, JSON.stringify(message));
  }

  private deliver(to: number, text: string): void {
    const message = JSON.parse(text) as FromHub | { re: number; reply: ClaimReply };
    if ('re' in message) {
      const answer = this.answers.get(message.re);
      this.answers.delete(message.re);
      return answer?.(message.reply);
    }
    this.workers.get(to)!.receive(message);
  }
}

const chunks = (events: Array<CallEvent<string>>) =>
  events.map((e) => (e.kind === 'chunk' ? String(e.chunk) : e.kind)).join(' ');

describe('IpcRelayHub and IpcRelayWorker over a node:cluster channel', () => {
  it('a worker that joins a stream while a connection handle is in flight gets each event once, in order', async () => {
    const cluster = new Cluster();
    const leading = new RelayCoordinator(cluster.worker(1));
    const following = new RelayCoordinator(cluster.worker(2));
    const upstream = new Subject<CallEvent<string>>();
    const own = (): Observable<CallEvent<string>> => upstream;

    const lead = (await leading.claim<string>('k', own)) as LeadClaim;
    expect(lead.role).toBe('lead');
    const leaderSaw: Array<CallEvent<string>> = [];
    lead.publish(upstream).subscribe((e) => leaderSaw.push(e));
    upstream.next({ kind: 'head', head: { contentType: 'text/event-stream' } });
    upstream.next(new ChunkEvent('1'));

    // A caller's connection is passed to a worker as the second worker claims: its reply waits behind the handle.
    cluster.handleInFlight();
    const claimed = following.claim<string>('k', own);
    upstream.next(new ChunkEvent('2'));
    upstream.next(new ChunkEvent('3'));
    cluster.handleAcknowledged();
    const follow = (await claimed) as FollowClaim<string>;
    expect(follow.role).toBe('follow');

    const followerSaw: Array<CallEvent<string>> = [];
    let complete = false;
    follow.events.subscribe({ next: (e) => followerSaw.push(e), complete: () => (complete = true) });
    upstream.next(new ChunkEvent('4'));
    upstream.complete();

    expect(chunks(leaderSaw)).toBe('head 1 2 3 4');
    expect(chunks(followerSaw)).toBe('head 1 2 3 4');
    expect(complete).toBe(true);
  });
});
