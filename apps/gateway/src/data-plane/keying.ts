import type { LowLevelCalls } from 'nest-prompt-orchestrator/low-level';
import { EMPTY_BODY } from './request-body.js';
import type { ProxiedCall } from './proxied-call.js';

/** What a call is asked with (its key, tenant, reuse and trace), as `LowLevelCalls` takes it. */
type CallRequest = Parameters<LowLevelCalls['peekLocal']>[1];

/**
 * Keying: the request's dedup key, from its method, URL, identity, scope and bytes. A large body sent again and
 * again (a long conversation retried, a shared document) is keyed without hashing it again (`RepeatedBodies`); a
 * request this process can answer alone is answered without reading its body (`localRequest`, `answeredLocally`).
 */

/** Where answers may be shared (undefined: dedup off for this request); a promise until the upstream's identity is known. */
export function dedupScope(call: ProxiedCall): string | Promise<string> | undefined {
  const { dedupOn, parts } = call.plane;
  const info = call.info;
  const generation = info.kind === 'generation' && info.body !== 'multipart';
  return dedupOn && generation ? parts.gateway.dedupScope(call.request.headers) : undefined;
}

/** The request's key (its hash), on the context; its body's print and pieces are kept on the call for `noteRepeated`. */
export function keyRequest(call: ProxiedCall, scope: string | undefined): string {
  const { bodies } = call.plane;
  const context = call.context;
  const head = call.plane.calls.keyHead({
    method: call.info.method,
    url: call.request.url ?? '',
    credential: context.identity,
    scope,
  });
  const pieces = (call.pieces = call.parts ?? [call.body ?? EMPTY_BODY]);
  const print = (call.print = bodies.printOf(head, pieces, call.size));
  const hash = bodies.keyOf(head, print, pieces, call.size);
  context.requestHash = hash;
  if (scope !== undefined) context.dedupKey = hash;
  return hash;
}

/**
 * The call as this process may answer it alone (a call in flight under its key, the window), when it may: its body
 * then need not be read. Its bytes are the leader's, so they were valid JSON, and the leader's summary of them (the
 * call's tag) stands for them.
 */
export function localRequest(
  call: ProxiedCall,
  scope: string | undefined,
  json: boolean,
  hash: string,
): CallRequest | undefined {
  if (scope === undefined || !json || call.plane.parts.config.observability.logPrompts) return undefined;
  const context = call.context;
  return {
    key: hash,
    tenant: call.tenant,
    reuse: call.plane.calls.reuseOf(call.request.headers['cache-control'], true),
    trace: context.span,
  };
}

/** The fast path: the request is answered with what `peekLocal` found, its body never sent anywhere. */
export function answeredLocally(call: ProxiedCall): void {
  noteRepeated(call, call.context.requestHash!);
  // Not sent anywhere: its bytes are let go while it waits for its answer (a herd waits with all of them).
  call.body = call.parts = call.pieces = undefined;
}

/** The body came again (its answer was shared): the next time it comes, its key is found without hashing it. */
export function noteRepeated(call: ProxiedCall, hash: string): void {
  call.plane.bodies.repeated(call.print, call.pieces!, call.size, hash);
}
