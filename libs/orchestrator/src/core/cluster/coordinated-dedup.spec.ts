import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { Keyv } from 'keyv';
import { Observable, ReplaySubject, lastValueFrom, toArray } from 'rxjs';
import type { CallEvent } from '../events.js';
import { Orchestrator, type OrchestratorOptions } from '../orchestrator.js';
import { RedisCoordinator, type RedisCommands, type RedisSubscriber } from './redis-coordinator.js';
import type { FlightCoordinator, BreakerCoordinator, FollowClaim, LeadClaim } from './coordination.js';

/**
 * In-process singleflight is the floor, the fleet the overlay: whatever the
 * shared window and the coordinator do (slow, frozen, failing), identical
 * requests in one process make one call, and `joined` means joined.
 */

/** A Redis that accepts commands and never answers (SIGSTOPped). */
const frozenRedis = (): RedisCommands & RedisSubscriber => ({
  sendCommand: () => new Promise(() => undefined),
  subscribe: () => new Promise(() => undefined),
  unsubscribe: async () => undefined,
});

/** A Keyv store that never answers. */
const frozenStore = () =>
  new Keyv({
    store: {
      get: () => new Promise(() => undefined),
      set: () => new Promise(() => undefined),
      delete: () => new Promise(() => undefined),
      clear: () => new Promise(() => undefined),
      on: () => undefined,
    } as never,
  });

/** Work that counts its calls and answers after `ms`. */
function counted(ms = 20) {
  let calls = 0;
  const work = () => {
    calls++;
    return new Promise<string>((resolve) => setTimeout(() => resolve(`answer ${calls}`), ms));
  };
  return { work, calls: () => calls };
}

/** A coordinator of the test's own: claims answered as `claim` says, breakers left alone. */
function coordinator(
  claim: (key: string) => Promise<LeadClaim | FollowClaim<unknown> | undefined>,
): FlightCoordinator & BreakerCoordinator {
  return {
    claim: claim as FlightCoordinator['claim'],
    countFailure: async () => undefined,
    resetFailures: async () => undefined,
    announce: async () => undefined,
    watch: async () => undefined,
    isProber: async () => true,
  };
}

describe('identical requests in one process share one call, whatever the fleet does', () => {
  const closing: Array<() => unknown> = [];
  afterEach(async () => {
    for (const close of closing.splice(0)) await close();
  });

  const orchestrator = (options: OrchestratorOptions) => {
    const made = new Orchestrator(options);
    closing.push(() => made.close());
    return made;
  };

  async function herd(made: Orchestrator, count: number, work: () => Promise<string>) {
    const policy = made.policy({ dedup: true });
    const answers = await Promise.all(
      Array.from({ length: count }, () => made.run(policy, work, { key: 'same prompt' })),
    );
    return { answers, outcomes: { ...made.outcomes } };
  }

  it('Redis frozen (coordinator and window): a herd of 100 makes 1 call; 1 miss, 99 joined', async () => {
    const redis = frozenRedis();
    const coord = new RedisCoordinator({ client: redis, subscriber: redis, opTimeoutMs: 50 });
    closing.push(() => coord.close());
    const made = orchestrator({ coordinator: coord, windowStores: [frozenStore()], dedup: { storeTimeoutMs: 50 } });
    const { work, calls } = counted();
    const { answers, outcomes } = await herd(made, 100, work);
    expect(calls()).toBe(1);
    expect(new Set(answers)).toEqual(new Set(['answer 1']));
    expect(outcomes).toEqual({ miss: 1, joined: 99, cached: 0 });
    expect(coord.health().state).toBe('degraded');
  });

  it('a coordinator that is slow to answer a claim: every request meanwhile joins the one local flight', async () => {
    const claims = jest.fn(() => new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 30)));
    const made = orchestrator({ coordinator: coordinator(claims) });
    const { work, calls } = counted();
    const { outcomes } = await herd(made, 100, work);
    expect(claims).toHaveBeenCalledTimes(1);
    expect(calls()).toBe(1);
    expect(outcomes).toEqual({ miss: 1, joined: 99, cached: 0 });
  });

  it('a coordinator that throws is a coordinator that is away: one call here', async () => {
    const claims = jest.fn(() => Promise.reject<undefined>(new Error('connection reset')));
    const made = orchestrator({ coordinator: coordinator(claims) });
    const { work, calls } = counted();
    const { answers } = await herd(made, 50, work);
    expect(calls()).toBe(1);
    expect(new Set(answers).size).toBe(1);
  });

  it('another replica leads: one claim, no call here, every request joined to its events', async () => {
    const remote = new ReplaySubject<CallEvent<string>>(); // a followed call is read from its first event
    const claims = jest.fn(async (): Promise<FollowClaim<unknown>> => ({
      role: 'follow',
      events: remote.asObservable(),
    }));
    const made = orchestrator({ coordinator: coordinator(claims) });
    const { work, calls } = counted();
    const pending = herd(made, 100, work);
    await new Promise((resolve) => setTimeout(resolve, 10));
    remote.next({ kind: 'value', value: 'from the leader' });
    remote.complete();
    const { answers, outcomes } = await pending;
    expect(claims).toHaveBeenCalledTimes(1);
    expect(calls()).toBe(0);
    expect(new Set(answers)).toEqual(new Set(['from the leader']));
    expect(outcomes).toEqual({ miss: 0, joined: 100, cached: 0 });
  });

  it('every caller gone before a won claim is used: the claim is given back (the fleet is told at once)', async () => {
    let published: Observable<CallEvent<unknown>> | undefined;
    let given = 0;
    const claim: LeadClaim = {
      role: 'lead',
      publish: <T>(events: Observable<CallEvent<T>>) => {
        published = events;
        return new Observable<CallEvent<T>>((subscriber) => {
          const inner = events.subscribe(subscriber);
          return () => {
            given++;
            inner.unsubscribe();
          };
        });
      },
    };
    let answer!: (value: LeadClaim) => void;
    const claims = jest.fn(() => new Promise<LeadClaim>((resolve) => (answer = resolve)));
    const made = orchestrator({ coordinator: coordinator(claims) });
    const policy = made.policy({ dedup: true });
    const work = jest.fn(() => new Observable<CallEvent<string>>(() => undefined));
    const leader = made.start(policy, { key: 'k' }, work);
    // A second caller joins the flight at once, then leaves: nobody waits any more.
    const joiner = made.startLocal(policy, { key: 'k' }, work);
    expect(joiner?.outcome).toBe('joined');
    joiner!.events.subscribe().unsubscribe();
    answer(claim);
    await leader;
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(published).toBeDefined();
    expect(given).toBe(1);
    expect(work).not.toHaveBeenCalled();
  });

  it('a stream replayed to local joiners of a followed call arrives whole, in order', async () => {
    const remote = new ReplaySubject<CallEvent<string>>(); // a followed call is read from its first event
    const made = orchestrator({
      coordinator: coordinator(async () => ({ role: 'follow', events: remote.asObservable() })),
    });
    const policy = made.policy({ dedup: true });
    const work = () => new Observable<CallEvent<string>>(() => undefined);
    const first = await made.start(policy, { key: 's' }, work);
    const second = await made.start(policy, { key: 's' }, work);
    expect([first.outcome, second.outcome]).toEqual(['joined', 'joined']);
    const all = Promise.all([first, second].map((s) => lastValueFrom(s.events.pipe(toArray()))));
    remote.next({ kind: 'head', head: { contentType: 'text/event-stream' } });
    remote.next({ kind: 'chunk', chunk: 'data: a\n\n' });
    remote.next({ kind: 'chunk', chunk: 'data: b\n\n' });
    remote.complete();
    for (const events of await all)
      expect(events.map((e) => (e.kind === 'chunk' ? e.chunk : e.kind))).toEqual([
        'head',
        'data: a\n\n',
        'data: b\n\n',
      ]);
  });
});
