import { afterEach, describe, expect, it } from '@jest/globals';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Orchestrator, type Upstream } from 'nest-prompt-orchestrator/core';
import { redactor } from '../common/redaction.js';
import type { MemberChecks } from './health-poller.js';
import { LiveUpstreams } from './live-upstreams.js';
import { diffUpstreams, memberOf, poolsOf, type UpstreamTarget } from './upstream-set.js';
import { readUpstreamsFile, type UpstreamsFile } from '../config/upstreams-file.js';

/**
 * A reload of the upstreams file applied to the orchestrator's pools, without
 * Nest or sockets: who is added (and checked first), removed (and drained),
 * replaced, or merely given a new key; and a file that cannot be used, which
 * changes nothing.
 */

const KEY_1 = 'firstkey0123456789abcdef';
const KEY_2 = 'secondkey0123456789abcde';
const ENV = { KEY_1, KEY_2 };

type Doc = {
  upstreams: Array<Record<string, unknown>>;
  groups?: Record<string, Array<Record<string, unknown>>>;
  fallbacks?: Record<string, unknown>;
};

/** Checks that record what they are asked to do, and let a member in on demand. */
class RecordedChecks implements MemberChecks {
  readonly added: string[] = [];
  readonly removed: string[] = [];
  add(member: Upstream): void {
    this.added.push(member.name);
  }
  remove(member: Upstream): void {
    this.removed.push(member.name);
  }
  async stop(): Promise<void> {}
}

let orchestrator: Orchestrator | undefined;
afterEach(async () => {
  await orchestrator?.close();
  orchestrator = undefined;
});

function setUp(doc: Doc) {
  const path = join(mkdtempSync(join(tmpdir(), 'npo-live-upstreams-')), 'upstreams.json');
  const write = (next: Doc | string) => writeFileSync(path, typeof next === 'string' ? next : JSON.stringify(next));
  write(doc);
  const file = readUpstreamsFile(path, ENV, 'openai');
  const pools = poolsOf(file);
  orchestrator = new Orchestrator({
    concurrency: { limit: 8 },
    upstreams: Object.fromEntries(
      [...pools].map(([pool, entries]) => [pool, { members: entries.map(memberOf), dynamic: true }]),
    ),
  });
  const checks = new RecordedChecks();
  const lines: Array<{ line: string; problem: boolean }> = [];
  const live = new LiveUpstreams(file, {
    registry: orchestrator.upstreams,
    settingsOf: (member) => ({ breaker: {}, concurrency: { limit: member.concurrency ?? 8 } }),
    shouldFailover: () => true,
    checks,
    log: (line, problem) => lines.push({ line, problem }),
  });
  const members = (pool = 'upstream') =>
    orchestrator!.upstreams
      .get(pool)
      ?.members.map(
        (m) => `${m.name}${m.draining ? ' (draining)' : ''}${m.health === 'pending' ? ' (pending)' : ''}`,
      ) ?? [];
  return { write, live, checks, lines, members, pool: (name = 'upstream') => orchestrator!.upstreams.get(name)! };
}

describe('a reload of the upstreams file', () => {
  it('adds new members (checked before they serve) and removes those gone (drained, then released)', async () => {
    const { write, live, checks, lines, members } = setUp({
      upstreams: [
        { name: 'a', url: 'http://10.0.0.1:8000' },
        { name: 'b', url: 'http://10.0.0.2:8000' },
      ],
    });
    write({
      upstreams: [
        { name: 'b', url: 'http://10.0.0.2:8000' },
        { name: 'c', url: 'http://10.0.0.3:8000' },
      ],
    });
    const changes = live.reload('SIGHUP');
    expect(changes).toMatchObject({
      added: [{ pool: 'upstream', entry: { name: 'c' }, index: 1 }],
      removed: [{ pool: 'upstream', name: 'a' }],
      rekeyed: [],
      changed: [],
    });
    expect(checks).toMatchObject({ added: ['c'], removed: ['a'] });
    expect(lines).toEqual([
      {
        line: 'upstreams file reloaded (SIGHUP): 2 upstream(s); added c (in rotation after a first good health check); removed a (draining)',
        problem: false,
      },
    ]);
    expect(live.current.upstreams.map((u) => u.name)).toEqual(['b', 'c']);
    // `a` had no call in flight: it is gone as soon as its drain resolves, with its breaker.
    await new Promise((resolve) => setImmediate(resolve));
    expect(members()).toEqual(['b', 'c (pending)']);
    expect(
      orchestrator!
        .health()
        .breakers.map((x) => x.name)
        .sort(),
    ).toEqual(['b', 'c']);
  });

  it('gives a member a new key in place: the same upstream, breaker and health, sending the new key from now on', () => {
    const { write, live, checks, pool } = setUp({
      upstreams: [{ name: 'a', url: 'http://10.0.0.1:8000', apiKeyEnv: 'KEY_1' }],
    });
    const before = pool().member('a')!;
    const breaker = before.breaker;
    write({ upstreams: [{ name: 'a', url: 'http://10.0.0.1:8000', apiKey: KEY_2 }] });
    expect(live.reload('file changed')).toMatchObject({ added: [], removed: [], rekeyed: [{ name: 'a' }] });
    const after = pool().member('a')!;
    expect(after).toBe(before);
    expect(after.breaker).toBe(breaker);
    expect(after.health).toBe('up');
    expect((after.target as UpstreamTarget).key?.reveal()).toBe(KEY_2);
    expect(checks.added).toEqual([]);
    // The new key is known to the redactor before any call sends it.
    expect(redactor.text(`sent ${KEY_2}`)).not.toContain(KEY_2);
  });

  it('replaces a member whose URL or ceiling changed: the old one drains under its breaker, the new one is checked first', async () => {
    const { write, live, checks, members, pool } = setUp({
      upstreams: [
        { name: 'a', url: 'http://10.0.0.1:8000' },
        { name: 'b', url: 'http://10.0.0.2:8000' },
      ],
    });
    const old = pool().member('a')!;
    old.enter(); // a call in flight
    write({
      upstreams: [
        { name: 'a', url: 'http://10.0.0.9:8000' },
        { name: 'b', url: 'http://10.0.0.2:8000', concurrency: 2 },
      ],
    });
    const changes = live.reload('file changed')!;
    expect(changes.changed.sort()).toEqual(['a', 'b']);
    expect(checks).toMatchObject({ added: ['a', 'b'], removed: ['a', 'b'] });
    // `b` had no call in flight: it leaves once its drain resolves; `a` stays until its call ends.
    expect(members()).toEqual(['a (draining)', 'b (draining)', 'a (pending)', 'b (pending)']);
    const fresh = pool().member('a')!;
    expect(fresh).not.toBe(old);
    expect(fresh.breaker).not.toBe(old.breaker);
    expect((fresh.target as UpstreamTarget).url).toBe('http://10.0.0.9:8000');
    expect(pool().member('b')!.limiter.limit).toBe(2);
    await new Promise((resolve) => setImmediate(resolve));
    expect(members()).toEqual(['a (draining)', 'a (pending)', 'b (pending)']);
    old.leave();
    await new Promise((resolve) => setImmediate(resolve));
    expect(members()).toEqual(['a (pending)', 'b (pending)']);
  });

  it('moves a member between the primary pool and a group as a replacement, and follows new fallback chains', async () => {
    const { write, live, members } = setUp({
      upstreams: [
        { name: 'a', url: 'http://10.0.0.1:8000' },
        { name: 'b', url: 'http://10.0.0.2:8000' },
      ],
      groups: { backup: [{ name: 'c', url: 'http://10.0.0.3:8000' }] },
      fallbacks: { '*': [{ group: 'backup' }] },
    });
    write({
      upstreams: [{ name: 'a', url: 'http://10.0.0.1:8000' }],
      groups: { spare: [{ name: 'b', url: 'http://10.0.0.2:8000' }] },
      fallbacks: { 'gpt-4o': [{ group: 'spare' }] },
    });
    const changes = live.reload('file changed')!;
    expect(changes).toMatchObject({ chains: true, changed: ['b'] });
    expect(changes.removed.map((r) => `${r.pool}/${r.name}`).sort()).toEqual(['backup/c', 'upstream/b']);
    await new Promise((resolve) => setImmediate(resolve));
    expect(members()).toEqual(['a']);
    expect(members('spare')).toEqual(['b (pending)']);
    // A group left without members is forgotten.
    expect(orchestrator!.upstreams.get('backup')).toBeUndefined();
    expect([...live.current.fallbacks.keys()]).toEqual(['gpt-4o']);
  });

  it('keeps the upstreams in force when the file cannot be used, and says why in one warning without the key', () => {
    const { write, live, checks, lines, members } = setUp({ upstreams: [{ name: 'a', url: 'http://10.0.0.1:8000' }] });
    write({
      upstreams: [
        { name: 'a', url: 'ftp://10.0.0.1', apiKey: KEY_2 },
        { name: 'b', url: 'http://10.0.0.2:8000' },
      ],
    });
    expect(live.reload('SIGHUP')).toBeUndefined();
    write(`{"upstreams": [{"name": "a", "apiKey": "${KEY_1}", `);
    expect(live.reload('file changed')).toBeUndefined();
    expect(lines.map((l) => l.problem)).toEqual([true, true]);
    expect(lines[0].line).toBe(
      'upstreams file not reloaded (SIGHUP), the previous 1 upstream(s) stay in force: upstreams[0]: "url" must use http: or https:, got "ftp:"',
    );
    expect(lines[1].line).toMatch(
      /^upstreams file not reloaded \(file changed\), the previous 1 upstream\(s\) stay in force: is not valid JSON \(line 1, column \d+\)$/,
    );
    for (const { line } of lines) for (const key of [KEY_1, KEY_2]) expect(line).not.toContain(key);
    expect(members()).toEqual(['a']);
    expect(checks.added).toEqual([]);
    expect(live.current.upstreams.map((u) => u.name)).toEqual(['a']);
  });

  it('tells its listeners of each file that takes over, not of one refused', () => {
    const { write, live } = setUp({ upstreams: [{ name: 'a', url: 'http://10.0.0.1:8000' }] });
    const seen: UpstreamsFile[] = [];
    live.onChange((file) => seen.push(file));
    write('not json');
    live.reload('SIGHUP');
    write({ upstreams: [{ name: 'a', url: 'http://10.0.0.1:8000' }] });
    live.reload('SIGHUP');
    expect(seen).toHaveLength(1);
    expect(diffUpstreams(seen[0], seen[0])).toEqual({
      added: [],
      removed: [],
      changed: [],
      rekeyed: [],
      chains: false,
    });
  });
});
