import { Observable, type Subscription } from 'rxjs';
import type { CallEvent } from '../events.js';
import { FlightOutgrownError } from '../dedup/single-flight.js';
import {
  DEFAULT_ERROR_CODEC,
  type ClaimOptions,
  type ErrorCodec,
  type FlightCoordinator,
  type FollowClaim,
  type LeadClaim,
} from './coordination.js';
import { END, GONE, RelayReader, errorMessage, leaderLost, toRelay, type RelayMessage } from './relay-wire.js';

/**
 * What carries a call from its leader to its followers (a Redis stream, node:cluster's IPC): the claims, and the
 * messages in order. The protocol itself (what each message means, when a follower takes over or fails) is
 * `RelayCoordinator`'s, the same over every transport.
 */
export interface RelayTransport {
  /** Claims the one call for `key`; `undefined` when this replica must act alone (coordination is unavailable). */
  claim(key: string, trace?: string): Promise<RelayLead | RelayFollow | undefined>;
  /** Whether the transport works right now, for health reports. */
  health?(): { state: 'ok' | 'degraded'; error?: string };
}

/** This replica leads: `open` once its call starts. */
export interface RelayLead {
  role: 'lead';
  open(): RelayPublisher;
}

/** The leader's side of one call: its messages (JSON text of a `RelayMessage`) in order, the last through `end`. */
export interface RelayPublisher {
  send(message: string): void;
  end(message: string): void;
}

/** Another replica leads; `leader` is its span, when it told one. */
export interface RelayFollow {
  role: 'follow';
  leader?: string;
  /** Starts delivering the call's messages to `follower`; the result stops it (`left`: before the call ended). */
  open(follower: RelayFollower): (left: boolean) => void;
}

/** What a transport tells a follower. */
export interface RelayFollower {
  /** The call's next message (JSON text of a `RelayMessage`), in order, from its first; `gone` when its leader is lost. */
  message(text: string): void;
  /** Messages are missing before the next one this follower can read (trimmed or evicted): none is ever skipped. */
  gap(): void;
  /** Coordination failed under this follower: it acts alone. */
  failed(): void;
}

export interface RelayCoordinatorOptions {
  /** How errors cross (an app can carry its own error types). */
  errorCodec?: ErrorCodec;
}

/**
 * One upstream call per key across replicas: the leader publishes each event of its call as it passes; a follower
 * passes on the leader's events from the first, in order, and never events of two calls. When the leader is lost
 * (`gone`: its callers all left, or it died) a follower makes the call itself, or follows whoever does, if nothing
 * reached its callers yet; otherwise they get `leader_lost`. A follower missing events it needs ends the same way
 * once part of the answer was delivered, and is refused (`FlightOutgrownError`, a 503 to retry) before that.
 */
export class RelayCoordinator implements FlightCoordinator {
  private readonly codec: ErrorCodec;

  constructor(
    private readonly transport: RelayTransport,
    options: RelayCoordinatorOptions = {},
  ) {
    this.codec = options.errorCodec ?? DEFAULT_ERROR_CODEC;
  }

  health(): { state: 'ok' | 'degraded'; error?: string } {
    return this.transport.health?.() ?? { state: 'ok' };
  }

  async claim<T>(
    key: string,
    lead: () => Observable<CallEvent<T>>,
    options?: ClaimOptions,
  ): Promise<LeadClaim | FollowClaim<T> | undefined> {
    const claim = await this.transport.claim(key, options?.trace);
    if (!claim) return undefined;
    if (claim.role === 'lead') return { role: 'lead', publish: (events) => this.publishing(claim, events) };
    const events = this.follow(key, claim, lead);
    return claim.leader === undefined ? { role: 'follow', events } : { role: 'follow', events, leader: claim.leader };
  }

  /** The leader's events, passed on as they come, and each published; the end (or the error, or `gone`) last. */
  private publishing<T>(claim: RelayLead, events: Observable<CallEvent<T>>): Observable<CallEvent<T>> {
    return new Observable<CallEvent<T>>((subscriber) => {
      const publisher = claim.open();
      let ended = false;
      // A stream's error formatter: followers are sent the very error event the leader's callers get.
      let formatError: ((error: unknown) => string) | undefined;
      const end = (message: string) => {
        ended = true;
        publisher.end(message);
      };
      const subscription = events.subscribe({
        next: (event) => {
          if (event.kind === 'head') formatError = event.formatError;
          publisher.send(JSON.stringify(toRelay(event)));
          subscriber.next(event);
        },
        error: (error: unknown) => {
          end(JSON.stringify(errorMessage(this.codec, error, formatError)));
          subscriber.error(error);
        },
        complete: () => {
          end(END);
          subscriber.complete();
        },
      });
      return () => {
        subscription.unsubscribe();
        // Every caller of this replica left: a follower elsewhere takes the call over.
        if (!ended) end(GONE);
      };
    });
  }

  /** Another replica's call, as the transport delivers it, with the takeover when its leader is lost. */
  private follow<T>(key: string, claim: RelayFollow, lead: () => Observable<CallEvent<T>>): Observable<CallEvent<T>> {
    return new Observable<CallEvent<T>>((subscriber) => {
      // Whether part of the answer reached this follower's callers: from then on, only this call may answer them.
      let delivered = false;
      let finished = false;
      let takeover: Subscription | undefined;
      const reader = new RelayReader(this.codec);
      let stop: ((left: boolean) => void) | undefined;
      const finish = () => {
        finished = true;
        stop?.(false);
      };
      const takeOver = () => {
        if (delivered) return subscriber.error(leaderLost());
        void this.claim<T>(key, lead).then((next) => {
          if (subscriber.closed) return giveBack(next);
          const events = !next ? lead() : next.role === 'lead' ? next.publish(lead()) : next.events;
          takeover = events.subscribe(subscriber);
        });
      };
      const follower: RelayFollower = {
        message: (text) => {
          if (finished) return;
          const message = JSON.parse(text) as RelayMessage;
          switch (message.kind) {
            case 'end':
              finish();
              return subscriber.complete();
            case 'error':
              finish();
              return subscriber.error(reader.error(message));
            case 'gone':
              finish();
              return takeOver();
            case 'heartbeat':
              return;
            default:
              if (message.kind !== 'head') delivered = true;
              subscriber.next(reader.event<T>(message));
          }
        },
        gap: () => {
          if (finished) return;
          finish();
          subscriber.error(
            delivered
              ? leaderLost(
                  'This replica fell behind the call it followed: the events it still needed were no longer kept.',
                )
              : new FlightOutgrownError(),
          );
        },
        failed: () => {
          if (finished) return;
          finish();
          if (delivered) subscriber.error(leaderLost('Lost the replica making this call in the middle of its answer.'));
          else takeover = lead().subscribe(subscriber);
        },
      };
      const close = claim.open(follower);
      // Over while opening (its messages were all there): nothing more to stop.
      if (finished) close(false);
      else stop = close;
      return () => {
        if (!finished) {
          finished = true;
          stop?.(true);
        }
        takeover?.unsubscribe();
      };
    });
  }
}

/** A claim made for callers who have left meanwhile: released at once, so nobody waits on it. */
function giveBack<T>(claim: LeadClaim | FollowClaim<T> | undefined): void {
  if (claim?.role === 'lead') {
    // Subscribing and leaving at once ends the call with `gone`, releasing the claim.
    claim
      .publish(new Observable<CallEvent<T>>(() => undefined))
      .subscribe()
      .unsubscribe();
  } else if (claim?.role === 'follow') {
    claim.events.subscribe().unsubscribe();
  }
}
