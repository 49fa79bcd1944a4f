import { OrchestratorConfigError, describeValue } from '../options.js';
import type { UpstreamHold } from './upstream-pool.js';

/** One upstream of a pool. */
export interface UpstreamMemberOptions {
  /** Its name, which is also the name of its breaker and its limiter (their settings: the module's `breakers` and `limits`). */
  name: string;
  /** The app's own description of it (a URL, a key), handed to the call's work as `upstream.target`. */
  target?: unknown;
}

/**
 * Several interchangeable upstreams behind one breaker name: a policy whose
 * breaker has the pool's name sends each call to one of them (see
 * `UpstreamPool.order`), failing over to the next before the first byte.
 */
export interface UpstreamPoolOptions {
  /** In order of preference; at least one. */
  members: readonly UpstreamMemberOptions[];
  /** Whether an error before the first byte sends the call to the next upstream. Default: `defaultShouldFailover`. */
  shouldFailover?: (error: unknown) => boolean;
  /**
   * While no member is in rotation by its health (each down or loading, as `Upstream.setHealth` was told), a call
   * waits up to `ms` for one to come back, then goes on; past that it is refused (`NoUpstreamAvailableError`: 503,
   * `Retry-After`); `ms: 0` refuses at once. At most `maxHeld` calls wait at once (default 1000); more are refused.
   * An open breaker is not waited for: it refuses at once. Default: no hold (the call is sent to an upstream out of
   * rotation anyway, and its refusal or connection error is the answer).
   */
  hold?: UpstreamHold;
  /**
   * Members are added and removed at run time (`UpstreamRegistry.add` / `remove`): policies over the pool then
   * choose the member per call even while it has one. Default false.
   */
  dynamic?: boolean;
}

/** Throws `OrchestratorConfigError` naming what cannot work. */
export function checkUpstreamPools(pools: Record<string, UpstreamPoolOptions> | undefined): void {
  for (const [name, pool] of Object.entries(pools ?? {})) {
    const members = (pool as Partial<UpstreamPoolOptions> | undefined)?.members;
    if (!Array.isArray(members) || members.length === 0) {
      throw new OrchestratorConfigError(
        `upstreams.${name}.members must be a non-empty array, got ${describeValue(members)}`,
      );
    }
    const names = new Set<string>();
    for (const member of members as Array<{ name?: unknown } | undefined>) {
      if (typeof member?.name !== 'string' || member.name === '')
        throw new OrchestratorConfigError(`upstreams.${name}.members: every member needs a name`);
      if (names.has(member.name))
        throw new OrchestratorConfigError(`upstreams.${name}.members: "${member.name}" appears twice`);
      names.add(member.name);
    }
    if (pool.shouldFailover !== undefined && typeof pool.shouldFailover !== 'function') {
      throw new OrchestratorConfigError(`upstreams.${name}.shouldFailover must be a function`);
    }
    const hold = pool.hold as Partial<UpstreamHold> | undefined;
    if (hold !== undefined) {
      if (
        typeof hold !== 'object' ||
        hold === null ||
        typeof hold.ms !== 'number' ||
        !Number.isFinite(hold.ms) ||
        hold.ms < 0
      ) {
        throw new OrchestratorConfigError(
          `upstreams.${name}.hold.ms must be a number of milliseconds >= 0, got ${describeValue(hold?.ms)}`,
        );
      }
      if (hold.maxHeld !== undefined && !(Number.isInteger(hold.maxHeld) && hold.maxHeld >= 0)) {
        throw new OrchestratorConfigError(
          `upstreams.${name}.hold.maxHeld must be a whole number >= 0, got ${describeValue(hold.maxHeld)}`,
        );
      }
    }
    if (pool.dynamic !== undefined && typeof pool.dynamic !== 'boolean') {
      throw new OrchestratorConfigError(
        `upstreams.${name}.dynamic must be true or false, got ${describeValue(pool.dynamic)}`,
      );
    }
  }
}
