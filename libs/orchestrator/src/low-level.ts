/**
 * `nest-prompt-orchestrator/low-level`: the core below `Orchestrator.run()`, for an embedder that reads requests and
 * writes answers itself (this repository's gateway is one): starting calls and getting their events back, the
 * helpers such calls are built with, and the hot-path collections the core itself uses. Framework-free, like
 * `/core`, and versioned like the other entries (pinned by `public-api.spec.ts`). See docs/low-level-api.md.
 */
export { lowLevelCalls, type LowLevelCalls } from './core/low-level-calls.js';
export type { StartedCall } from './core/orchestrator.js';
export type { CallWork } from './core/call.js';
export { ChunkEvent, type CallEvent, type FlowControl } from './core/events.js';
export type { ByteKeeper } from './core/dedup/answer-window.js';
// Collections for entries that come and go with every request (a churned Map or Set keeps them alive across scavenges).
export { KeyTable } from './core/collections/key-table.js';
export { SlotList } from './core/collections/slot-list.js';

// Coordinated calls (the gateway's workers relay them over IPC): the relay protocol over a transport, the
// node:cluster transport, and what crosses it. Outside the promise above until the relay's API settles.
export {
  RemoteCallError,
  DEFAULT_ERROR_CODEC,
  type ErrorCodec,
  type SharedBreakerState,
} from './core/cluster/coordination.js';
export { RelayCoordinator } from './core/cluster/relay.js';
export * as ipcRelay from './core/cluster/ipc-relay.js';
// A late joiner refused a stream no longer kept for joiners (here, or in the fleet): the gateway answers it as a 503 to retry.
export { FlightOutgrownError } from './core/dedup/single-flight.js';
