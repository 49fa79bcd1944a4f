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
 * The key check of the control routes Nest serves (health, metrics, the
 * status page): with gateway keys or virtual keys on, a request presents one,
 * except on the status page's own sign-in routes (which check the key
 * themselves) and its data with a session. The proxied routes check keys in
 * the data plane, before Nest sees them.
 */
@Injectable()
export class GatewayGuard implements CanActivate {
  private readonly keyDigests: Buffer[];
  private readonly sessions: StatusSessions;

  constructor(
    @Inject(GATEWAY_CONFIG) config: GatewayConfig,
    private readonly budgets: Budgets,
  ) {
    this.keyDigests = config.gatewayKeys.map(keyDigest);
    this.sessions = new StatusSessions(statusSignIn(config, budgets));
  }

  canActivate(execution: ExecutionContext): boolean {
    const request = execution.switchToHttp().getRequest<IncomingMessage & { raw?: IncomingMessage }>();
    if (this.keyDigests.length === 0 && !this.budgets.keysOn) return true;
    const presented = clientKey(request.headers);
    if (this.budgets.keys?.find(presented) || isOneOf(this.keyDigests, presented) || this.statusAllows(execution, request)) return true;
    throw keyRequired();
  }

  /** The status page's own routes: its page and login are open (they check the key themselves), its data needs a session. */
  private statusAllows(execution: ExecutionContext, request: IncomingMessage): boolean {
    const access = Reflect.getMetadata(STATUS_ACCESS, execution.getHandler()) as StatusAccess | undefined;
    return access === 'public' || (access === 'session' && this.sessions.isValid(request.headers));
  }
}
