import { describe, expect, it } from '@jest/globals';
import { Subject, lastValueFrom, of } from 'rxjs';
import { dedupKey, keyHead } from './dedup/dedup-key.js';
import type { CallEvent } from './events.js';
import { lowLevelCalls } from './low-level-calls.js';
import { Orchestrator, hashIdentity } from './orchestrator.js';

describe('lowLevelCalls', () => {
  it('is one object per orchestrator', async () => {
    const one = new Orchestrator();
    const other = new Orchestrator();
    expect(lowLevelCalls(one)).toBe(lowLevelCalls(one));
    expect(lowLevelCalls(one)).not.toBe(lowLevelCalls(other));
    await Promise.all([one.close(), other.close()]);
  });

  it("starts, peeks and answers calls on its orchestrator, and counts a client gone in the orchestrator's health", async () => {
    const orchestrator = new Orchestrator();
    const calls = lowLevelCalls(orchestrator);
    const policy = orchestrator.policy({ dedup: true }, 'low-level');
    const answer = new Subject<CallEvent<string>>();
    const leader = calls.startLocal<string>(policy, { key: 'k' }, () => answer)!;
    expect(leader.outcome).toBe('miss');
    const leaderValue = lastValueFrom(leader.events);

    const found = calls.peekLocal<string>(policy, { key: 'k' })!;
    const joined = calls.answerLocal(policy, { key: 'k' }, found);
    expect(joined.outcome).toBe('joined');
    const joinedValue = lastValueFrom(joined.events);
    answer.next({ kind: 'value', value: 'the answer' });
    answer.complete();
    expect(await leaderValue).toEqual({ kind: 'value', value: 'the answer' });
    expect(await joinedValue).toEqual({ kind: 'value', value: 'the answer' });

    const fresh = await calls.start<string>(policy, { key: 'other' }, () => of({ kind: 'value', value: 'x' }));
    expect(fresh.outcome).toBe('miss');
    calls.noteClientGone();
    expect(orchestrator.health().clientsGone).toBe(1);
    await orchestrator.close();
  });

  it("gives the core's own keys, identities and reuse rules", async () => {
    const orchestrator = new Orchestrator();
    const calls = lowLevelCalls(orchestrator);
    const input = { method: 'POST', url: '/v1/chat', credential: 't', body: { b: 1, a: 2 } };
    expect(calls.dedupKey(input)).toBe(dedupKey(input));
    expect(calls.keyHead(input)).toBe(keyHead(input));
    expect(calls.hashIdentity('secret')).toBe(hashIdentity('secret'));
    expect(calls.reuseOf('no-cache', true)).toEqual({ noCache: true });
    const raw = Buffer.from('{"a":1}');
    const head = calls.keyHead(input);
    const bodies = calls.repeatedBodies();
    const print = bodies.printOf(head, [raw], raw.length);
    expect(bodies.keyOf(head, print, [raw], raw.length)).toBe(dedupKey({ ...input, rawBody: raw }));
    await orchestrator.close();
  });
});
