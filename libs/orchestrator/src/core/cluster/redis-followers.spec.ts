import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { createClient } from '@keyv/redis';
import { Observable, Subject } from 'rxjs';
import { startOwnedRedis, type OwnedRedis } from '../../../../../test/support/redis-server.js';
import type { CallEvent } from '../events.js';
import { FlightOutgrownError } from '../dedup/single-flight.js';
import { RemoteCallError, type FollowClaim, type LeadClaim } from './coordination.js';
import { RedisCoordinator, type RedisCoordinatorOptions } from './redis-coordinator.js';

/**
 * Followers of a leader that lives follow it to the end, whatever Redis does to the keys the call uses (a lease
 * evicted, a pause shorter than a lease); a follower never passes on events it cannot read in order (a stream
 * evicted or trimmed under it); and a call's stream keeps a bounded backlog in Redis, however long the answer.
 */

type Timing = Partial<Pick<RedisCoordinatorOptions, 'leaseMs' | 'pollMs' | 'opTimeoutMs' | 'maxBacklogBytes'>>;

describe('RedisCoordinator: following a live leader, and what Redis keeps of its call', () => {
  let redis: OwnedRedis;
  let raw: ReturnType<typeof createClient>;
  const closing: Array<() => void> = [];
  beforeAll(async () => {
    redis = await startOwnedRedis();
    raw = createClient({ url: redis.url });
    raw.on('error', () => undefined);
    await raw.connect();
  }, 30_000);
  afterEach(() => {
    for (const close of closing.splice(0)) {
      try {
        close();
      } catch {
        // Closed already.
      }
    }
  });
  afterAll(async () => {
    raw?.destroy();
    await redis?.close();
  });

  async function replica(prefix: string, timing: Timing, options: { deaf?: boolean } = {}) {
    const client = createClient({ url: redis.url, disableOfflineQueue: true, socket: { reconnectStrategy: () => 50 } });
    client.on('error', () => undefined);
    const subscriber = client.duplicate();
    subscriber.on('error', () => undefined);
    await client.connect();
    await subscriber.connect();
    // `deaf`: announcements never reach it, so it reads only at its polls (a follower that falls behind).
    const subscriptions = options.deaf
      ? { subscribe: async () => undefined, unsubscribe: async () => undefined }
      : subscriber;
    const coordinator = new RedisCoordinator({
      client,
      subscriber: subscriptions,
      prefix,
      opTimeoutMs: 200,
      ...timing,
    });
    closing.push(() => (coordinator.close(), client.destroy(), subscriber.destroy()));
    return coordinator;
  }

  const own = (label: string) => () =>
    new Observable<CallEvent<string>>((s) => {
      s.next({ kind: 'head', head: { contentType: 'text/plain' } });
      s.next({ kind: 'chunk', chunk: label });
      s.complete();
    });

  /** Leads `key` on `leader`: the upstream the test drives, and the flight's stream key in Redis. */
  async function leadOn(leader: RedisCoordinator, prefix: string, key: string) {
    const lead = (await leader.claim<string>(key, own('never'))) as LeadClaim;
    expect(lead.role).toBe('lead');
    const upstream = new Subject<CallEvent<string>>();
    const leaderSaw: string[] = [];
    lead
      .publish(upstream)
      .subscribe({ next: (e) => e.kind === 'chunk' && leaderSaw.push(String(e.chunk)), error: () => undefined });
    const holder = String(await raw.get(`${prefix}:lease:${key}`));
    const flight = holder.slice(holder.indexOf(':') + 1);
    return { upstream, leaderSaw, stream: `${prefix}:{f:${flight}}:stream`, lease: `${prefix}:lease:${key}` };
  }

  /** Follows `key` on `follower`: the chunks it passes on, and how it ended. */
  async function followOn(follower: RedisCoordinator, key: string, alone = own('alone')) {
    const claim = (await follower.claim<string>(key, alone)) as FollowClaim<string>;
    expect(claim.role).toBe('follow');
    const chunks: string[] = [];
    const ended = new Promise<{ error?: unknown }>((resolve) =>
      claim.events.subscribe({
        next: (e) => e.kind === 'chunk' && chunks.push(String(e.chunk)),
        error: (error: unknown) => resolve({ error }),
        complete: () => resolve({}),
      }),
    );
    return { chunks, ended };
  }

  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  const until = async (condition: () => boolean, what: string) => {
    for (const deadline = Date.now() + 10_000; !condition(); await sleep(10))
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
  };

  it('the lease evicted mid-stream: the follower gets the whole answer (no leader_lost), and the leader takes its lease back', async () => {
    const timing = { leaseMs: 600, pollMs: 50 };
    const prefix = 'evicted-lease';
    const leader = await replica(prefix, timing);
    const follower = await replica(prefix, timing);
    const call = await leadOn(leader, prefix, 'k');
    call.upstream.next({ kind: 'head', head: { contentType: 'text/plain' } });
    call.upstream.next({ kind: 'chunk', chunk: 'c0 ' });
    const followed = await followOn(follower, 'k');
    await until(() => followed.chunks.length === 1, 'the first chunk');
    await raw.del(call.lease);
    // Longer than a lease with the key gone, the leader still streaming.
    for (let i = 1; i <= 12; i++) {
      await sleep(100);
      call.upstream.next({ kind: 'chunk', chunk: `c${i} ` });
    }
    // Meanwhile the leader has taken its lease back: a newcomer follows this call, it does not make a second one.
    const newcomer = await followOn(await replica(prefix, timing), 'k');
    call.upstream.complete();
    const [first, second] = await Promise.all([followed.ended, newcomer.ended]);
    expect(first.error).toBeUndefined();
    expect(followed.chunks).toEqual(call.leaderSaw);
    expect(second.error).toBeUndefined();
    expect(newcomer.chunks).toEqual(call.leaderSaw);
  }, 20_000);

  it('Redis paused for less than a lease mid-stream: followers go on to the end, nothing is lost or repeated', async () => {
    const timing = { leaseMs: 3_000, pollMs: 50 };
    const prefix = 'paused';
    const leader = await replica(prefix, timing);
    const follower = await replica(prefix, timing);
    const call = await leadOn(leader, prefix, 'k');
    call.upstream.next({ kind: 'head', head: { contentType: 'text/plain' } });
    call.upstream.next({ kind: 'chunk', chunk: 'c0 ' });
    const followed = await followOn(follower, 'k');
    await until(() => followed.chunks.length === 1, 'the first chunk');
    redis.freeze();
    // Several operation timeouts long: the leader's appends and the follower's reads fail meanwhile.
    for (let i = 1; i <= 8; i++) {
      await sleep(100);
      call.upstream.next({ kind: 'chunk', chunk: `c${i} ` });
    }
    redis.thaw();
    call.upstream.next({ kind: 'chunk', chunk: 'c9 ' });
    call.upstream.complete();
    const { error } = await followed.ended;
    expect(error).toBeUndefined();
    expect(followed.chunks).toEqual(call.leaderSaw);
  }, 20_000);

  it('a late joiner whose stream lost its start (evicted) is refused (try again): never the tail of the answer, nor a second call', async () => {
    const timing = { leaseMs: 2_000, pollMs: 50 };
    const prefix = 'late-evicted';
    const leader = await replica(prefix, timing);
    const call = await leadOn(leader, prefix, 'k');
    call.upstream.next({ kind: 'head', head: { contentType: 'text/plain' } });
    call.upstream.next({ kind: 'chunk', chunk: 'c0 ' });
    await sleep(100);
    await raw.del(call.stream);
    call.upstream.next({ kind: 'chunk', chunk: 'c1 ' });
    await sleep(100);
    const late = await followOn(await replica(prefix, timing), 'k');
    call.upstream.next({ kind: 'chunk', chunk: 'c2 ' });
    call.upstream.complete();
    const { error } = await late.ended;
    expect(error).toBeInstanceOf(FlightOutgrownError);
    expect(late.chunks).toEqual([]);
  }, 20_000);

  it('a long stream keeps a bounded backlog in Redis; a follower that keeps up gets all of it, one that falls behind ends with an error, never with a gap', async () => {
    const timing = { leaseMs: 2_000, pollMs: 50, maxBacklogBytes: 16 * 1024 };
    const prefix = 'backlog';
    const leader = await replica(prefix, timing);
    const call = await leadOn(leader, prefix, 'k');
    call.upstream.next({ kind: 'head', head: { contentType: 'text/plain' } });
    const keeping = await followOn(await replica(prefix, timing), 'k');
    const chunk = (i: number) => `${String(i).padStart(4, '0')} ${'x'.repeat(1_000)}`;
    call.upstream.next({ kind: 'chunk', chunk: chunk(0) });
    // Reads only every 1.5 s (after a first read of the head and the first chunk): by its next read the events it
    // needs are trimmed.
    const behind = await followOn(await replica(prefix, { ...timing, pollMs: 1_500 }, { deaf: true }), 'k');
    await until(() => behind.chunks.length === 1, 'the first chunk read behind');
    let largest = 0;
    for (let i = 1; i < 200; i++) {
      call.upstream.next({ kind: 'chunk', chunk: chunk(i) });
      if (i % 20 === 19) {
        await sleep(20);
        const entries = await raw.sendCommand<Array<[string, string[]]>>(['XRANGE', call.stream, '-', '+']);
        largest = Math.max(
          largest,
          entries.reduce((n, [, fields]) => n + fields[1].length, 0),
        );
      }
    }
    call.upstream.complete();
    const [kept, fell] = await Promise.all([keeping.ended, behind.ended]);
    expect(kept.error).toBeUndefined();
    expect(keeping.chunks).toEqual(call.leaderSaw);
    // What the stream held at any point: within the backlog (200 events of 1 KB would be 200 KB).
    expect(largest).toBeGreaterThan(0);
    expect(largest).toBeLessThanOrEqual(16 * 1024);
    expect(fell.error).toBeInstanceOf(RemoteCallError);
    expect((fell.error as RemoteCallError).code).toBe('leader_lost');
    // What it passed on is the answer's start, in order, with no event missing.
    expect(behind.chunks).toEqual(call.leaderSaw.slice(0, behind.chunks.length));
  }, 30_000);
});
