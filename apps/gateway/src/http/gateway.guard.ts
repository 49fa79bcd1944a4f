import { Inject, Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import type { IncomingMessage } from 'node:http';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_CONFIG } from '../common/gateway.tokens.js';
import { Budgets } from '../budgets/budgets.service.js';
import { ApiError, keyRequired } from '../common/api-error.js';
import { clientKey, isOneOf, keyDigest } from '../common/credentials.js';
import { STATUS_ACCESS, statusSignIn, type StatusAccess } from '../status/status-access.js';
import { StatusSessions } from '../status/status-session.js';
import { SessionSecret } from '../status/session-secret.js';

/**
 * Handler metadata read by the gateway guard: a probe (liveness, readiness) that a load balancer or Kubernetes calls
 * without a key. Such a route answers a caller without a key with its status alone (see `ControlKeys`).
 */
export const KEYLESS_PROBE = 'gateway:keyless-probe';

/**
 * Who may see the control routes (health details, metrics): anyone while
 * neither gateway keys nor virtual keys are on, else an admin: whoever
 * presents a gateway key or an `"admin": true` key of the keys file (the keys
 * that may sign in to the status page). These routes show the whole
 * gateway's figures (every tenant's tokens, the fleet's spend), so a tenant's
 * own key is not enough. A keys file's reload takes effect at once.
 */
export class ControlKeys {
  private readonly keyDigests: Buffer[];

  constructor(
    config: GatewayConfig,
    private readonly budgets: Budgets,
  ) {
    this.keyDigests = config.gatewayKeys.map(keyDigest);
  }

  /** `admin`: may read everything; `tenant`: a virtual key without the admin flag; `none`: no key the gateway knows. */
  access(headers: IncomingMessage['headers']): 'admin' | 'tenant' | 'none' {
    if (this.keyDigests.length === 0 && !this.budgets.keysOn) return 'admin';
    const presented = clientKey(headers);
    if (isOneOf(this.keyDigests, presented)) return 'admin';
    const key = this.budgets.keys?.find(presented);
    return key === undefined ? 'none' : key.admin === true ? 'admin' : 'tenant';
  }

  admits(headers: IncomingMessage['headers']): boolean {
    return this.access(headers) === 'admin';
  }
}

/** A tenant's key on a route that shows the whole gateway: it is a key, just not one that may read this. */
export function adminKeyRequired(): ApiError {
  return new ApiError(
    403,
    'This route shows the whole gateway\'s figures: it needs an admin key (a gateway key, or an "admin": true key of the keys file).',
    'admin_key_required',
    null,
    'permission_error',
  );
}

/**
 * The key check of the control routes Nest serves (health, metrics, the
 * status page): with gateway keys or virtual keys on, a request presents an admin key,
 * except on the probes (which then say their status only), on the status
 * page's own sign-in routes (which check the key themselves) and on its data
 * with a session. The proxied routes check keys in the data plane, before
 * Nest sees them.
 */
@Injectable()
export class GatewayGuard implements CanActivate {
  private readonly keys: ControlKeys;
  private readonly sessions: StatusSessions;

  constructor(@Inject(GATEWAY_CONFIG) config: GatewayConfig, budgets: Budgets, secret: SessionSecret) {
    this.keys = new ControlKeys(config, budgets);
    this.sessions = new StatusSessions(statusSignIn(config, budgets), () => secret.current);
  }

  canActivate(execution: ExecutionContext): boolean {
    const request = execution.switchToHttp().getRequest<IncomingMessage & { raw?: IncomingMessage }>();
    const access = this.keys.access(request.headers);
    if (access === 'admin' || this.isProbe(execution) || this.statusAllows(execution, request)) return true;
    throw access === 'tenant' ? adminKeyRequired() : keyRequired();
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
