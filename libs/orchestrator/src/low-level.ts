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

// Where an embedder writes a call's answer: the rules of every response (the Nest interceptor and `serve` use it too).
export { ResponseSink, type StreamHeadEvent } from './core/http/response-sink.js';

// Coordinated calls (the gateway's workers relay them over IPC): the relay protocol over a transport, and the
// node:cluster transport. Outside the promise above until the relay's API settles.
export { RelayCoordinator } from './core/cluster/relay.js';
export * as ipcRelay from './core/cluster/ipc-relay.js';
