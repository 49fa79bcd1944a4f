import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createClient } from '@keyv/redis';
import { Observable, Subject } from 'rxjs';
import { startOwnedRedis, type OwnedRedis } from '../../../../../test/support/redis-server.js';
import type { CallEvent } from '../events.js';
import { RemoteCallError, type FollowClaim, type LeadClaim } from './coordination.js';
import { RedisCoordinator } from './redis-coordinator.js';

/**
 * Two replicas' coordinators on one Redis this suite owns. A follower whose
 * leader dies mid-stream gets an error its callers can see, formatted as the
 * leader's own callers would have got it, within the lease time: never a
 * silent cut.
 */

describe('RedisCoordinator: a leader lost in the middle of a stream', () => {
  let redis: OwnedRedis;
  const clients: Array<{ destroy(): void }> = [];
  beforeAll(async () => {
    redis = await startOwnedRedis();
  }, 30_000);
  afterAll(async () => {
    for (const client of clients) {
      try {
        client.destroy();
      } catch {
        // A dead leader's clients are closed already.
      }
    }
    await redis.close();
  });

  async function replica(options: { leaseMs: number; pollMs: number }) {
    const client = createClient({ url: redis.url, disableOfflineQueue: true, socket: { reconnectStrategy: false } });
    client.on('error', () => undefined);
    const subscriber = client.duplicate();
    subscriber.on('error', () => undefined);
    await client.connect();
    await subscriber.connect();
    clients.push(client, subscriber);
    const coordinator = new RedisCoordinator({
      client,
      subscriber,
      prefix: 'lost-leader',
      opTimeoutMs: 500,
      ...options,
    });
    return { coordinator, die: () => (client.destroy(), subscriber.destroy(), coordinator.close()) };
  }

  it("the follower gets the leader's own error event for a lost leader, once its lease runs out", async () => {
    const timing = { leaseMs: 600, pollMs: 50 };
    const leader = await replica(timing);
    const follower = await replica(timing);
    const never = () => new Observable<CallEvent<string>>(() => undefined);

    const lead = (await leader.coordinator.claim<string>('k', never)) as LeadClaim;
    expect(lead.role).toBe('lead');
    const upstream = new Subject<CallEvent<string>>();
    const formatError = (error: unknown) =>
      `event: error\ndata: ${JSON.stringify({ code: (error as RemoteCallError).code })}\n\n`;
    lead.publish(upstream).subscribe({ error: () => undefined });
    upstream.next({ kind: 'head', head: { contentType: 'text/event-stream' }, formatError });
    upstream.next({ kind: 'chunk', chunk: 'data: first\n\n' });

    const follow = (await follower.coordinator.claim<string>('k', never)) as FollowClaim<string>;
    expect(follow.role).toBe('follow');
    const seen: CallEvent<string>[] = [];
    const failed = new Promise<{ error: unknown }>((resolve) =>
      follow.events.subscribe({ next: (event) => seen.push(event), error: (error: unknown) => resolve({ error }) }),
    );
    for (const deadline = Date.now() + 60_000; seen.length < 2 && Date.now() < deadline;)
      await new Promise((r) => setTimeout(r, 10));
    expect(seen.map((e) => e.kind)).toEqual(['head', 'chunk']);

    leader.die();
    // The lease runs out after its last renewal and the follower notices at a poll: a follower that never did would
    // wait for good, and the test fail on its timeout.
    const { error } = await failed;
    expect(error).toBeInstanceOf(RemoteCallError);
    expect((error as RemoteCallError).code).toBe('leader_lost');
    const head = seen[0] as Extract<CallEvent<string>, { kind: 'head' }>;
    expect(head.formatError?.(error)).toBe('event: error\ndata: {"code":"leader_lost"}\n\n');
  }, 120_000);

  it("an error the leader's callers saw mid-stream reaches the follower's callers as the same bytes", async () => {
    const timing = { leaseMs: 2_000, pollMs: 50 };
    const leader = await replica(timing);
    const follower = await replica(timing);
    const never = () => new Observable<CallEvent<string>>(() => undefined);
    const lead = (await leader.coordinator.claim<string>('k2', never)) as LeadClaim;
    const upstream = new Subject<CallEvent<string>>();
    const formatError = (error: unknown) => `data: {"error":${JSON.stringify((error as Error).message)}}\n\n`;
    lead.publish(upstream).subscribe({ error: () => undefined });
    upstream.next({ kind: 'head', head: { contentType: 'text/event-stream' }, formatError });
    upstream.next({ kind: 'chunk', chunk: 'data: first\n\n' });
    upstream.error(new Error('provider reset the stream'));

    const follow = (await follower.coordinator.claim<string>('k2', never)) as FollowClaim<string>;
    const seen: CallEvent<string>[] = [];
    const error = await new Promise<unknown>((resolve) =>
      follow.events.subscribe({ next: (event) => seen.push(event), error: resolve }),
    );
    const head = seen[0] as Extract<CallEvent<string>, { kind: 'head' }>;
    expect(head.formatError?.(error)).toBe('data: {"error":"provider reset the stream"}\n\n');
  }, 20_000);
});
