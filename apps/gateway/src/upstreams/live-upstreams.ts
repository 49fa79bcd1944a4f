import type { BreakerOptions, ConcurrencyOptions, UpstreamRegistry } from 'nest-prompt-orchestrator/core';
import { FileReloader } from '../common/file-reloader.js';
import { redactor } from '../common/redaction.js';
import type { MemberChecks } from './health-poller.js';
import {
  diffUpstreams,
  memberOf,
  poolsOf,
  rekey,
  type Member,
  type UpstreamChanges,
  type UpstreamTarget,
} from './upstream-set.js';
import type { UpstreamsFile } from '../config/upstreams-file.js';

export interface LiveUpstreamsOptions {
  /** The orchestrator's pools, dynamic: members are added and removed there. */
  registry: UpstreamRegistry;
  /** The breaker and limiter settings of a member a reload adds. */
  settingsOf: (member: Member & { concurrency?: number }) => {
    breaker: BreakerOptions;
    concurrency: ConcurrencyOptions;
  };
  /** The failover test of a fallback group a reload adds. */
  shouldFailover: (error: unknown) => boolean;
  /** What brings a member a reload adds into rotation (its first good health check), and forgets one removed. */
  checks: MemberChecks;
  /** One line per reload; `problem` for one that did not take. */
  log: (line: string, problem: boolean) => void;
}

/**
 * The upstreams file in force, read again when it changes and on SIGHUP (see
 * `FileReloader`). A file that cannot be used leaves the upstreams as they are,
 * and one warning names the problem. One that can is applied member by member
 * (see `diffUpstreams`):
 * - a member added waits out of rotation for its first good health check;
 * - a member removed gets no new call, finishes those under way (a stream to
 *   its end), then its breaker and limiter are released;
 * - a member whose URL, ceiling or group changed is removed and added again
 *   (another server, or another role: its health and breaker say nothing of it);
 * - a member whose key alone changed keeps its place, breaker, limit and
 *   health: the same server with rotated credentials, sent the new key from
 *   the next call and probe on.
 */
export class LiveUpstreams {
  private file: UpstreamsFile;
  private reloader?: FileReloader;
  private readonly listeners = new Set<(file: UpstreamsFile) => void>();

  constructor(
    file: UpstreamsFile,
    private readonly options: LiveUpstreamsOptions,
  ) {
    this.file = file;
  }

  /** The upstreams file in force (as last read successfully). */
  get current(): UpstreamsFile {
    return this.file;
  }

  /** Reloads the file when it changes, and on SIGHUP. */
  watch(): void {
    this.reloader ??= new FileReloader(
      this.file.path,
      (reason) => void this.reload(reason),
      (line) => this.options.log(line, true),
      'upstreams file',
    );
  }

  /** Tells `listener` of every file that takes over (after its members are applied). Returns a function that stops it. */
  onChange(listener: (file: UpstreamsFile) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Reads the file again and applies it; undefined (the upstreams unchanged) when it cannot be used. */
  reload(reason: string): UpstreamChanges | undefined {
    const count = total(this.file);
    let next: UpstreamsFile;
    try {
      if (!this.file.read) throw new Error('it was not read from a file');
      next = this.file.read();
    } catch (error) {
      this.options.log(
        `upstreams file not reloaded (${reason}), the previous ${count} upstream(s) stay in force: ${(error as Error).message}`,
        true,
      );
      return undefined;
    }
    const changes = this.apply(next);
    this.options.log(
      `upstreams file reloaded (${reason}): ${total(next)} upstream(s); ${describeChanges(changes)}`,
      false,
    );
    return changes;
  }

  /** Applies `next` over the upstreams in force (see the class comment). */
  apply(next: UpstreamsFile): UpstreamChanges {
    const { registry, checks, settingsOf, shouldFailover } = this.options;
    const changes = diffUpstreams(this.file, next);
    // Before any call can send them: no key ever reaches a log line or an error.
    redactor.watch([...poolsOf(next).values()].flat().flatMap((entry) => (entry.key ? [entry.key.reveal()] : [])));
    // Removed first: a member replaced under its own name drains with its old breaker while the new one is checked.
    for (const { pool, name } of changes.removed) {
      const member = registry.get(pool)?.member(name);
      if (!member) continue;
      checks.remove(member);
      void registry.remove(pool, name);
    }
    for (const { pool, name, entry } of changes.rekeyed) {
      const member = registry.get(pool)?.member(name);
      if (member) rekey(member.target as UpstreamTarget, entry);
    }
    for (const { pool, entry, index } of changes.added) {
      const member = { ...memberOf(entry), concurrency: entry.concurrency };
      const upstream = registry.add(
        pool,
        { name: member.name, target: member.target, index },
        { ...settingsOf(member), shouldFailover },
      );
      checks.add(upstream);
    }
    this.file = next;
    for (const listener of this.listeners) listener(next);
    return changes;
  }

  close(): void {
    this.reloader?.close();
    this.reloader = undefined;
  }
}

function total(file: UpstreamsFile): number {
  return [...poolsOf(file).values()].reduce((n, entries) => n + entries.length, 0);
}

/** The reload's one line: names only (never a key or a URL, which may carry a host the operator keeps private). */
function describeChanges(changes: UpstreamChanges): string {
  const changed = new Set(changes.changed);
  const added = changes.added.filter((a) => !changed.has(a.entry.name)).map((a) => a.entry.name);
  const removed = changes.removed.filter((r) => !changed.has(r.name)).map((r) => r.name);
  const parts = [
    added.length > 0 ? `added ${added.join(', ')} (in rotation after a first good health check)` : '',
    removed.length > 0 ? `removed ${removed.join(', ')} (draining)` : '',
    changed.size > 0
      ? `changed ${[...changed].join(', ')} (replaced: the old one drains, the new one is checked first)`
      : '',
    changes.rekeyed.length > 0 ? `new key for ${changes.rekeyed.map((r) => r.name).join(', ')}` : '',
    changes.chains ? 'fallback chains changed' : '',
  ].filter(Boolean);
  return parts.length > 0 ? parts.join('; ') : 'no change';
}
