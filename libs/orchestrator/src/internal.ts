/**
 * `nest-prompt-orchestrator/internal`: what this repository's gateway uses
 * beyond the public API (the low-level call entry, key and identity hashing,
 * the relay of coordinated calls). Not covered by semver: it changes
 * with the gateway. Framework-free, like `/core`.
 *
 * The gateway's data plane starts calls with `startLocalCall()` and
 * `startCall()` (typed by `CallRequest`, `CallWork`, `StartedCall` and
 * `Reuse` below), the entry points the adapters use too; they are not on the
 * public `Orchestrator` type.
 */
export { hashIdentity, type CallRequest, type LocalAnswer, type Reuse, type StartedCall } from './core/orchestrator.js';
export {
  startLocalCall,
  startCall,
  peekLocalCall,
  answerLocalCall,
  noteClientGone,
  keepWindowBytes,
} from './core/low-level-calls.js';
export { withFallbacks, type FailoverPlan } from './core/upstreams/failover-call.js';
export { isOverloadSignal } from './core/breaker/failure-classifier.js';
export { DEDUP_HEADER } from './core/http/answer-headers.js';
export { NOOP_REQUEST_SPAN, requestSpanOf, type UpstreamSpanResult } from './core/tracing/request-tracing.js';
export { parseTraceParent, formatTraceParent } from './core/tracing/traceparent.js';
export { toCallEvents, type CallWork } from './core/call.js';
export type { CallEvent, Chunk, FlowControl } from './core/events.js';
export { ChunkEvent } from './core/events.js';
export { ResponseSink, type StreamHeadEvent } from './core/http/response-sink.js';
export type { WindowPayload, ByteKeeper } from './core/dedup/answer-window.js';
export {
  dedupKey,
  keyHead,
  BodyTooDeepError,
  type DedupKeyInput,
  type DedupKeyOptions,
} from './core/dedup/dedup-key.js';
export { RepeatedBodies, type RepeatedBodiesOptions } from './core/dedup/repeated-bodies.js';
export { openAIErrorBody } from './core/http/errors.js';
export { reuseOf } from './core/http/cache-control.js';
export { HttpRoute, RouteNames, REPLAYED_METHODS } from './core/http/route.js';
export {
  RemoteCallError,
  DEFAULT_ERROR_CODEC,
  type ErrorCodec,
  type SharedBreakerState,
} from './core/cluster/coordination.js';
// The relay protocol of coordinated calls over a transport, and its transport between node:cluster's workers and their primary.
export { RelayCoordinator } from './core/cluster/relay.js';
export * as ipcRelay from './core/cluster/ipc-relay.js';
// A late joiner refused a stream no longer kept for joiners (here, or in the fleet): the gateway answers it as a 503 to retry.
export { FlightOutgrownError } from './core/dedup/single-flight.js';
// Metrics counted on every request without prom-client's per-call label hashing (read by the registry at scrape time).
export { TalliedCounter, Tally, BatchedHistogram, BucketTally } from './core/metrics/batched-metrics.js';
// Collections for entries that come and go with every request (a churned Map or Set keeps them alive across scavenges).
export { KeyTable } from './core/collections/key-table.js';
export { SlotList } from './core/collections/slot-list.js';
