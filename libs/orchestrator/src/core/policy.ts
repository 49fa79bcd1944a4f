import { checkBreakerOptions, type BreakerOptions } from './breaker/breaker.options.js';
import type { CircuitBreaker } from './breaker/circuit-breaker.js';
import type { AnswerWindow } from './dedup/answer-window.js';
import { CONCURRENCY_FIELDS, type ConcurrencyOptions } from './concurrency/concurrency.options.js';
import type { ConcurrencyLimiter } from './concurrency/concurrency-limiter.js';
import { DEDUP_FIELDS, type DedupOptions } from './dedup/dedup.options.js';
import { OrchestratorConfigError, checkFields, withDefaults, type WithDefaults } from './options.js';
import { RETRY_FIELDS, type RetryOptions } from './retry/retry.options.js';
import type { RetryPolicy } from './retry/retry.policy.js';
import { TIMEOUT_FIELDS, type TimeoutOptions } from './timeout/timeout.options.js';
import type { TimeLimits } from './timeout/time-limits.js';
import type { Upstream, UpstreamPool } from './upstreams/upstream-pool.js';

/** What one route, class or `run` call asks for; `false` turns a capability off. */
export interface OrchestrateOptions {
  dedup?: boolean | DedupOptions;
  /** A breaker name, or its options. */
  breaker?: boolean | string | BreakerOptions;
  /** A limit, or the limiter's options. */
  concurrency?: boolean | number | ConcurrencyOptions;
  /** Milliseconds, or the time limits. */
  timeout?: boolean | number | TimeoutOptions;
  /** Retries of transient failures before the first chunk: a count, or the options. */
  retry?: boolean | number | RetryOptions;
}

/**
 * Each capability's options in one shape, as decorators store them:
 * `false` = off, `undefined` = not asked for at this level.
 */
export interface RouteSettings {
  dedup?: false | DedupOptions;
  breaker?: false | BreakerOptions;
  concurrency?: false | ConcurrencyOptions;
  timeout?: false | Partial<TimeoutOptions>;
  retry?: false | RetryOptions;
}

export type Capability = keyof RouteSettings;
export const CAPABILITIES: readonly Capability[] = ['dedup', 'breaker', 'concurrency', 'timeout', 'retry'];

/** The dedup settings of a route, with defaults applied, and the window its answers go to (if they are kept). */
export type RouteDedup = WithDefaults<DedupOptions, typeof DEDUP_FIELDS> & { readonly window?: AnswerWindow };

/**
 * Everything that shapes the calls of one route (or of one reusable `run`
 * policy): resolved once, with its breaker and limiter attached, and shared by
 * every call under it. A capability that is absent is off.
 */
export interface RoutePolicy {
  /** Where the policy comes from (e.g. `ChatController.create`), for messages. */
  readonly name: string;
  readonly dedup?: RouteDedup;
  readonly breaker?: CircuitBreaker;
  readonly limiter?: ConcurrencyLimiter;
  readonly timeLimits?: TimeLimits;
  readonly retry?: RetryPolicy;
  /** The upstream of a pool the calls go to (handed to the call's work); absent when the work itself knows where. */
  readonly upstream?: Upstream;
  /** Several upstreams: each call goes to one of them, failing over before its first byte (breaker and limiter are theirs). */
  readonly failover?: FailoverPlan;
}

/**
 * How a policy spreads its calls over a pool of upstreams: the pool, and the policy of an attempt on each member,
 * made when a call first goes there (members may come and go: see `UpstreamPool.add`).
 */
export interface FailoverPlan {
  readonly pool: UpstreamPool;
  /** What each member's policy is made of: the route's settings, the retries a sole member keeps, a slot or not. */
  readonly template: MemberTemplate;
  /** The policy of an attempt on `upstream`; `sole`: the only member the call can go to in this pool. */
  policyOf(upstream: Upstream, sole: boolean): RoutePolicy;
  /**
   * Other pools, tried in turn once every upstream of this one failed before its first byte with an error its pool
   * fails over on (see `withFallbacks`). Their own `fallbacks` are not followed: the chain is this one list.
   */
  readonly fallbacks?: readonly FailoverPlan[];
}

/** A route's settings as an attempt on any member of a pool takes them. */
export interface MemberTemplate {
  /** Everything but where the call goes (no breaker, limiter, upstream, retries or plan of its own). */
  readonly base: RoutePolicy;
  /** Whether an attempt takes a slot of its member's limiter. */
  readonly limited: boolean;
  /** The retries of an attempt on the only member the call can go to (failing over is the retry otherwise). */
  readonly retry?: RoutePolicy['retry'];
}

type Shorthand<O> = boolean | number | string | O | undefined;

/** Turns a decorator's shorthand (`true`, a number, a name) into options, checking every field. */
function normalize<O extends object>(
  value: Shorthand<O>,
  path: string,
  shorthand: 'number' | 'string' | undefined,
  field: string | undefined,
  check: (path: string, options: unknown) => void,
): false | O | undefined {
  if (value === undefined) return undefined;
  if (value === false) return false;
  let options: unknown = value;
  if (value === true) options = {};
  else if (shorthand && typeof value === shorthand) options = { [field!]: value };
  check(path, options);
  return options as O;
}

export function normalizeDedup(value: OrchestrateOptions['dedup'], where: string): false | DedupOptions | undefined {
  return normalize<DedupOptions>(value, `${where} dedup`, undefined, undefined, (p, o) =>
    checkFields(p, o, DEDUP_FIELDS),
  );
}

export function normalizeBreaker(
  value: OrchestrateOptions['breaker'],
  where: string,
): false | BreakerOptions | undefined {
  return normalize<BreakerOptions>(value, `${where} breaker`, 'string', 'name', checkBreakerOptions);
}

export function normalizeConcurrency(
  value: OrchestrateOptions['concurrency'],
  where: string,
): false | ConcurrencyOptions | undefined {
  return normalize<ConcurrencyOptions>(value, `${where} concurrency`, 'number', 'limit', (p, o) =>
    checkFields(p, o, CONCURRENCY_FIELDS),
  );
}

/** `true` takes the duration from the module's `timeout` option, checked when the route is resolved. */
export function normalizeTimeout(
  value: OrchestrateOptions['timeout'],
  where: string,
): false | Partial<TimeoutOptions> | undefined {
  return normalize<Partial<TimeoutOptions>>(value, `${where} timeout`, 'number', 'ms', (p, o) =>
    checkFields(p, o, TIMEOUT_FIELDS),
  );
}

export function normalizeRetry(value: OrchestrateOptions['retry'], where: string): false | RetryOptions | undefined {
  return normalize<RetryOptions>(value, `${where} retry`, 'number', 'retries', (p, o) =>
    checkFields(p, o, RETRY_FIELDS),
  );
}

/** Checks and normalises what a route, a class or a `run` call asks for. */
export function normalizeOrchestrate(options: OrchestrateOptions, where: string): RouteSettings {
  if (typeof options !== 'object' || options === null) {
    throw new OrchestratorConfigError(`${where} options must be an object`);
  }
  for (const key of Object.keys(options)) {
    if (!(CAPABILITIES as readonly string[]).includes(key)) {
      throw new OrchestratorConfigError(`unknown option ${where} ${key} (known: ${CAPABILITIES.join(', ')})`);
    }
  }
  return {
    dedup: normalizeDedup(options.dedup, where),
    breaker: normalizeBreaker(options.breaker, where),
    concurrency: normalizeConcurrency(options.concurrency, where),
    timeout: normalizeTimeout(options.timeout, where),
    retry: normalizeRetry(options.retry, where),
  };
}

/**
 * Merges module, class and route settings of one capability (route wins, field
 * by field). A capability is on only where a class or route asks for it.
 */
export function mergeCapability<K extends Capability>(
  capability: K,
  moduleDefaults: Exclude<RouteSettings[K], false> | undefined,
  controller: RouteSettings | undefined,
  route: RouteSettings,
): Exclude<RouteSettings[K], false> | undefined {
  const r = route[capability];
  const c = controller?.[capability];
  if (r === false || (r === undefined && (c === false || c === undefined))) return undefined;
  return { ...moduleDefaults, ...(c || {}), ...(r || {}) } as Exclude<RouteSettings[K], false>;
}

export function resolveTimeLimits(timeout: Partial<TimeoutOptions>, where: string): TimeLimits {
  const ms = timeout.ms;
  if (ms === undefined) {
    throw new OrchestratorConfigError(
      `${where}: timeout has no duration; give one, or set OrchestratorModule.forRoot({ timeout: { ms } })`,
    );
  }
  return { totalMs: ms, firstChunkMs: timeout.firstChunkMs ?? ms, idleMs: timeout.idleMs ?? ms };
}

export function resolveDedup(dedup: DedupOptions, window: AnswerWindow): RouteDedup {
  const resolved = withDefaults(DEDUP_FIELDS, dedup);
  return resolved.cacheAnswers ? { ...resolved, window } : resolved;
}
