import { keyRequired } from '../common/api-error.js';
import { identityOf, isOneOf } from '../common/credentials.js';
import type { ProxiedCall } from './proxied-call.js';

/**
 * Admission, first half: who the caller is. A request without a key the gateway accepts is refused; a virtual key
 * names its holder, and that name is the caller's one identity (dedup, fair queue, limits, spend).
 */
export function identify(call: ProxiedCall): void {
  const plane = call.plane;
  const { budgets, config } = plane.parts;
  const context = call.context;
  const key = (call.key = budgets.keys?.find(call.presented));
  if ((plane.keyDigests.length > 0 || budgets.keysOn) && !key && !isOneOf(plane.keyDigests, call.presented)) {
    throw keyRequired();
  }
  const identity = key ? `key=${key.name}` : identityOf(call.request.headers, config.provider, plane.checksKeys);
  context.identity = identity;
  const tenant = identity === undefined ? undefined : plane.tenantOf(identity);
  call.tenant = tenant;
  // One hash: the request log, the request line, metrics and rate limits all name the caller by its first 12 characters.
  if (tenant !== undefined) context.tenantHash = tenant.slice(0, 12);
}

/**
 * Admission, second half: the caller's limits and budget (a wait, when its key's limits say so; nothing to wait for
 * otherwise). The money a call holds against a cap is held by the call that reaches the provider (`UpstreamCall`).
 */
export function admit(call: ProxiedCall): Promise<void> | undefined {
  const budgets = call.plane.parts.budgets;
  return budgets.needsAdmission(call.key) ? budgets.admit(call.context, call.key) : undefined;
}
