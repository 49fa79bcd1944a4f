import type { RawResponse } from 'nest-prompt-orchestrator/core';
import type { StartedCall } from 'nest-prompt-orchestrator/low-level';
import { modelOf } from '../budgets/budgets.service.js';
import type { Usage } from '../budgets/prices.js';
import { mergeUsage } from '../budgets/usage.js';
import { statusOf } from '../observability/gateway-telemetry.js';
import { GatewayTracing, type StreamFacts } from '../observability/gateway-tracing.js';
import type { CallTag, RequestContext } from '../observability/request-context.js';
import type { DataPlane } from './data-plane.js';
import type { ProxiedCall } from './proxied-call.js';
import { SseScan } from '../upstreams/sse-scan.js';

/** The first chunk and the last few of a reused stream (see `ProxiedCall.reusedChunks`). */
export interface ReusedChunks {
  first?: Buffer;
  last: Buffer[];
}

/**
 * Accounting: what a call used (told by its own upstream call, or read from a reused answer whose call was led
 * elsewhere), and the request's account once its response is over.
 */

/** What the call this request led used: recorded, traced, and settled against the caller's budget. */
export function countUpstreamUsage(
  plane: DataPlane,
  context: RequestContext,
  found: Usage | undefined,
  facts: StreamFacts | undefined,
): Promise<void> | undefined {
  const { usage, budgets } = plane.parts;
  if (context.span?.recording) {
    if (found) GatewayTracing.recordUsage(context.span, found);
    if (facts) context.span.setUpstreamAttributes(facts.attributes());
  }
  usage.record(context, found);
  const counted = budgets.settle(context, context.body, found);
  return context.caps ? counted : undefined;
}

/** The call's outcome is known: a reused answer whose usage its tag does not say is read as it is delivered. */
export function noteOutcome(call: ProxiedCall, started: StartedCall<RawResponse>): void {
  const context = call.context;
  context.outcome = started.outcome;
  const reused = started.outcome === 'joined' || started.outcome === 'cached';
  if (reused) context.tag = started.tag as CallTag | undefined;
  // What a reused answer's call used is read from the answer only when its tag does not say (a joiner's tag is
  // settled by its leader just before the answer reaches it: see `unknownUsage`).
  call.reused = reused && context.tag?.settled === undefined && call.plane.parts.usage.enabled;
  if (call.reused) call.reusedChunks = { last: [] };
}

/** A reused answer whose call's usage its tag does not give (yet): it is read from the answer itself. */
export function unknownUsage(call: ProxiedCall): boolean {
  return call.reused && call.context.tag?.settled === undefined;
}

/**
 * What a reused answer's call used, read from the answer (its call was led elsewhere: another replica or worker,
 * or a stored answer made by one), and kept in its tag for the next request that reuses it here.
 */
export function learnUsage(call: ProxiedCall, usage: Usage | undefined): void {
  const context = call.context;
  const tag = context.tag;
  if (usage === undefined) return;
  if (!tag) return void (context.reusedUsage = usage);
  tag.settled = call.plane.parts.budgets.priced(modelOf(tag.body), usage);
}

/** The usage a relayed stream reported, read from the chunks it kept (see `reusedChunks`). */
export function streamedUsage(call: ProxiedCall): Usage | undefined {
  const format = call.info.streamEnd ?? call.context.api;
  const kept = call.reusedChunks;
  if (format === false || !kept?.first) return undefined;
  const start = new SseScan(format, true, false);
  start.feed(kept.first);
  const end = new SseScan(format, true, false);
  for (const chunk of kept.last) end.feed(chunk);
  return end.usage ? mergeUsage(start.usage, end.usage) : start.usage;
}

/** The response is over (sent, or the client gone): one place for every account of it. */
export function accountClosed(call: ProxiedCall): void {
  const { response, delivery } = call;
  const { lifecycle, telemetry, budgets } = call.plane.parts;
  lifecycle.leave(response, call.inFlightSlot);
  delivery.closed();
  const status = statusOf(response);
  if (telemetry.enabled) telemetry.finished(call.context, call.info.method, call.route, status);
  budgets.finished(call.context, status);
}
