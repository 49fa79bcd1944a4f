import type { Budgets } from '../budgets/budgets.service.js';
import type { GatewayConfig } from '../config/gateway-config.js';
import { keyDigest } from '../common/credentials.js';

/** Handler metadata read by the gateway guard: who may reach a status route when gateway keys are on. */
export const STATUS_ACCESS = 'gateway:status-access';
/** `public`: anyone (the page decides what to show; the login checks the key itself). `session`: a key or a session cookie. */
export type StatusAccess = 'public' | 'session';

/**
 * The keys that may sign in to the status page: the gateway keys, and the
 * keys file's `"admin": true` keys (read at each use: a reload takes effect).
 * The same array comes back while nothing changed, so sessions keep their secret.
 */
export function statusSignIn(config: GatewayConfig, budgets: Budgets): () => readonly Buffer[] {
  const gateway = config.gatewayKeys.map(keyDigest);
  let admins: readonly Buffer[] = [];
  let both: readonly Buffer[] = gateway;
  return () => {
    const current = budgets.keys?.adminDigests() ?? [];
    if (current !== admins) {
      admins = current;
      both = current.length === 0 ? gateway : [...gateway, ...current];
    }
    return both;
  };
}
