import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { Observable } from 'rxjs';
import type { CallEvent } from '../events.js';
import { Orchestrator } from '../orchestrator.js';
import type { RoutePolicy } from '../policy.js';
import type { Upstream } from './upstream-pool.js';
import { withFallbacks } from './failover-call.js';

/**
 * Members of a dynamic pool come and go while calls run: one added waits for
 * its first good health check, one removed gets no new call and finishes
 * those under way (a stream to the end) before its breaker and limiter go.
 */

class HttpError extends Error {
  constructor(readonly status: number) {
    super(`status ${status}`);
  }
}

let orchestrator: Orchestrator;
let policy: RoutePolicy;
/** Each call's upstream, in order. */
let asked: string[];

function setUp(members: string[] = ['a']) {
  orchestrator = new Orchestrator({
    breaker: { failureThreshold: 5, openMs: 60_000 },
    concurrency: { limit: 4 },
    upstreams: { llm: { members: members.map((name) => ({ name, target: name })), dynamic: true } },
  });
  policy = orchestrator.policy({ breaker: 'llm', concurrency: true }, 'chat');
  asked = [];
}

const pool = () => orchestrator.upstreams.get('llm')!;

/** A plain call whose answer is `answers[target]` (an error rejects it). */
function call(answers: Record<string, string | Error>): Promise<string> {
  return orchestrator.run<string>(policy, async (_signal, upstream) => {
    const target = upstream!.target as string;
    asked.push(target);
    const answer = answers[target];
    if (answer instanceof Error) throw answer;
    return answer;
  });
}

/** A stream from whichever member the call goes to: one chunk every 100 ms (fake timers), `count` of them. */
function stream(count: number): { chunks: string[]; ended: Promise<void>; upstream: () => string | undefined } {
  const chunks: string[] = [];
  let served: string | undefined;
  const ended = orchestrator
    .start<string>(policy, {}, (_signal, upstream) => {
      served = upstream!.target as string;
      asked.push(served);
      return new Observable<CallEvent<string>>((subscriber) => {
        subscriber.next({ kind: 'head', head: { contentType: 'text/event-stream' } });
        let sent = 0;
        const timer = setInterval(() => {
          subscriber.next({ kind: 'chunk', chunk: `${served}-${++sent}` });
          if (sent === count) subscriber.complete();
        }, 100);
        return () => clearInterval(timer);
      });
    })
    .then(
      (started) =>
        new Promise<void>((resolve, reject) =>
          started.events.subscribe({
            next: (e) => e.kind === 'chunk' && chunks.push(String(e.chunk)),
            error: reject,
            complete: resolve,
          }),
        ),
    );
  return { chunks, ended, upstream: () => served };
}

beforeEach(() => {
  jest.useFakeTimers();
});
afterEach(async () => {
  jest.useRealTimers();
  await orchestrator?.close();
});

describe('a member added to a dynamic pool', () => {
  it('gets no call until a health check says it is up, even when every other member fails', async () => {
    setUp(['a']);
    const b = orchestrator.upstreams.add('llm', { name: 'b', target: 'b' });
    expect(b.snapshot()).toMatchObject({ name: 'b', pool: 'llm', health: 'pending', available: false });
    expect(
      pool()
        .order()
        .map((m) => m.name),
    ).toEqual(['a']);
    // The policy was resolved before the member came: it still sees the pool as it is now.
    await expect(call({ a: new HttpError(503), b: 'from b' })).rejects.toMatchObject({ status: 503 });
    expect(asked).toEqual(['a']);

    b.setHealth('up');
    await expect(call({ a: new HttpError(503), b: 'from b' })).resolves.toBe('from b');
    expect(asked).toEqual(['a', 'a', 'b']);
  });

  it('a failed first check keeps it out (not even tried last); the first good one lets it in', async () => {
    setUp(['a']);
    const b = orchestrator.upstreams.add('llm', { name: 'b', target: 'b' });
    b.setHealth('down', { detail: 'ECONNREFUSED' });
    expect(
      pool()
        .order()
        .map((m) => m.name),
    ).toEqual(['a']);
    b.setHealth('up');
    pool().member('a')!.setHealth('down');
    // Now `a` is the one out of rotation: still tried, but last.
    expect(
      pool()
        .order()
        .map((m) => m.name),
    ).toEqual(['b', 'a']);
  });

  it('has a breaker and a limiter of its own, with the settings it was added with', () => {
    setUp(['a']);
    const b = orchestrator.upstreams.add(
      'llm',
      { name: 'b', target: 'b' },
      { concurrency: { limit: 2 }, breaker: { failureThreshold: 1 } },
    );
    expect(b.limiter.limit).toBe(2);
    expect(
      orchestrator
        .health()
        .limiters.map((l) => l.name)
        .sort(),
    ).toEqual(['a', 'b']);
    b.setHealth('up');
    b.breaker.recordFailure(new HttpError(500));
    expect(b.breaker.state).toBe('open');
    expect(pool().member('a')!.breaker.state).toBe('closed');
  });

  it('makes the pool it names when there is none (a fallback group that appears)', async () => {
    setUp(['a']);
    const c = orchestrator.upstreams.add('backup', { name: 'c', target: 'c' });
    c.setHealth('up');
    const chained = withFallbacks(policy, pool(), [orchestrator.upstreams.get('backup')!]);
    await expect(
      orchestrator.run<string>(chained, async (_signal, upstream) => {
        if (upstream!.target === 'a') throw new HttpError(502);
        return `from ${String(upstream!.target)}`;
      }),
    ).resolves.toBe('from c');
    expect(orchestrator.health().upstreams.map((u) => `${u.pool}/${u.name}`)).toEqual(['llm/a', 'backup/c']);
  });
});

describe('a member removed from a dynamic pool', () => {
  it('gets no new call; its stream in flight finishes whole; then it leaves, its breaker and limiter released', async () => {
    setUp(['a', 'b']);
    pool().member('b')!.setHealth('down');
    const long = stream(5);
    await jest.advanceTimersByTimeAsync(100);
    expect(long.upstream()).toBe('a');
    expect(long.chunks).toEqual(['a-1']);
    pool().member('b')!.setHealth('up');

    let drained = false;
    const removal = orchestrator.upstreams.remove('llm', 'a').then(() => (drained = true));
    expect(pool().member('a')!.snapshot()).toMatchObject({ draining: true, available: false, inFlight: 1 });
    // New calls go to b only, even when b fails: a is not tried.
    await expect(call({ a: 'from a', b: new HttpError(503) })).rejects.toMatchObject({ status: 503 });
    await expect(call({ a: 'from a', b: 'from b' })).resolves.toBe('from b');
    expect(asked).toEqual(['a', 'b', 'b']);

    await jest.advanceTimersByTimeAsync(300);
    expect(drained).toBe(false);
    expect(pool().members.map((m) => m.name)).toEqual(['a', 'b']);
    await jest.advanceTimersByTimeAsync(100);
    await long.ended;
    await removal;
    expect(long.chunks).toEqual(['a-1', 'a-2', 'a-3', 'a-4', 'a-5']);
    expect(pool().members.map((m) => m.name)).toEqual(['b']);
    const health = orchestrator.health();
    expect(health.upstreams.map((u) => u.name)).toEqual(['b']);
    expect(health.breakers.map((x) => x.name)).toEqual(['b']);
    expect(health.limiters.map((x) => x.name)).toEqual(['b']);
  });

  it('without calls in flight, leaves at once', async () => {
    setUp(['a', 'b']);
    await orchestrator.upstreams.remove('llm', 'b');
    expect(pool().members.map((m) => m.name)).toEqual(['a']);
    // Removing what is not there (any more) is a no-op.
    await orchestrator.upstreams.remove('llm', 'b');
    await orchestrator.upstreams.remove('nowhere', 'b');
  });

  it('waits for calls still queued for its slot, and sends them there', async () => {
    orchestrator = new Orchestrator({
      concurrency: { limit: 1 },
      upstreams: { llm: { members: [{ name: 'a', target: 'a' }], dynamic: true } },
    });
    policy = orchestrator.policy({ breaker: 'llm', concurrency: true }, 'chat');
    const slow = (label: string) =>
      orchestrator.run<string>(
        policy,
        (_signal, upstream) =>
          new Promise<string>((resolve) => setTimeout(() => resolve(`${label} ${String(upstream!.target)}`), 100)),
      );
    const first = slow('first');
    const second = slow('second');
    await jest.advanceTimersByTimeAsync(0);
    expect(pool().member('a')!.snapshot()).toMatchObject({ inFlight: 1, queued: 1 });
    let drained = false;
    const removal = orchestrator.upstreams.remove('llm', 'a').then(() => (drained = true));
    await jest.advanceTimersByTimeAsync(100);
    await expect(first).resolves.toBe('first a');
    expect(drained).toBe(false);
    await jest.advanceTimersByTimeAsync(100);
    await expect(second).resolves.toBe('second a');
    await removal;
  });

  it('with every member gone, a call is refused as an open breaker refuses, and no work runs', async () => {
    setUp(['a']);
    await orchestrator.upstreams.remove('llm', 'a');
    await expect(call({ a: 'from a' })).rejects.toMatchObject({ code: 'circuit_open', status: 503 });
    expect(asked).toEqual([]);
  });

  it('replaced under the same name: the newcomer has its own breaker; the old one keeps its own until it drains', async () => {
    setUp(['a', 'b']);
    const old = pool().member('a')!;
    const long = stream(2);
    await jest.advanceTimersByTimeAsync(0);
    expect(long.upstream()).toBe('a');
    const removal = orchestrator.upstreams.remove('llm', 'a');
    const fresh: Upstream = orchestrator.upstreams.add('llm', { name: 'a', target: 'a2' });
    expect(fresh.breaker).not.toBe(old.breaker);
    expect(pool().member('a')).toBe(fresh);
    expect(orchestrator.health().upstreams.map((u) => [u.name, u.health, u.draining ?? false])).toEqual([
      ['a', 'up', true],
      ['b', 'up', false],
      ['a', 'pending', false],
    ]);
    await jest.advanceTimersByTimeAsync(200);
    await long.ended;
    await removal;
    // The newcomer's breaker and limiter stay; only the old member's were let go.
    expect(
      orchestrator
        .health()
        .breakers.map((x) => x.name)
        .sort(),
    ).toEqual(['a', 'b']);
    expect(orchestrator.breakerState('a')).toBeDefined();
    fresh.setHealth('up');
    pool().member('b')!.setHealth('down');
    await expect(call({ a2: 'from a2', b: 'from b' })).resolves.toBe('from a2');
  });
});

describe('a pool that is not dynamic', () => {
  it('refuses to change: policies over its one member were bound to it', () => {
    orchestrator = new Orchestrator({ upstreams: { llm: { members: [{ name: 'a', target: 'a' }] } } });
    expect(() => orchestrator.upstreams.add('llm', { name: 'b', target: 'b' })).toThrow(/not dynamic/);
    expect(() => pool().remove('a')).toThrow(/not dynamic/);
  });
});
