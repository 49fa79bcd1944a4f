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
    if (this.first?.owner === owner) this.first = { owner, at };
    else {
      this.second = this.first;
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

/**
 * Decides whether a failure is the upstream's or one request's (or one
 * tenant's): a failure is attributed to its tenant when another tenant has
 * succeeded since that tenant's current run of failures began, and to its
 * request when another request has succeeded since this request's (same dedup
 * key) run of failures began. The upstream demonstrably works for others, so
 * the breaker must not refuse them for it.
 *
 * In an outage nobody succeeds once it starts, so every failure counts (from
 * one tenant or many); a tenant whose own prompts fail (or time out) while the
 * others' are answered never opens the breaker for them.
 */
export class FailureAttribution {
  private readonly tenants: Streaks;
  private readonly keys: Streaks;
  private readonly tenantSuccesses = new LastByOwner();
  private readonly tenantsSeen = new LastByOwner();
  private readonly keySuccesses = new LastByOwner();

  constructor(
    private readonly now: () => number = Date.now,
    /** Streaks kept at most (oldest forgotten first): memory stays bounded whatever the number of tenants. */
    maxTracked = 10_000,
  ) {
    this.tenants = new Streaks(maxTracked);
    this.keys = new Streaks(maxTracked);
  }

  /** A call is made (whatever its outcome): its tenant is active. */
  seen(source: CallSource | undefined): void {
    if (source?.tenant !== undefined) this.tenantsSeen.record(source.tenant, this.now());
  }

  /** Whether a tenant other than `tenant` made a call at or after `since`. */
  othersActiveSince(tenant: string, since: number): boolean {
    return this.tenantsSeen.latestOtherThan(tenant) >= since;
  }

  succeeded(source: CallSource | undefined): void {
    const at = this.now();
    if (source?.tenant !== undefined) {
      this.tenants.succeed(source.tenant);
      this.tenantSuccesses.record(source.tenant, at);
    }
    if (source?.key !== undefined) {
      this.keys.succeed(source.key);
      this.keySuccesses.record(source.key, at);
    }
  }

  /** Records a failure; true when it is the upstream's (it counts against the breaker), false when it is the caller's. */
  isUpstreams(source: CallSource | undefined): boolean {
    const at = this.now();
    let upstream = true;
    if (source?.tenant !== undefined) {
      const began = this.tenants.fail(source.tenant, at);
      if (this.tenantSuccesses.latestOtherThan(source.tenant) >= began) upstream = false;
    }
    if (source?.key !== undefined) {
      const began = this.keys.fail(source.key, at);
      if (this.keySuccesses.latestOtherThan(source.key) >= began) upstream = false;
    }
    return upstream;
  }
}
