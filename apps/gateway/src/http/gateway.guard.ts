import { Inject, Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import type { IncomingMessage } from 'node:http';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_CONFIG } from '../gateway.tokens.js';
import { Budgets } from '../budgets/budgets.service.js';
import { keyRequired } from './api-error.js';
import { clientKey, isOneOf, keyDigest } from './credentials.js';
import { STATUS_ACCESS, statusSignIn, type StatusAccess } from '../status/status.controller.js';
import { StatusSessions } from '../status/status-session.js';

/**
 * Handler metadata read by the gateway guard: a probe (liveness, readiness) that a load balancer or Kubernetes calls
 * without a key. Such a route answers a caller without a key with its status alone (see `ControlKeys`).
 */
export const KEYLESS_PROBE = 'gateway:keyless-probe';

/**
 * Who may see the control routes (health details, metrics): anyone while
 * neither gateway keys nor virtual keys are on, else whoever presents one of
 * them (a keys file's reload takes effect at once).
 */
export class ControlKeys {
  private readonly keyDigests: Buffer[];

  constructor(
    config: GatewayConfig,
    private readonly budgets: Budgets,
  ) {
    this.keyDigests = config.gatewayKeys.map(keyDigest);
  }

  admits(headers: IncomingMessage['headers']): boolean {
    if (this.keyDigests.length === 0 && !this.budgets.keysOn) return true;
    const presented = clientKey(headers);
    return this.budgets.keys?.find(presented) !== undefined || isOneOf(this.keyDigests, presented);
  }
}

/**
 * The key check of the control routes Nest serves (health, metrics, the
 * status page): with gateway keys or virtual keys on, a request presents one,
 * except on the probes (which then say their status only), on the status
 * page's own sign-in routes (which check the key themselves) and on its data
 * with a session. The proxied routes check keys in the data plane, before
 * Nest sees them.
 */
@Injectable()
export class GatewayGuard implements CanActivate {
  private readonly keys: ControlKeys;
  private readonly sessions: StatusSessions;

  constructor(
    @Inject(GATEWAY_CONFIG) config: GatewayConfig,
    budgets: Budgets,
  ) {
    this.keys = new ControlKeys(config, budgets);
    this.sessions = new StatusSessions(statusSignIn(config, budgets));
  }

  canActivate(execution: ExecutionContext): boolean {
    const request = execution.switchToHttp().getRequest<IncomingMessage & { raw?: IncomingMessage }>();
    if (this.keys.admits(request.headers) || this.isProbe(execution) || this.statusAllows(execution, request)) return true;
    throw keyRequired();
  }

  private isProbe(execution: ExecutionContext): boolean {
    return Reflect.getMetadata(KEYLESS_PROBE, execution.getHandler()) === true;
  }

  /** The status page's own routes: its page and login are open (they check the key themselves), its data needs a session. */
  private statusAllows(execution: ExecutionContext, request: IncomingMessage): boolean {
    const access = Reflect.getMetadata(STATUS_ACCESS, execution.getHandler()) as StatusAccess | undefined;
    return access === 'public' || (access === 'session' && this.sessions.isValid(request.headers));
  }
}
