import { GONE, isFinal } from './relay-wire.js';
import type { RelayFollow, RelayFollower, RelayLead, RelayTransport } from './relay.js';

/**
 * The relay between the workers of one node:cluster primary: the primary (`IpcRelayHub`) holds the claims and
 * passes each message of a call on to the workers that follow it (one message per event per following worker); a
 * worker's side is `IpcRelayWorker`. The messages below ride on the app's own IPC envelope (its `gw` field tells
 * them from Node's own); the call's messages cross as JSON text, which the primary never parses.
 */

/** A worker claims a key (answered, by the app's channel, with a `ClaimReply`). `trace`: the claiming request's span. */
export interface ClaimAsk {
  gw: 'claim';
  key: string;
  trace?: string;
}

/** The primary's answer to a claim. */
export type ClaimReply =
  | { role: 'lead'; flight: number }
  /** `events`: everything the call published so far; the rest follows as `event` messages. */
  | { role: 'follow'; flight: number; events: string[]; trace?: string }
  /** The call cannot be joined (its messages outgrew what the primary keeps): this worker calls alone. */
  | { role: 'alone' };

/** Worker -> primary. */
export type ToHub =
  /** One message of a call this worker leads; `last` on its end, error or `gone`. */
  | { gw: 'publish'; flight: number; event: string; last?: true }
  /** This worker's follower (named by its claim's number) left the call (every caller of it did). */
  | { gw: 'unfollow'; flight: number; follower: number };

/** Primary -> worker: a message of the call that this worker's follower follows. */
export interface FromHub {
  gw: 'event';
  follower: number;
  event: string;
}

/** A worker's end of the channel, as the relay uses it. */
export interface IpcRelayLink {
  /**
   * Sends a claim; the primary's answer (`undefined` once the primary is gone) is handed to `onAnswer`
   * synchronously on receipt, so that a follower exists before the primary's next message is read. Returns the
   * claim's number (the follower's name in the primary's `event` messages), `undefined` when the primary is gone.
   */
  claim(ask: ClaimAsk, onAnswer: (reply: ClaimReply | undefined) => void): number | undefined;
  send(message: ToHub): void;
  readonly connected: boolean;
}

export interface IpcRelayWorkerOptions {
  /** A lead whose call never started (nobody subscribed) is given up after this long, so its key is not blocked. Default 5 000 ms. */
  unstartedLeadMs?: number;
}

/**
 * A worker's side of the IPC relay. Nothing waits on a timer per request: the primary answers a claim as soon as
 * it reads it, and a primary that dies (`primaryGone`) tells every follower here `gone` (each worker then acts
 * alone, as a single process does).
 */
export class IpcRelayWorker implements RelayTransport {
  /** This worker's followers, by claim: where the primary's `event` messages go. */
  private readonly following = new Map<number, (event: string) => void>();
  /** Leads granted whose call has not started yet, by flight, with when they were granted. */
  private readonly unstarted = new Map<number, number>();
  private readonly sweep: ReturnType<typeof setInterval>;

  constructor(
    private readonly link: IpcRelayLink,
    options: IpcRelayWorkerOptions = {},
  ) {
    const unstartedLeadMs = options.unstartedLeadMs ?? 5_000;
    // One timer for the whole worker, not one per request: an abandoned lead would otherwise block its key for good.
    this.sweep = setInterval(() => {
      const now = Date.now();
      for (const [flight, grantedAt] of this.unstarted) {
        if (now - grantedAt < unstartedLeadMs) continue;
        this.unstarted.delete(flight);
        this.link.send({ gw: 'publish', flight, event: GONE, last: true });
      }
    }, 1_000);
    this.sweep.unref();
  }

  health(): { state: 'ok' | 'degraded'; error?: string } {
    return this.link.connected
      ? { state: 'ok' }
      : { state: 'degraded', error: 'the primary process is gone; this worker acts alone' };
  }

  /** A message the primary relays to one of this worker's followers. */
  receive(message: FromHub): void {
    this.following.get(message.follower)?.(message.event);
  }

  /** The primary is gone: whoever follows a call takes it over (or fails, if part of it was delivered). */
  primaryGone(): void {
    for (const deliver of [...this.following.values()]) deliver(GONE);
  }

  close(): void {
    clearInterval(this.sweep);
  }

  claim(key: string, trace?: string): Promise<RelayLead | RelayFollow | undefined> {
    return new Promise((resolve) => {
      const follower = this.link.claim(trace ? { gw: 'claim', key, trace } : { gw: 'claim', key }, (reply) => {
        if (!reply || reply.role === 'alone') return resolve(undefined);
        if (reply.role === 'lead') {
          this.unstarted.set(reply.flight, Date.now());
          return resolve({ role: 'lead', open: () => this.publisher(reply.flight) });
        }
        // Registered now, before the primary's next message (this call's next event) is read.
        const open = this.follow(reply.flight, follower!, reply.events);
        resolve(reply.trace ? { role: 'follow', open, leader: reply.trace } : { role: 'follow', open });
      });
    });
  }

  private publisher(flight: number) {
    this.unstarted.delete(flight);
    return {
      send: (event: string) => this.link.send({ gw: 'publish', flight, event }),
      end: (event: string) => this.link.send({ gw: 'publish', flight, event, last: true }),
    };
  }

  /** Another worker's call: what it published before this claim, then each message as the primary relays it. */
  private follow(flight: number, c: number, published: string[]): RelayFollow['open'] {
    // Messages that arrive before anybody here subscribes wait in an inbox.
    const inbox = [...published];
    let deliver: ((event: string) => void) | undefined;
    this.following.set(c, (event) => {
      if (deliver) return deliver(event);
      inbox.push(event);
      // Over before anybody here subscribed: the inbox has it all; nothing more will come for this claim.
      if (isFinal(event)) this.following.delete(c);
    });
    return (follower: RelayFollower) => {
      if (deliver) throw new Error('A followed call can be subscribed once.');
      deliver = (event) => follower.message(event);
      for (const event of inbox.splice(0)) follower.message(event);
      return (left) => {
        this.following.delete(c);
        if (left) this.link.send({ gw: 'unfollow', flight, follower: c });
      };
    };
  }
}

export interface IpcRelayHubOptions<W extends { readonly id: number }> {
  /** Messages one call may keep for workers that join it late; past this the call is not joined any more. */
  maxFlightBytes: number;
  send(worker: W, message: FromHub): void;
  log(line: string): void;
}

/** One upstream call for a key, made by one worker, followed by others. */
interface Flight<W extends { readonly id: number }> {
  id: number;
  key: string;
  /** The leading worker's id. */
  leader: number;
  /** Everything published so far (JSON text of each message), for workers that join late; `undefined` once too large. */
  events: string[] | undefined;
  bytes: number;
  followers: Array<{ worker: W; follower: number }>;
  /** The leader's span (a traceparent), for the followers' spans to link to. */
  trace?: string;
}

/**
 * The primary's side of the IPC relay: per key, the claim on the one upstream call and that call's messages so far
 * (a worker that joins late gets them all, then each as it is published). Memory is bounded: a call's messages are
 * dropped when it ends, and a call whose messages outgrow `maxFlightBytes` keeps none (the workers following it go
 * on live; a worker that asks later calls alone). Every answer to a claim is given as the claim is read, with no timer.
 */
export class IpcRelayHub<W extends { readonly id: number }> {
  private flightSeq = 0;
  private readonly leases = new Map<string, Flight<W>>();
  private readonly flights = new Map<number, Flight<W>>();

  constructor(private readonly options: IpcRelayHubOptions<W>) {}

  /** Calls in progress. */
  get flightCount(): number {
    return this.flights.size;
  }

  claim(worker: W, ask: ClaimAsk, follower: number): ClaimReply {
    const flight = this.leases.get(ask.key);
    if (!flight) {
      const trace = typeof ask.trace === 'string' && ask.trace.length <= 64 ? ask.trace : undefined;
      const created: Flight<W> = {
        id: ++this.flightSeq,
        key: ask.key,
        leader: worker.id,
        events: [],
        bytes: 0,
        followers: [],
        trace,
      };
      this.leases.set(ask.key, created);
      this.flights.set(created.id, created);
      return { role: 'lead', flight: created.id };
    }
    if (!flight.events) return { role: 'alone' };
    flight.followers.push({ worker, follower });
    // A copy: node:cluster queues a message sent while a connection's handle is in flight by reference, and
    // serializes it later; the live array would by then hold events that also follow as `event` messages.
    const events = flight.events.slice();
    return flight.trace
      ? { role: 'follow', flight: flight.id, events, trace: flight.trace }
      : { role: 'follow', flight: flight.id, events };
  }

  receive(worker: W, message: ToHub): void {
    if (message.gw === 'publish') return this.publish(message.flight, message.event, message.last === true);
    const flight = this.flights.get(message.flight);
    if (flight)
      flight.followers = flight.followers.filter((f) => !(f.worker === worker && f.follower === message.follower));
  }

  /** A worker exited: whoever followed its calls takes them over, and nothing is sent to it any more. */
  workerGone(worker: W): void {
    for (const flight of [...this.flights.values()]) {
      if (flight.leader === worker.id) {
        // Its followers take the call over (or fail, if part of it had reached their callers).
        for (const f of flight.followers)
          this.options.send(f.worker, { gw: 'event', follower: f.follower, event: GONE });
        this.end(flight);
      } else if (flight.followers.some((f) => f.worker === worker)) {
        flight.followers = flight.followers.filter((f) => f.worker !== worker);
      }
    }
  }

  private publish(id: number, event: string, last: boolean): void {
    const flight = this.flights.get(id);
    if (!flight) return;
    for (const f of flight.followers) this.options.send(f.worker, { gw: 'event', follower: f.follower, event });
    if (last) return this.end(flight);
    if (!flight.events) return;
    flight.bytes += event.length;
    if (flight.bytes <= this.options.maxFlightBytes) {
      flight.events.push(event);
      return;
    }
    // Its followers have every message already and go on live; only a later joiner would need them all again.
    flight.events = undefined;
    this.options.log(
      `a call's answer grew past ${this.options.maxFlightBytes} bytes; workers that ask for it from now on call the provider themselves`,
    );
  }

  private end(flight: Flight<W>): void {
    this.flights.delete(flight.id);
    if (this.leases.get(flight.key) === flight) this.leases.delete(flight.key);
  }
}
