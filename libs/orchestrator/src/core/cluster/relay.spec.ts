import { describe, expect, it } from '@jest/globals';
import { Observable, lastValueFrom, of, toArray } from 'rxjs';
import type { CallEvent } from '../events.js';
import { FlightOutgrownError } from '../dedup/single-flight.js';
import type { FollowClaim, LeadClaim } from './coordination.js';
import {
  RelayCoordinator,
  type RelayFollow,
  type RelayFollower,
  type RelayLead,
  type RelayTransport,
} from './relay.js';

/** A transport whose claims the test hands out: what the leader sends, and a follower to drive by hand. */
class TestTransport implements RelayTransport {
  readonly claims: Array<RelayLead | RelayFollow | undefined> = [];
  readonly sent: string[] = [];
  follower?: RelayFollower;
  left?: boolean;

  claim(): Promise<RelayLead | RelayFollow | undefined> {
    return Promise.resolve(this.claims.shift());
  }

  lead(): RelayLead {
    return {
      role: 'lead',
      open: () => ({ send: (m) => this.sent.push(m), end: (m) => this.sent.push(m) }),
    };
  }

  follow(): RelayFollow {
    return {
      role: 'follow',
      open: (follower) => {
        this.follower = follower;
        return (left) => (this.left = left);
      },
    };
  }
}

const chunk = (text: string) => JSON.stringify({ kind: 'chunk', chunk: text });
const head = JSON.stringify({ kind: 'head', head: { contentType: 'text/event-stream' } });

async function following(
  transport: TestTransport,
  lead = () => of<CallEvent<string>>({ kind: 'value', value: 'own' }),
) {
  transport.claims.push(transport.follow());
  const relay = new RelayCoordinator(transport);
  const claim = (await relay.claim<string>('k', lead)) as FollowClaim<string>;
  const seen: Array<CallEvent<string>> = [];
  let error: unknown;
  let done = false;
  claim.events.subscribe({
    next: (e) => seen.push(e),
    error: (e: unknown) => (error = e),
    complete: () => (done = true),
  });
  return { seen, error: () => error, done: () => done, follower: transport.follower! };
}

describe('RelayCoordinator: one protocol over any transport', () => {
  it('a leader publishes each event, then its end, with named fields', async () => {
    const transport = new TestTransport();
    transport.claims.push(transport.lead());
    const relay = new RelayCoordinator(transport);
    const claim = (await relay.claim<string>('k', () => of())) as LeadClaim;
    const events = of<CallEvent<string>>({ kind: 'value', value: 'answer' });
    await lastValueFrom(claim.publish(events).pipe(toArray()));
    expect(transport.sent).toEqual(['{"kind":"value","value":"answer"}', '{"kind":"end"}']);
  });

  it('a leader whose callers all leave says gone', async () => {
    const transport = new TestTransport();
    transport.claims.push(transport.lead());
    const claim = (await new RelayCoordinator(transport).claim<string>('k', () => of())) as LeadClaim;
    claim
      .publish(new Observable<CallEvent<string>>(() => undefined))
      .subscribe()
      .unsubscribe();
    expect(transport.sent).toEqual(['{"kind":"gone"}']);
  });

  it('a follower passes the events on to the end; heartbeats are not events', async () => {
    const transport = new TestTransport();
    const f = await following(transport);
    f.follower.message(head);
    f.follower.message('{"kind":"heartbeat"}');
    f.follower.message(chunk('a'));
    f.follower.message('{"kind":"end"}');
    expect(f.seen.map((e) => e.kind)).toEqual(['head', 'chunk']);
    expect(f.done()).toBe(true);
    expect(transport.left).toBe(false);
  });

  it('a lost leader: taken over before anything was delivered, leader_lost after', async () => {
    const before = new TestTransport();
    const f = await following(before);
    f.follower.message(head);
    f.follower.message('{"kind":"gone"}');
    // Nobody else claims it: this replica makes the call.
    await new Promise((resolve) => setImmediate(resolve));
    expect(f.seen.map((e) => e.kind)).toEqual(['head', 'value']);

    const after = new TestTransport();
    const g = await following(after);
    g.follower.message(chunk('a'));
    g.follower.message('{"kind":"gone"}');
    expect(g.error()).toMatchObject({ code: 'leader_lost', status: 502 });
  });

  it('a gap: refused (503, try again) before anything was delivered, leader_lost after; never skipped', async () => {
    const before = await following(new TestTransport());
    before.follower.message(head);
    before.follower.gap();
    expect(before.error()).toBeInstanceOf(FlightOutgrownError);

    const after = await following(new TestTransport());
    after.follower.message(chunk('a'));
    after.follower.gap();
    after.follower.message(chunk('b'));
    expect(after.error()).toMatchObject({ code: 'leader_lost' });
    expect(after.seen).toHaveLength(1);
  });

  it('coordination failing under a follower: it calls alone if nothing was delivered', async () => {
    const f = await following(new TestTransport());
    f.follower.failed();
    expect(f.seen).toEqual([{ kind: 'value', value: 'own' }]);
  });
});
