/** Who a call was made for: the caller's tenant and the request's dedup key (either may be unknown). */
export interface CallSource {
  tenant?: string;
  key?: string;
}

/**
 * The most recent event (a success, a call), kept for the two most recent
 * distinct owners: "has anyone but X done it since t?" is then answered in O(1) for any X.
 */
class LastByOwner {
  private first?: { owner: string; at: number };
  private second?: { owner: string; at: number };

  record(owner: string, at: number): void {
    const first = this.first;
    // The same owner again (every call of a single tenant): updated in place, nothing made per call.
    if (first?.owner === owner) first.at = at;
    else {
      this.second = first;
      this.first = { owner, at };
    }
  }

  /** The time of the latest success of anyone other than `owner`. */
  latestOtherThan(owner: string): number {
    if (this.first && this.first.owner !== owner) return this.first.at;
    return this.second?.at ?? -Infinity;
  }
}

/** A bounded map of failure streaks: when each owner's current run of failures began. */
class Streaks {
  private readonly began = new Map<string, number>();

  constructor(private readonly max: number) {}

  /** Records a failure; returns when this owner's streak began. */
  fail(owner: string, at: number): number {
    const began = this.began.get(owner);
    if (began !== undefined) return began;
    if (this.began.size >= this.max) this.began.delete(this.began.keys().next().value!);
    this.began.set(owner, at);
    return at;
  }

  succeed(owner: string): void {
    this.began.delete(owner);
  }
}

/** Whose failure it is (see `FailureAttribution.attribute`). */
export type Attribution = 'upstream' | 'caller' | 'newcomer';

/** A bounded set, least recently touched forgotten first. */
class RecentSet {
  private readonly members = new Set<string>();
  private newest?: string;

  constructor(private readonly max: number) {}

  add(member: string): void {
    // Already the newest (the same caller again, as most calls are): re-inserting it on every call would rebuild the
    // set's table every few calls (see `KeyTable` for what that costs).
    if (member === this.newest) return;
    this.newest = member;
    // Re-inserted so that the oldest member is the first in iteration order.
    this.members.delete(member);
    if (this.members.size >= this.max) this.members.delete(this.members.values().next().value!);
    this.members.add(member);
  }

  has(member: string): boolean {
    return this.members.has(member);
  }
}

export interface FailureAttributionOptions {
  /** The clock (epoch ms); injected by tests. */
  now?: () => number;
  /** Streaks and answered callers kept at most (oldest forgotten first): memory stays bounded whatever the number of tenants. */
  maxTracked?: number;
  /**
   * How long a success anywhere proves that the upstream works, for callers that have never been answered: their
   * failures count only when nobody has been answered for this long. Default 10 000 ms.
   */
  newcomerGraceMs?: number;
}

/**
 * Decides whether a failure is the upstream's or one request's (or one
 * tenant's): a failure is attributed to its tenant when another tenant has
 * succeeded since that tenant's current run of failures began, and to its
 * request when another request has succeeded since this request's (same dedup
 * key) run of failures began. The upstream demonstrably works for others, so
 * the breaker must not refuse them for it.
 *
 * A caller that has never been answered has no standing: while anybody has
 * been answered within `newcomerGraceMs`, its failures are only `newcomer`s
 * (they count only for a breaker with a health probe, which confirms every
 * opening). Without that, a caller could pose as a new tenant on
 * every request (a new tenant has no failure run for anyone to have succeeded
 * during) and open the breaker for everyone with requests the provider refuses.
 *
 * In an outage nobody succeeds once it starts, so every failure counts (from
 * one tenant or many, from new callers once the grace has passed, and at once
 * when nobody has been answered since start); a tenant whose own prompts fail
 * (or time out) while the others' are answered never opens the breaker for them.
 */
export class FailureAttribution {
  private readonly tenants: Streaks;
  private readonly keys: Streaks;
  private readonly tenantSuccesses = new LastByOwner();
  private readonly keySuccesses = new LastByOwner();
  /** Tenants answered at least once. */
  private readonly answered: RecentSet;
  private lastSuccessAt = -Infinity;
  private readonly now: () => number;
  private readonly newcomerGraceMs: number;

  constructor(options: FailureAttributionOptions = {}) {
    this.now = options.now ?? Date.now;
    this.newcomerGraceMs = options.newcomerGraceMs ?? 10_000;
    const maxTracked = options.maxTracked ?? 10_000;
    this.tenants = new Streaks(maxTracked);
    this.keys = new Streaks(maxTracked);
    this.answered = new RecentSet(maxTracked);
  }

  /** When anybody was last answered (epoch ms; -Infinity before the first answer). */
  get lastSuccess(): number {
    return this.lastSuccessAt;
  }

  succeeded(source: CallSource | undefined): void {
    const at = this.now();
    this.lastSuccessAt = at;
    if (source?.tenant !== undefined) {
      this.tenants.succeed(source.tenant);
      this.tenantSuccesses.record(source.tenant, at);
      this.answered.add(source.tenant);
    }
    if (source?.key !== undefined) {
      this.keys.succeed(source.key);
      this.keySuccesses.record(source.key, at);
    }
  }

  /**
   * Records a failure and says whose it is: `upstream` (it counts against the breaker), `caller` (the caller's
   * own: not counted), or `newcomer` (a caller never answered failed while the upstream answered others lately:
   * it counts only if a health check confirms the upstream is down).
   */
  attribute(source: CallSource | undefined): Attribution {
    const at = this.now();
    let verdict: Attribution = 'upstream';
    if (source?.tenant !== undefined) {
      const began = this.tenants.fail(source.tenant, at);
      if (this.tenantSuccesses.latestOtherThan(source.tenant) >= began) verdict = 'caller';
      else if (!this.answered.has(source.tenant) && at - this.lastSuccessAt < this.newcomerGraceMs)
        verdict = 'newcomer';
    }
    if (source?.key !== undefined) {
      const began = this.keys.fail(source.key, at);
      if (this.keySuccesses.latestOtherThan(source.key) >= began) verdict = 'caller';
    }
    return verdict;
  }
}
