import type { SharedBreakerState } from 'nest-prompt-orchestrator/low-level';

/**
 * What the workers of `--workers N` and their primary say to each other over
 * node:cluster's IPC channel. Every message carries `gw` (its kind), so that
 * it is told apart from Node's own cluster messages and prom-client's.
 *
 * A flight's events cross as `e`: the JSON text of one `WireEvent` (see
 * `toWire` in libs/orchestrator/src/core/cluster/coordination.ts, and `gone` in
 * ipc-coordinator.ts). The primary never parses them: it buffers and relays text.
 */

/** What the primary gathers from every worker on one worker's behalf. */
export type Gathered = 'metrics' | 'health' | 'status';

/** A worker's questions, each answered by one `re` with the same `c`. */
export type WorkerAsk =
  /** `t`: the claiming request's span (a traceparent), handed to the workers that follow it. */
  | { gw: 'claim'; c: number; key: string; t?: string }
  | { gw: 'fail'; c: number; name: string }
  | { gw: 'announce'; c: number; name: string; state: SharedBreakerState }
  | { gw: 'watch'; c: number; name: string }
  | { gw: 'prober'; c: number; name: string }
  | { gw: 'gather'; c: number; what: Gathered };

/** Worker -> primary. */
export type ToPrimary =
  | WorkerAsk
  /** One event of a flight this worker leads; `last` on its end, error or `gone`. */
  | { gw: 'pub'; f: number; e: string; last?: 1 }
  /** This worker's follower `c` of flight `f` left (every caller of it did). */
  | { gw: 'unfollow'; f: number; c: number }
  | { gw: 'reset'; name: string }
  /** A worker's own figures, for gathering `g`. `null`: it has none (yet). */
  | { gw: 'part'; g: number; data: unknown };

/** The primary's answer to a claim. */
export type ClaimReply =
  | { role: 'lead'; f: number }
  /** `events`: everything the flight published so far; the rest follows as `ev` messages. */
  | { role: 'follow'; f: number; events: string[]; t?: string }
  /** The flight cannot be joined (its events outgrew what the primary keeps): this worker calls alone. */
  | { role: 'alone' };

/** The primary's answer to `gather`: the aggregated text for metrics, each worker's part otherwise. */
export type GatherReply =
  | { what: 'metrics'; text: string }
  | { what: 'health' | 'status'; parts: Array<{ pid: number; data: unknown }>; silent: number[] };

/** Primary -> worker. */
export type ToWorker =
  | { gw: 're'; c: number; v: unknown }
  /** An event of the flight that this worker's follower `c` follows. */
  | { gw: 'ev'; c: number; e: string }
  /** A worker counted a breaker failure: a success anywhere must now end the run. */
  | { gw: 'failing'; name: string }
  /** Another worker opened or closed a breaker. */
  | { gw: 'breaker'; name: string; state: SharedBreakerState }
  | { gw: 'collect'; g: number; what: Gathered };

export function isGatewayMessage<T extends { gw: string }>(message: unknown): message is T {
  return typeof message === 'object' && message !== null && typeof (message as { gw?: unknown }).gw === 'string';
}

/** The `gone` event: the leader's callers all left, or its worker died. Followers take the call over. */
export const GONE = '{"k":"gone"}';
