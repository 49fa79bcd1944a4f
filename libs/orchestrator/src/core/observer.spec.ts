import { describe, expect, it } from '@jest/globals';
import { UpstreamTimeoutError } from './errors.js';
import type { OrchestratorObserver } from './observer.js';
import { Orchestrator } from './orchestrator.js';

/** Records every event as a line, in order. */
function recorder() {
  const events: string[] = [];
  const observer: Required<OrchestratorObserver> = {
    request: (route, upstream, outcome) => events.push(`request ${route} ${upstream} ${outcome}`),
    breakerTransition: (name, from, to) => events.push(`breaker ${name} ${from}->${to}`),
    refused: (upstream, reason) => events.push(`refused ${upstream} ${reason}`),
    timedOut: (upstream, phase) => events.push(`timeout ${upstream} ${phase}`),
    retried: (upstream) => events.push(`retry ${upstream}`),
    queueWait: (upstream, ms) => events.push(`queue ${upstream} ${ms === 0 ? '0' : '>0'}`),
    held: (pool, outcome) => events.push(`held ${pool} ${outcome}`),
    upstreamCall: (upstream, _ms, result) => events.push(`upstream ${upstream} ${result}`),
    storeState: (state) => events.push(`store ${state}`),
  };
  return { events, observer };
}

const fail = (status: number) => Object.assign(new Error(`upstream ${status}`), { status });

describe('Orchestrator.observe', () => {
  it('reports a herd as one miss and the rest joined, with one upstream attempt', async () => {
    const orchestrator = new Orchestrator();
    const { events, observer } = recorder();
    orchestrator.observe(observer);
    const policy = orchestrator.policy({ dedup: true, breaker: 'llm', concurrency: 2 }, 'chat');
    let calls = 0;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const work = async () => {
      calls++;
      await gate;
      return 'answer';
    };
    const all = Array.from({ length: 5 }, () => orchestrator.run(policy, work, { key: 'same' }));
    await new Promise((resolve) => setImmediate(resolve));
    release();
    await Promise.all(all);
    expect(calls).toBe(1);
    expect(events.filter((e) => e.startsWith('request'))).toEqual([
      'request chat llm miss',
      'request chat llm joined',
      'request chat llm joined',
      'request chat llm joined',
      'request chat llm joined',
    ]);
    expect(events.filter((e) => !e.startsWith('request'))).toEqual(['queue llm 0', 'upstream llm ok']);
    // Later, from the window.
    await orchestrator.run(policy, work, { key: 'same' });
    expect(events.at(-1)).toBe('request chat llm cached');
    await orchestrator.close();
  });

  it('reports failures, the breaker opening, refusals, timeouts and retries', async () => {
    const orchestrator = new Orchestrator({ breakers: { llm: { failureThreshold: 2, openMs: 60_000 } } });
    const { events, observer } = recorder();
    orchestrator.observe(observer);
    const policy = orchestrator.policy(
      { breaker: 'llm', retry: { retries: 1, baseDelayMs: 1, maxDelayMs: 1 } },
      'chat',
    );
    await expect(orchestrator.run(policy, async () => Promise.reject(fail(502)))).rejects.toThrow('upstream 502');
    expect(events).toEqual([
      'request chat llm none',
      'upstream llm error',
      'retry llm',
      'upstream llm error',
      'breaker llm closed->open',
    ]);
    events.length = 0;
    await expect(orchestrator.run(policy, async () => 'never')).rejects.toMatchObject({ code: 'circuit_open' });
    expect(events).toEqual(['request chat llm none', 'refused llm circuit_open']);
    await orchestrator.close();

    const timed = new Orchestrator();
    const second = recorder();
    timed.observe(second.observer);
    const slow = timed.policy({ timeout: 5, breaker: 'slow' }, 'slow-route');
    await expect(
      timed.run(
        slow,
        (signal) => new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason))),
      ),
    ).rejects.toBeInstanceOf(UpstreamTimeoutError);
    expect(second.events).toEqual(['request slow-route slow none', 'timeout slow total', 'upstream slow timeout']);
    await timed.close();
  });

  it('reports a queue wait and a full queue', async () => {
    const orchestrator = new Orchestrator();
    const { events, observer } = recorder();
    orchestrator.observe(observer);
    const policy = orchestrator.policy({ concurrency: { limit: 1, queueSize: 1 } }, 'q');
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const first = orchestrator.run(policy, () => gate.then(() => 1));
    const second = orchestrator.run(policy, async () => 2);
    const third = orchestrator.run(policy, async () => 3);
    await expect(third).rejects.toMatchObject({ code: 'overloaded' });
    release();
    await Promise.all([first, second]);
    expect(events.filter((e) => e.startsWith('queue') || e.startsWith('refused'))).toEqual([
      'queue q 0',
      'refused q overloaded',
      'queue q >0',
    ]);
    await orchestrator.close();
  });

  it('stops telling an observer once it unsubscribes, and an observer that throws breaks nothing', async () => {
    const orchestrator = new Orchestrator();
    const { events, observer } = recorder();
    const stop = orchestrator.observe(observer);
    orchestrator.observe({
      request: () => {
        throw new Error('observer bug');
      },
    });
    const policy = orchestrator.policy({ dedup: true }, 'p');
    await expect(orchestrator.run(policy, async () => 'a', { key: 'k1' })).resolves.toBe('a');
    expect(events).toEqual(['request p p miss', 'upstream p ok']);
    stop();
    await orchestrator.run(policy, async () => 'b', { key: 'k2' });
    expect(events).toHaveLength(2);
    await orchestrator.close();
  });
});
