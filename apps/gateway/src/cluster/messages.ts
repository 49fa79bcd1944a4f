import type { ipcRelay } from 'nest-prompt-orchestrator/low-level';
import type { SharedBreakerState } from 'nest-prompt-orchestrator/core';

/**
 * What the workers of `--workers N` and their primary say to each other over
 * node:cluster's IPC channel. Every message carries `gw` (its kind), so that
 * it is told apart from Node's own cluster messages and prom-client's.
 *
 * A call's relay (`claim`, `publish`, `unfollow`, `event`) is the library's
 * (`ipcRelay` in libs/orchestrator/src/core/cluster/ipc-relay.ts); the rest
 * (breakers, figures) is the gateway's.
 */

/** What the primary gathers from every worker on one worker's behalf. */
export type Gathered = 'metrics' | 'health' | 'status';

/** A worker's questions, each answered by one `re` with the same `c`. */
export type WorkerAsk =
  | (ipcRelay.ClaimAsk & { c: number })
  | { gw: 'fail'; c: number; name: string }
  | { gw: 'announce'; c: number; name: string; state: SharedBreakerState }
  | { gw: 'watch'; c: number; name: string }
  | { gw: 'prober'; c: number; name: string }
  | { gw: 'gather'; c: number; what: Gathered };

/** Worker -> primary. */
export type ToPrimary =
  | WorkerAsk
  | ipcRelay.ToHub
  | { gw: 'reset'; name: string }
  /** A worker's own figures, for gathering `g`. `null`: it has none (yet). */
  | { gw: 'part'; g: number; data: unknown };

/** The primary's answer to `gather`: the aggregated text for metrics, each worker's part otherwise. */
export type GatherReply =
  | { what: 'metrics'; text: string }
  | { what: 'health' | 'status'; parts: Array<{ pid: number; data: unknown }>; silent: number[] };

/** Primary -> worker. */
export type ToWorker =
  | { gw: 're'; c: number; v: unknown }
  | ipcRelay.FromHub
  /** A worker counted a breaker failure: a success anywhere must now end the run. */
  | { gw: 'failing'; name: string }
  /** Another worker opened or closed a breaker. */
  | { gw: 'breaker'; name: string; state: SharedBreakerState }
  | { gw: 'collect'; g: number; what: Gathered };

export function isGatewayMessage<T extends { gw: string }>(message: unknown): message is T {
  return typeof message === 'object' && message !== null && typeof (message as { gw?: unknown }).gw === 'string';
}
