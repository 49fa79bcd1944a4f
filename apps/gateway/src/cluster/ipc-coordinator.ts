import type { BreakerCoordinator, FlightCoordinator } from 'nest-prompt-orchestrator';
import {
  DEFAULT_ERROR_CODEC,
  WireReader,
  errorToWire,
  leaderLost,
  toWire,
  type CallEvent,
  type ErrorCodec,
  type ClaimOptions,
  type FollowClaim,
  type LeadClaim,
  type SharedBreakerState,
  type WireEvent as CallWireEvent,
} from 'nest-prompt-orchestrator/low-level';
import { Observable, type Subscription } from 'rxjs';
import { GONE, type ClaimReply } from './messages.js';
import { WorkerChannel } from './worker-channel.js';

/** What crosses for a call: its events, or word that its leader's callers all left (a follower takes over). */
type WireEvent = CallWireEvent | { k: 'gone' };

export interface IpcCoordinatorOptions {
  /** How errors cross between workers (the gateway's carry the provider's status and bytes). */
  errorCodec?: ErrorCodec;
  /** A lead whose call never started (nobody subscribed) is given up after this long, so its key is not blocked. Default 5 000 ms. */
  unstartedLeadMs?: number;
}

/**
 * The workers of `--workers N` (without `--redis`) as one gateway: for each
 * key, one worker makes the upstream call and the others follow it, through
 * the primary, which holds the claims and relays each event (one message per
 * event, per following worker). A follower whose leader goes away (its callers
 * all left, or its process died) makes the call itself if nothing reached its
 * callers yet; otherwise they get a `leader_lost` error, never an answer
 * stitched from two calls. Breakers: one count of failures for the port,
 * openings and closings told to every worker, one prober.
 *
 * Nothing waits on a timer per request: the primary answers a claim as soon
 * as it reads it, and a primary that dies closes the channel, which answers
 * everything still waiting (each worker then acts alone, as a single process
 * does).
 */
export class IpcCoordinator implements FlightCoordinator, BreakerCoordinator {
  private readonly codec: ErrorCodec;
  /** This worker's followers, by claim: where the primary's `ev` messages go. */
  private readonly following = new Map<number, (event: string) => void>();
  /** Leads granted whose call has not started yet, by flight, with when they were granted. */
  private readonly unstarted = new Map<number, number>();
  private readonly sweep: ReturnType<typeof setInterval>;
  /** Breakers whose run of failures may be running somewhere (a success must then end it). */
  private readonly failing = new Set<string>();
  private readonly watchers = new Map<string, (state: SharedBreakerState) => void>();

  constructor(
    private readonly channel: WorkerChannel,
    options: IpcCoordinatorOptions = {},
  ) {
    this.codec = options.errorCodec ?? DEFAULT_ERROR_CODEC;
    const unstartedLeadMs = options.unstartedLeadMs ?? 5_000;
    channel.on('ev', ({ c, e }) => this.following.get(c)?.(e));
    channel.on('failing', ({ name }) => void this.failing.add(name));
    channel.on('breaker', ({ name, state }) => this.watchers.get(name)?.(state));
    // The primary is gone: whoever follows a call takes it over (or fails, if part of it was delivered).
    channel.whenClosed(() => {
      for (const deliver of [...this.following.values()]) deliver(GONE);
    });
    // One timer for the whole worker, not one per request: an abandoned lead would otherwise block its key for good.
    this.sweep = setInterval(() => {
      const now = Date.now();
      for (const [f, grantedAt] of this.unstarted) {
        if (now - grantedAt < unstartedLeadMs) continue;
        this.unstarted.delete(f);
        this.channel.send({ gw: 'pub', f, e: GONE, last: 1 });
      }
    }, 1_000);
    this.sweep.unref();
  }

  health(): { state: 'ok' | 'degraded'; error?: string } {
    return this.channel.connected
      ? { state: 'ok' }
      : { state: 'degraded', error: 'the primary process is gone; this worker acts alone' };
  }

  close(): void {
    clearInterval(this.sweep);
  }

  // ---- one call per key, across the workers ----

  claim<T>(
    key: string,
    lead: () => Observable<CallEvent<T>>,
    options?: ClaimOptions,
  ): Promise<LeadClaim | FollowClaim<T> | undefined> {
    return new Promise((resolve) => {
      const c = this.channel.ask(
        options?.trace ? { gw: 'claim', key, t: options.trace } : { gw: 'claim', key },
        (value) => {
          const reply = value as ClaimReply | undefined;
          if (!reply || reply.role === 'alone') return resolve(undefined);
          if (reply.role === 'lead') {
            this.unstarted.set(reply.f, Date.now());
            return resolve({ role: 'lead', publish: (events) => this.publishing(reply.f, events) });
          }
          // Registered now, before the primary's next message (this flight's next event) is read.
          // `ev` messages name the follower by its claim's number.
          const events = this.follow<T>(key, reply.f, c!, reply.events, lead);
          resolve(reply.t ? { role: 'follow', events, leader: reply.t } : { role: 'follow', events });
        },
      );
    });
  }

  /** The leader's events, passed on as they come, and each sent to the primary for the followers. */
  private publishing<T>(f: number, events: Observable<CallEvent<T>>): Observable<CallEvent<T>> {
    return new Observable<CallEvent<T>>((subscriber) => {
      this.unstarted.delete(f);
      let ended = false;
      // A stream's error formatter: followers are sent the very error event the leader's callers get.
      let formatError: ((error: unknown) => string) | undefined;
      const end = (wire: WireEvent) => {
        ended = true;
        this.channel.send({ gw: 'pub', f, e: JSON.stringify(wire), last: 1 });
      };
      const subscription = events.subscribe({
        next: (event) => {
          if (event.kind === 'head') formatError = event.formatError;
          this.channel.send({ gw: 'pub', f, e: JSON.stringify(toWire(event)) });
          subscriber.next(event);
        },
        error: (error: unknown) => {
          end(errorToWire(this.codec, error, formatError));
          subscriber.error(error);
        },
        complete: () => {
          end({ k: 'end' });
          subscriber.complete();
        },
      });
      return () => {
        subscription.unsubscribe();
        // Every caller here left: a follower elsewhere takes the call over.
        if (!ended) end({ k: 'gone' });
      };
    });
  }

  /**
   * Another worker's call: the events it published before this claim, then
   * each as the primary relays it. Events that arrive before anybody here
   * subscribes wait in an inbox.
   */
  private follow<T>(
    key: string,
    f: number,
    c: number,
    published: string[],
    lead: () => Observable<CallEvent<T>>,
  ): Observable<CallEvent<T>> {
    const inbox = [...published];
    let deliver: ((event: string) => void) | undefined;
    this.following.set(c, (event) => {
      if (deliver) return deliver(event);
      inbox.push(event);
      // Over before anybody here subscribed: the inbox has it all; nothing more will come for this claim.
      if (isLast(event)) this.following.delete(c);
    });
    return new Observable<CallEvent<T>>((subscriber) => {
      let delivered = false;
      let finished = false;
      let takeover: Subscription | undefined;
      const wires = new WireReader(this.codec);
      const finish = () => {
        finished = true;
        this.following.delete(c);
      };
      // The leader is gone before the end: make the call here, or fail if part of it reached our callers.
      const takeOver = () => {
        if (delivered) {
          subscriber.error(leaderLost());
          return;
        }
        void this.claim<T>(key, lead).then((claim) => {
          if (subscriber.closed) return this.giveBack(claim);
          const events = !claim ? lead() : claim.role === 'lead' ? claim.publish(lead()) : claim.events;
          takeover = events.subscribe(subscriber);
        });
      };
      const apply = (text: string) => {
        if (finished) return;
        const wire = JSON.parse(text) as WireEvent;
        switch (wire.k) {
          case 'end':
            finish();
            return subscriber.complete();
          case 'err':
            finish();
            return subscriber.error(wires.error(wire));
          case 'gone':
            finish();
            return takeOver();
          default:
            if (wire.k !== 'h') delivered = true;
            subscriber.next(wires.event<T>(wire));
        }
      };
      if (deliver) {
        subscriber.error(new Error('A followed call can be subscribed once.'));
        return undefined;
      }
      deliver = apply;
      for (const event of inbox.splice(0)) apply(event);
      return () => {
        if (!finished) {
          finish();
          this.channel.send({ gw: 'unfollow', f, c });
        }
        takeover?.unsubscribe();
      };
    });
  }

  /** A claim made for callers who have left meanwhile: released at once, so nobody waits on it. */
  private giveBack<T>(claim: LeadClaim | FollowClaim<T> | undefined): void {
    if (claim?.role === 'lead') {
      // Subscribing and leaving at once ends the flight with `gone`, releasing the claim.
      claim
        .publish(new Observable<CallEvent<T>>(() => undefined))
        .subscribe()
        .unsubscribe();
    } else if (claim?.role === 'follow') {
      claim.events.subscribe().unsubscribe();
    }
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

/** Whether an event (as JSON text) ends its flight: its end, its error, or its leader gone. */
function isLast(event: string): boolean {
  return event === GONE || event.startsWith('{"k":"end"') || event.startsWith('{"k":"err"');
}
