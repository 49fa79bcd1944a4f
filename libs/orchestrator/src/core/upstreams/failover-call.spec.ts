import { afterEach, describe, expect, it } from '@jest/globals';
import { Observable, from } from 'rxjs';
import { NoUpstreamAvailableError } from '../errors.js';
import { StreamedResponse, type CallEvent } from '../events.js';
import type { OrchestratorObserver } from '../observer.js';
import { Orchestrator } from '../orchestrator.js';
import type { RoutePolicy } from '../policy.js';
import type { Upstream, UpstreamHold } from './upstream-pool.js';
import { withFallbacks } from './failover-call.js';

/** An error as an HTTP client reports a status (the gateway's UpstreamHttpError has `status` too). */
class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly retryAfter?: string,
  ) {
    super(`status ${status}`);
  }
}

const refused = () => Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });

function pool(shouldFailover?: (error: unknown) => boolean, limit = 4) {
  const orchestrator = new Orchestrator({
    breaker: { failureThreshold: 2, openMs: 60_000 },
    limits: { a: { limit }, b: { limit } },
    upstreams: {
      llm: {
        members: [
          { name: 'a', target: 'A' },
          { name: 'b', target: 'B' },
        ],
        shouldFailover,
      },
    },
  });
  const policy = orchestrator.policy({ breaker: 'llm', concurrency: true, dedup: true, timeout: 5_000 }, 'chat');
  return { orchestrator, policy, members: orchestrator.upstreams.get('llm')!.members };
}

let open: Orchestrator[] = [];
afterEach(async () => {
  await Promise.all(open.map((o) => o.close()));
  open = [];
});

/** Runs one call whose work answers per upstream target with `answers[target]`; returns the answer and who was asked. */
async function callWith(answers: Record<string, () => Promise<string>>, shouldFailover?: (error: unknown) => boolean) {
  const { orchestrator, policy, members } = pool(shouldFailover);
  open.push(orchestrator);
  const asked: string[] = [];
  const run = () =>
    orchestrator.run<string>(policy, (_signal, upstream) => {
      const target = upstream!.target as string;
      asked.push(target);
      return answers[target]();
    });
  return { run, asked, members, orchestrator };
}

describe('failover over a pool of upstreams', () => {
  it.each([
    ['connection refused', refused],
    ['a 5xx', () => new HttpError(502)],
    ['a 503 (a loading llama.cpp server)', () => new HttpError(503)],
    ['a 429', () => new HttpError(429, '120')],
  ])('%s before the first byte: the next upstream answers', async (_kind, failure) => {
    const { run, asked } = await callWith({ A: () => Promise.reject(failure()), B: () => Promise.resolve('from B') });
    await expect(run()).resolves.toBe('from B');
    expect(asked).toEqual(['A', 'B']);
  });

  it("the caller's own 4xx is not failed over: any upstream would say the same", async () => {
    const { run, asked } = await callWith({
      A: () => Promise.reject(new HttpError(400)),
      B: () => Promise.resolve('from B'),
    });
    await expect(run()).rejects.toMatchObject({ status: 400 });
    expect(asked).toEqual(['A']);
  });

  it('the pool decides which 429s are worth another upstream (e.g. a Retry-After within the budget is relayed)', async () => {
    const beyondBudget = (error: unknown) =>
      !(error instanceof HttpError && error.status === 429 && Number(error.retryAfter) <= 5);
    const { run, asked } = await callWith(
      { A: () => Promise.reject(new HttpError(429, '2')), B: () => Promise.resolve('from B') },
      beyondBudget,
    );
    await expect(run()).rejects.toMatchObject({ status: 429 });
    expect(asked).toEqual(['A']);
  });

  it('an open breaker takes its upstream out of rotation: calls go to the other without trying it', async () => {
    const { run, asked, members } = await callWith({
      A: () => Promise.reject(new HttpError(500)),
      B: () => Promise.resolve('from B'),
    });
    // Two failures open A's breaker (each call still answered, by B).
    await expect(run()).resolves.toBe('from B');
    await expect(run()).resolves.toBe('from B');
    expect(members[0].breaker.state).toBe('open');
    asked.length = 0;
    await expect(run()).resolves.toBe('from B');
    expect(asked).toEqual(['B']);
    expect(members[0].available).toBe(false);
  });

  it('every breaker open: the refusal is the answer, and no upstream is called', async () => {
    const { run, asked, members } = await callWith({
      A: () => Promise.resolve('from A'),
      B: () => Promise.resolve('from B'),
    });
    members.forEach((m) => m.breaker.recordFailure(new HttpError(500)));
    members.forEach((m) => m.breaker.recordFailure(new HttpError(500)));
    expect(members.map((m) => m.breaker.state)).toEqual(['open', 'open']);
    await expect(run()).rejects.toMatchObject({ code: 'circuit_open' });
    expect(asked).toEqual([]);
  });

  it('every upstream failing: the last error is the answer, each upstream tried once', async () => {
    const { run, asked } = await callWith({
      A: () => Promise.reject(refused()),
      B: () => Promise.reject(new HttpError(503)),
    });
    await expect(run()).rejects.toMatchObject({ status: 503 });
    expect(asked).toEqual(['A', 'B']);
  });

  it('a health check that says down (or loading) takes an upstream out of rotation, and back', async () => {
    const { run, asked, members } = await callWith({
      A: () => Promise.resolve('from A'),
      B: () => Promise.resolve('from B'),
    });
    members[0].setHealth('loading', { detail: 'Loading model' });
    await expect(run()).resolves.toBe('from B');
    expect(members[0].snapshot()).toMatchObject({ health: 'loading', available: false, detail: 'Loading model' });
    members[0].setHealth('up');
    await expect(run()).resolves.toBe('from A');
    expect(asked).toEqual(['B', 'A']);
  });

  it('requests go where there is free capacity: slots learnt from each upstream are never exceeded', async () => {
    const { orchestrator, policy, members } = pool(undefined, 8);
    open.push(orchestrator);
    members[0].setHealth('up', { slots: 1 });
    members[1].setHealth('up', { slots: 2 });
    const running: Record<string, number> = { A: 0, B: 0 };
    const most: Record<string, number> = { A: 0, B: 0 };
    const call = (i: number) =>
      orchestrator.run<string>(
        policy,
        async (_signal, upstream) => {
          const t = upstream!.target as string;
          most[t] = Math.max(most[t], ++running[t]);
          await new Promise((resolve) => setTimeout(resolve, 20));
          running[t]--;
          return t;
        },
        { key: `k${i}` },
      );
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => call(i)));
    expect(most).toEqual({ A: 1, B: 2 });
    expect(answers.filter((a) => a === 'B').length).toBeGreaterThan(answers.filter((a) => a === 'A').length);
  });

  it('identical requests share one flight whichever upstream serves it, failover included', async () => {
    const { orchestrator, policy } = pool();
    open.push(orchestrator);
    let calls = 0;
    const work = (_signal: AbortSignal, upstream?: Upstream) => {
      calls++;
      return upstream!.target === 'A'
        ? Promise.reject(refused())
        : new Promise<string>((resolve) => setTimeout(() => resolve('from B'), 20));
    };
    const answers = await Promise.all([1, 2, 3].map(() => orchestrator.run<string>(policy, work, { key: 'same' })));
    expect(answers).toEqual(['from B', 'from B', 'from B']);
    expect(calls).toBe(2); // one flight: A refused, B answered
  });
});

describe('a hold while no upstream is in rotation', () => {
  /** A pool of `targets` with a hold, its policy, and what its observer saw of holds and refusals. */
  function held(hold: UpstreamHold, targets = ['A', 'B']) {
    const orchestrator = new Orchestrator({
      breaker: { failureThreshold: 2, openMs: 60_000 },
      upstreams: { llm: { members: targets.map((t) => ({ name: t.toLowerCase(), target: t })), hold } },
    });
    open.push(orchestrator);
    const seen: string[] = [];
    const observer: OrchestratorObserver = {
      held: (pool, outcome) => seen.push(`held ${pool} ${outcome}`),
      refused: (upstream, reason) => seen.push(`refused ${upstream} ${reason}`),
    };
    orchestrator.observe(observer);
    const policy = orchestrator.policy({ breaker: 'llm', concurrency: true, dedup: true, timeout: 5_000 }, 'chat');
    const pool = orchestrator.upstreams.get('llm')!;
    const asked: string[] = [];
    const run = (key: string, signal?: AbortSignal) =>
      orchestrator.run<string>(
        policy,
        async (_signal, upstream) => {
          asked.push(upstream!.target as string);
          return `from ${String(upstream!.target)}`;
        },
        { key, signal },
      );
    return { orchestrator, pool, run, asked, seen };
  }

  /** Until the pool holds `count` calls (a condition, polled). */
  async function holding(pool: { held: number }, count: number): Promise<void> {
    while (pool.held !== count) await new Promise((resolve) => setTimeout(resolve, 1));
  }

  it('every upstream down or loading: the call waits, and goes on to the first that comes back; an open breaker is not waited for', async () => {
    const { pool, run, asked, seen } = held({ ms: 60_000 });
    pool.members[0].setHealth('down');
    pool.members[1].setHealth('loading');
    const answer = run('k');
    await holding(pool, 1);
    expect(asked).toEqual([]);
    pool.members[1].setHealth('up');
    await expect(answer).resolves.toBe('from B');
    expect(pool.held).toBe(0);
    expect(seen).toEqual(['held llm served']);

    // In rotation by health but every breaker open: refused at once (circuit_open), never held.
    pool.members[0].setHealth('up');
    for (const member of pool.members)
      for (let i = 0; i < 2; i++) member.breaker.recordFailure(Object.assign(new Error('500'), { status: 500 }));
    await expect(run('k2')).rejects.toMatchObject({ code: 'circuit_open' });
    expect(asked).toEqual(['B']);
    expect(seen.filter((line) => line.startsWith('held'))).toEqual(['held llm served']);
  });

  it('a pool of one is held alike', async () => {
    const { pool, run, seen } = held({ ms: 60_000 }, ['A']);
    pool.members[0].setHealth('loading');
    const answer = run('k');
    await holding(pool, 1);
    pool.members[0].setHealth('up');
    await expect(answer).resolves.toBe('from A');
    expect(seen).toEqual(['held llm served']);
  });

  it('none back within the hold: refused with no_upstream_available (503, Retry-After), no upstream called', async () => {
    const { pool, run, asked, seen } = held({ ms: 20 });
    pool.members.forEach((m) => m.setHealth('down'));
    const refusal = await run('k').catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(NoUpstreamAvailableError);
    expect(refusal).toMatchObject({
      code: 'no_upstream_available',
      status: 503,
      retryAfterSeconds: 1,
      retryable: false,
      heldMs: 20,
    });
    expect(asked).toEqual([]);
    expect(pool.held).toBe(0);
    expect(seen).toEqual(['held llm expired', 'refused llm no_upstream_available']);
  });

  it('a hold of 0 refuses at once; the hold is full: refused at once too', async () => {
    const none = held({ ms: 0 });
    none.pool.members.forEach((m) => m.setHealth('down'));
    await expect(none.run('k')).rejects.toMatchObject({ code: 'no_upstream_available', heldMs: 0 });
    expect(none.seen).toEqual(['refused llm no_upstream_available']);

    const full = held({ ms: 60_000, maxHeld: 1 });
    full.pool.members.forEach((m) => m.setHealth('down'));
    const first = full.run('first');
    await holding(full.pool, 1);
    await expect(full.run('second')).rejects.toMatchObject({ code: 'no_upstream_available' });
    full.pool.members[0].setHealth('up');
    await expect(first).resolves.toBe('from A');
  });

  it('every caller gone: the wait ends at once, and nothing is called later', async () => {
    const { pool, run, asked, seen } = held({ ms: 60_000 });
    pool.members.forEach((m) => m.setHealth('down'));
    const left = new AbortController();
    const answer = run('k', left.signal).catch((error: unknown) => error);
    await holding(pool, 1);
    left.abort();
    await answer;
    await holding(pool, 0);
    expect(seen).toEqual(['held llm left']);
    pool.members[0].setHealth('up');
    expect(asked).toEqual([]);
  });
});

describe('failover and streams: never after the first byte', () => {
  const stream = (chunks: Array<string | Error>, delayMs = 0): StreamedResponse =>
    new StreamedResponse(
      new Observable<string>((subscriber) => {
        let i = 0;
        const step = () => {
          const next = chunks[i++];
          if (next === undefined) return subscriber.complete();
          if (next instanceof Error) return subscriber.error(next);
          subscriber.next(next);
          setTimeout(step, delayMs);
        };
        const timer = setTimeout(step, delayMs);
        return () => clearTimeout(timer);
      }),
      { contentType: 'text/event-stream' },
    );

  async function events(byTarget: Record<string, () => StreamedResponse>) {
    const { orchestrator, policy } = pool();
    open.push(orchestrator);
    const asked: string[] = [];
    const started = await orchestrator.start<unknown>(policy, { key: 'stream' }, (_signal, upstream) => {
      const target = upstream!.target as string;
      asked.push(target);
      return new Observable<CallEvent<unknown>>((subscriber) => {
        const answer = byTarget[target]();
        subscriber.next({ kind: 'head', head: answer.head });
        return from(answer.chunks).subscribe({
          next: (chunk) => subscriber.next({ kind: 'chunk', chunk }),
          error: (error: unknown) => subscriber.error(error),
          complete: () => subscriber.complete(),
        });
      });
    });
    const seen: string[] = [];
    let failure: unknown;
    await new Promise<void>((resolve) =>
      started.events.subscribe({
        next: (e) => seen.push(e.kind === 'chunk' ? String(e.chunk) : e.kind),
        error: (error: unknown) => {
          failure = error;
          resolve();
        },
        complete: resolve,
      }),
    );
    return { asked, seen, failure };
  }

  it('a stream that fails before its first chunk fails over; the caller sees one head and the other stream', async () => {
    const { asked, seen, failure } = await events({
      A: () => stream([new HttpError(502)]),
      B: () => stream(['b1', 'b2']),
    });
    expect(failure).toBeUndefined();
    expect(asked).toEqual(['A', 'B']);
    expect(seen).toEqual(['head', 'b1', 'b2']);
  });

  it('a stream that breaks after its first chunk is not failed over: the caller gets the error after what it had', async () => {
    const broken = Object.assign(new Error('socket closed'), { code: 'UND_ERR_SOCKET' });
    const { asked, seen, failure } = await events({ A: () => stream(['a1', broken]), B: () => stream(['b1']) });
    expect(asked).toEqual(['A']);
    expect(seen).toEqual(['head', 'a1']);
    expect(failure).toBe(broken);
  });
});

describe('a pool of one', () => {
  it("is exactly its member's breaker and limiter, with no failover in between; the work is told the upstream", async () => {
    const orchestrator = new Orchestrator({
      limits: { only: { limit: 3 } },
      upstreams: { llm: { members: [{ name: 'only', target: 'http://x' }] } },
    });
    open.push(orchestrator);
    const policy = orchestrator.policy({ breaker: 'llm', concurrency: true }, 'chat');
    expect(policy.failover).toBeUndefined();
    expect(policy.breaker?.name).toBe('only');
    expect(policy.limiter?.limit).toBe(3);
    await expect(orchestrator.run(policy, async (_signal, upstream) => upstream?.target)).resolves.toBe('http://x');
    expect(orchestrator.health().upstreams).toEqual([
      expect.objectContaining({ name: 'only', pool: 'llm', health: 'up', limit: 3, inFlight: 0 }),
    ]);
  });
});

describe('a chain of pools: the fallbacks once every upstream of the primary failed before the first byte', () => {
  /** Pool `llm` (A, B, or A alone) and pools `backup` (C) and `last` (D); the policy over `llm` with both fallbacks. */
  function chain(primary: string[] = ['A', 'B']) {
    const names = [...primary, 'C', 'D'];
    const orchestrator = new Orchestrator({
      breaker: { failureThreshold: 2, openMs: 60_000 },
      retry: { retries: 1, baseDelayMs: 1 },
      limits: Object.fromEntries(names.map((n) => [n, { limit: 4 }])),
      upstreams: {
        llm: { members: primary.map((n) => ({ name: n, target: n })) },
        backup: { members: [{ name: 'C', target: 'C' }] },
        last: { members: [{ name: 'D', target: 'D' }] },
      },
    });
    open.push(orchestrator);
    const pools = orchestrator.upstreams;
    const base = orchestrator.policy(
      { breaker: 'llm', concurrency: true, dedup: true, timeout: 5_000, retry: true },
      'chat',
    );
    const policy = withFallbacks(base, pools.get('llm')!, [pools.get('backup')!, pools.get('last')!]);
    return { orchestrator, policy, base, pools };
  }

  async function ask(
    policy: RoutePolicy,
    orchestrator: Orchestrator,
    answers: Record<string, () => Promise<string>>,
    key?: string,
  ) {
    const asked: string[] = [];
    const answer = await orchestrator
      .run<string>(
        policy,
        (_signal, upstream) => {
          const target = upstream!.target as string;
          asked.push(target);
          return (answers[target] ?? (() => Promise.resolve(`from ${target}`)))();
        },
        key === undefined ? undefined : { key },
      )
      .catch((error: unknown) => error);
    return { answer, asked };
  }

  it("the next pool answers once each upstream of the one before has failed over, in the chain's order", async () => {
    const { orchestrator, policy } = chain();
    const { answer, asked } = await ask(policy, orchestrator, {
      A: () => Promise.reject(refused()),
      B: () => Promise.reject(new HttpError(503)),
      C: () => Promise.reject(new HttpError(502)),
    });
    expect(answer).toBe('from D');
    expect(asked).toEqual(['A', 'B', 'C', 'D']);
  });

  it('the primary answers when it can: the fallbacks are not asked', async () => {
    const { orchestrator, policy } = chain();
    const { answer, asked } = await ask(policy, orchestrator, { A: () => Promise.reject(refused()) });
    expect(answer).toBe('from B');
    expect(asked).toEqual(['A', 'B']);
  });

  it("every breaker of the primary open: the fallback answers at once, and the primary's upstreams are not called", async () => {
    const { orchestrator, policy, pools } = chain();
    for (const member of pools.get('llm')!.members)
      for (let i = 0; i < 2; i++) member.breaker.recordFailure(new HttpError(500));
    const { answer, asked } = await ask(policy, orchestrator, {});
    expect(answer).toBe('from C');
    expect(asked).toEqual(['C']);
  });

  it("the caller's own 4xx ends the call where it is: no fallback is asked", async () => {
    const { orchestrator, policy } = chain();
    const { answer, asked } = await ask(policy, orchestrator, { A: () => Promise.reject(new HttpError(400)) });
    expect(answer).toMatchObject({ status: 400 });
    expect(asked).toEqual(['A']);
  });

  it('a sole primary upstream keeps its retries, then the fallback answers; a fallback is not retried', async () => {
    const { orchestrator, policy } = chain(['A']);
    const { answer, asked } = await ask(policy, orchestrator, {
      A: () => Promise.reject(new HttpError(503)),
      C: () => Promise.reject(new HttpError(503)),
    });
    expect(answer).toBe('from D');
    expect(asked).toEqual(['A', 'A', 'C', 'D']);
  });

  it('identical requests share one flight while a fallback serves it', async () => {
    const { orchestrator, policy, pools } = chain();
    for (const member of pools.get('llm')!.members)
      for (let i = 0; i < 2; i++) member.breaker.recordFailure(new HttpError(500));
    let calls = 0;
    const work = (_signal: AbortSignal, upstream?: Upstream) => {
      calls++;
      return new Promise<string>((resolve) => setTimeout(() => resolve(`from ${String(upstream!.target)}`), 20));
    };
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => orchestrator.run<string>(policy, work, { key: 'same' })),
    );
    expect(new Set(answers)).toEqual(new Set(['from C']));
    expect(calls).toBe(1);
  });

  it('without fallbacks the policy is left as it is; a policy over another pool is refused', () => {
    const { policy, base, pools } = chain();
    expect(withFallbacks(base, pools.get('llm')!, [])).toBe(base);
    expect(() => withFallbacks(policy, pools.get('backup')!, [pools.get('last')!])).toThrow(
      /does not send its calls to pool "backup"/,
    );
  });
});
