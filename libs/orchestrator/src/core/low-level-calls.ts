import type { CallWork } from './call.js';
import type { CallRequest, Orchestrator, StartedCall } from './orchestrator.js';
import type { RoutePolicy } from './policy.js';

// The call entry below `run()`, kept off the public `Orchestrator` type (its methods are `@internal`): the adapters
// and the gateway's data plane, which deliver call events themselves, reach it through `/internal`.

/** `Orchestrator.startLocal`: the call started without a promise, or `undefined` when a store or the fleet must be asked. */
export function startLocalCall<T>(orchestrator: Orchestrator, policy: RoutePolicy, call: CallRequest, work: CallWork<T>): StartedCall<T> | undefined {
  return orchestrator.startLocal<T>(policy, call, work);
}

/** `Orchestrator.findLocal`: the call joined or replayed from this process alone, or `undefined` (nothing started). */
export function findLocalCall<T>(orchestrator: Orchestrator, policy: RoutePolicy, call: CallRequest): StartedCall<T> | undefined {
  return orchestrator.findLocal<T>(policy, call);
}

/** `Orchestrator.start`: the call joined, replayed or led, asking the shared window and the fleet first. */
export function startCall<T>(orchestrator: Orchestrator, policy: RoutePolicy, call: CallRequest, work: CallWork<T>): Promise<StartedCall<T>> {
  return orchestrator.start<T>(policy, call, work);
}

/** Counts a client that hung up before its answer was written (`health().clientsGone`). */
export function noteClientGone(orchestrator: Orchestrator): void {
  orchestrator.noteClientGone();
}
