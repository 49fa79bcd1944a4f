import type { Observable } from 'rxjs';
import { toCallEvents, type CallWork } from './call.js';
import type { ByteKeeper } from './dedup/answer-window.js';
import { dedupKey, keyHead, type DedupKeyInput, type DedupKeyOptions } from './dedup/dedup-key.js';
import { RepeatedBodies, type RepeatedBodiesOptions } from './dedup/repeated-bodies.js';
import type { CallEvent } from './events.js';
import { reuseOf } from './http/cache-control.js';
import {
  hashIdentity,
  type CallRequest,
  type LocalAnswer,
  type Orchestrator,
  type Reuse,
  type StartedCall,
} from './orchestrator.js';
import type { RoutePolicy } from './policy.js';
import type { UpstreamPool } from './upstreams/upstream-pool.js';
import { withFallbacks } from './upstreams/failover-call.js';

/**
 * The call entry below `Orchestrator.run()`, for an embedder that reads requests and writes answers itself (this
 * repository's gateway is one; the package's adapters use the same entry): it starts a call and gets its events
 * back, instead of a promise of the value. Beside it, the helpers such a caller builds its calls with, as the core
 * itself uses them (so that its keys, identities and reuse rules are the core's own). Get one with
 * `lowLevelCalls(orchestrator)`.
 */
export interface LowLevelCalls {
  /**
   * Starts a call under a policy: joined to a call in flight under its key, replayed from the window (asking a shared
   * store and the fleet too), or led from here. The call runs when `events` is subscribed; unsubscribing leaves it.
   */
  start<T>(policy: RoutePolicy, call: CallRequest, work: CallWork<T>): Promise<StartedCall<T>>;
  /**
   * `start` without a promise, when nothing has to be asked of a shared store or the fleet; `undefined` when it has
   * to (or the orchestrator is closing): then call `start`.
   */
  startLocal<T>(policy: RoutePolicy, call: CallRequest, work: CallWork<T>): StartedCall<T> | undefined;
  /**
   * What this process holds for the call's key (a call in flight, an answer in the in-memory window), nothing counted
   * or started yet: lets a caller skip reading a request it will not send.
   */
  peekLocal<T>(policy: RoutePolicy, call: CallRequest): LocalAnswer<T> | undefined;
  /** The call answered with what `peekLocal` found (joined, or replayed), counted as such. */
  answerLocal<T>(policy: RoutePolicy, call: CallRequest, found: LocalAnswer<T>): StartedCall<T>;
  /** From now on the window keeps stored streams' bytes in `keeper`'s memory: set before any answer is stored. */
  keepWindowBytes(keeper: ByteKeeper): void;
  /** Counts a client that hung up before its answer was written (`health().clientsGone`). */
  noteClientGone(): void;
  /** A short, stable, one-way form of an identity (a credential): the tenant of `CallRequest.tenant`. */
  hashIdentity(identity: string): string;
  /** The dedup key of a request: SHA-256 over its method, URL, credential, scope and body. */
  dedupKey(input: DedupKeyInput, options?: DedupKeyOptions): string;
  /** What `dedupKey` hashes before the body: a request without its body, for `RepeatedBodies`. */
  keyHead(input: Omit<DedupKeyInput, 'body' | 'rawBody'>): string;
  /** The keys of request bodies that came more than once, found again without hashing them (one per caller). */
  repeatedBodies(options?: RepeatedBodiesOptions): RepeatedBodies;
  /** What a request's `Cache-Control` asks of the window (`storable` false: its answer is not kept). */
  reuseOf(cacheControl: string | string[] | undefined, storable: boolean): Reuse | undefined;
  /** A handler's result (a value, a `StreamedResponse`, a `RawResponse`) as the events of a call. */
  toCallEvents<T>(result: Observable<unknown>): Observable<CallEvent<T>>;
  /** `policy` sending its calls to `primary`, then to each of `fallbacks` in turn once a pool's upstreams all failed. */
  withFallbacks(policy: RoutePolicy, primary: UpstreamPool, fallbacks: readonly UpstreamPool[]): RoutePolicy;
}

/** Made once per orchestrator: a caller keeps it, and each call costs what a call on the orchestrator does. */
class OrchestratorCalls implements LowLevelCalls {
  constructor(private readonly orchestrator: Orchestrator) {}

  start<T>(policy: RoutePolicy, call: CallRequest, work: CallWork<T>): Promise<StartedCall<T>> {
    return this.orchestrator.start<T>(policy, call, work);
  }

  startLocal<T>(policy: RoutePolicy, call: CallRequest, work: CallWork<T>): StartedCall<T> | undefined {
    return this.orchestrator.startLocal<T>(policy, call, work);
  }

  peekLocal<T>(policy: RoutePolicy, call: CallRequest): LocalAnswer<T> | undefined {
    return this.orchestrator.peekLocal<T>(policy, call);
  }

  answerLocal<T>(policy: RoutePolicy, call: CallRequest, found: LocalAnswer<T>): StartedCall<T> {
    return this.orchestrator.answerLocal<T>(policy, call, found);
  }

  keepWindowBytes(keeper: ByteKeeper): void {
    this.orchestrator.keepWindowBytes(keeper);
  }

  noteClientGone(): void {
    this.orchestrator.noteClientGone();
  }

  hashIdentity(identity: string): string {
    return hashIdentity(identity);
  }

  dedupKey(input: DedupKeyInput, options?: DedupKeyOptions): string {
    return dedupKey(input, options);
  }

  keyHead(input: Omit<DedupKeyInput, 'body' | 'rawBody'>): string {
    return keyHead(input);
  }

  repeatedBodies(options?: RepeatedBodiesOptions): RepeatedBodies {
    return new RepeatedBodies(options);
  }

  reuseOf(cacheControl: string | string[] | undefined, storable: boolean): Reuse | undefined {
    return reuseOf(cacheControl, storable);
  }

  toCallEvents<T>(result: Observable<unknown>): Observable<CallEvent<T>> {
    return toCallEvents<T>(result);
  }

  withFallbacks(policy: RoutePolicy, primary: UpstreamPool, fallbacks: readonly UpstreamPool[]): RoutePolicy {
    return withFallbacks(policy, primary, fallbacks);
  }
}

const made = new WeakMap<Orchestrator, LowLevelCalls>();

/**
 * The low-level call entry of `orchestrator` (see `LowLevelCalls`): the same object for every ask, so a caller may
 * ask once and keep it, or ask again.
 */
export function lowLevelCalls(orchestrator: Orchestrator): LowLevelCalls {
  let calls = made.get(orchestrator);
  if (!calls) made.set(orchestrator, (calls = new OrchestratorCalls(orchestrator)));
  return calls;
}
