import type { CallWork } from './call.js';
import type { ByteKeeper } from './dedup/answer-window.js';
import type { CallRequest, LocalAnswer, Orchestrator, StartedCall } from './orchestrator.js';
import type { RoutePolicy } from './policy.js';

// The call entry below `run()`, kept off the public `Orchestrator` type (its methods are `@internal`): the adapters
// and the gateway's data plane, which deliver call events themselves, reach it through `/internal`.

/** `Orchestrator.startLocal`: the call started without a promise, or `undefined` when a store or the fleet must be asked. */
export function startLocalCall<T>(
  orchestrator: Orchestrator,
  policy: RoutePolicy,
  call: CallRequest,
  work: CallWork<T>,
): StartedCall<T> | undefined {
  return orchestrator.startLocal<T>(policy, call, work);
}

/** `Orchestrator.peekLocal`: what this process holds for the call's key, nothing counted or started yet. */
export function peekLocalCall<T>(
  orchestrator: Orchestrator,
  policy: RoutePolicy,
  call: CallRequest,
): LocalAnswer<T> | undefined {
  return orchestrator.peekLocal<T>(policy, call);
}

/** `Orchestrator.answerLocal`: the call answered with what `peekLocalCall` found. */
export function answerLocalCall<T>(
  orchestrator: Orchestrator,
  policy: RoutePolicy,
  call: CallRequest,
  found: LocalAnswer<T>,
): StartedCall<T> {
  return orchestrator.answerLocal<T>(policy, call, found);
}

/** `Orchestrator.start`: the call joined, replayed or led, asking the shared window and the fleet first. */
export function startCall<T>(
  orchestrator: Orchestrator,
  policy: RoutePolicy,
  call: CallRequest,
  work: CallWork<T>,
): Promise<StartedCall<T>> {
  return orchestrator.start<T>(policy, call, work);
}

/** `Orchestrator.keepWindowBytes`: the window keeps stored streams' bytes in `keeper`'s memory. */
export function keepWindowBytes(orchestrator: Orchestrator, keeper: ByteKeeper): void {
  orchestrator.keepWindowBytes(keeper);
}

/** Counts a client that hung up before its answer was written (`health().clientsGone`). */
export function noteClientGone(orchestrator: Orchestrator): void {
  orchestrator.noteClientGone();
}
