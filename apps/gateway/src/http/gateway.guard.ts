import { Inject, Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { BodyTooDeepError, dedupKey, hashIdentity } from 'nest-prompt-orchestrator';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_CONFIG } from '../gateway.tokens.js';
import { GatewayService } from '../gateway.service.js';
import { Budgets } from '../budgets/budgets.service.js';
import type { VirtualKey } from '../budgets/virtual-keys.js';
import { ROUTES, gatewayChecksKeys } from '../providers/provider.js';
import { routeSpecOf } from '../routes/gateway-route.decorator.js';
import { ApiError } from './api-error.js';
import { clientKey, identityOf, isOneOf, keyDigest } from './credentials.js';
import { contextOf } from './request-context.js';
import { STATUS_ACCESS, statusSignIn, type StatusAccess } from '../status/status.controller.js';
import { StatusSessions } from '../status/status-session.js';

// Deeper than any real request; serialising it again for the provider would overflow the stack.
const MAX_DEPTH = 128;

type GatewayRequest = IncomingMessage & { body?: unknown; rawBody?: Buffer; originalUrl?: string; raw?: IncomingMessage };

/**
 * Runs before the orchestrator's interceptor (Nest runs guards first), so a
 * request that cannot be served is answered at once: it is never
 * deduplicated, never queued and never counted by the breaker. For each
 * routed request it records which route and client API it is, checks the
 * gateway key, checks the body, and walks the body once for both its depth
 * and its dedup key.
 */
@Injectable()
export class GatewayGuard implements CanActivate {
  private readonly keyDigests: Buffer[];
  private readonly sessions: StatusSessions;
  private readonly checksKeys: boolean;

  constructor(
    @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
    private readonly gateway: GatewayService,
    private readonly budgets: Budgets,
  ) {
    this.keyDigests = config.gatewayKeys.map(keyDigest);
    this.sessions = new StatusSessions(statusSignIn(config, budgets));
    this.checksKeys = gatewayChecksKeys(config);
  }

  async canActivate(execution: ExecutionContext): Promise<boolean> {
    const request = execution.switchToHttp().getRequest<GatewayRequest>();
    const context = contextOf(request);
    const spec = routeSpecOf(execution.getHandler());
    if (spec) {
      context.route = spec.route;
      context.api = ROUTES[spec.route].api;
      context.identity = identityOf(request.headers, this.config.provider, this.checksKeys);
    }
    // A virtual key names its holder: that name is the caller's one identity (dedup, fair queue, limits, spend).
    const key: VirtualKey | undefined = this.budgets.keys?.find(clientKey(request.headers));
    if (key) context.identity = `key=${key.name}`;
    // Hashed once: the request log, the request line, metrics and rate limits all name the caller by this.
    if (context.identity !== undefined) context.tenantHash = hashIdentity(context.identity).slice(0, 12);
    if ((this.keyDigests.length > 0 || this.budgets.keysOn) && !key && !this.presentsGatewayKey(request) && !this.statusAllows(execution, request)) {
      throw new ApiError(
        401,
        'This gateway needs an API key: send one of its keys as "Authorization: Bearer <key>" or "x-api-key".',
        'invalid_api_key',
        null,
        'authentication_error',
      );
    }
    if (!spec) return true;
    this.budgets.track(request, rawResponse(execution.switchToHttp().getResponse()), context);
    const upload = ROUTES[spec.route].body === 'multipart';
    if (spec.validate) {
      const type = request.headers['content-type'];
      // A body must say what it is (a browser sends text/plain across origins without asking first: never read as
      // JSON); a request with no body at all goes to the provider as it is.
      const expected = upload ? 'multipart/form-data' : 'application/json';
      const matches = type !== undefined && (upload ? /^multipart\/form-data\b/i : /^application\/(.+\+)?json\b/i).test(type);
      // Said to be JSON but empty: not JSON (as the platforms' own parsers say when they see it).
      if (matches && !upload && !hasBody(request)) throw new ApiError(400, 'The request body is empty: it is not valid JSON.', 'invalid_json');
      if (hasBody(request) && !matches) {
        throw new ApiError(
          415,
          `Content-Type must be ${expected}, got ${type ? `"${type.slice(0, 100)}"` : 'none'}.`,
          'unsupported_media_type',
        );
      }
      spec.validate(request.body);
    }
    context.body = request.body;
    const model = (request.body as { model?: unknown } | undefined)?.model;
    if (typeof model === 'string') context.span?.setAttributes({ 'gen_ai.request.model': model.slice(0, 200) });
    await this.budgets.admit(context, key);
    // An upload is relayed as bytes: there is no JSON to walk, and nothing to share.
    if (upload) return true;
    const deduplicated = this.config.dedup && ROUTES[spec.route].kind === 'generation';
    const scope = deduplicated ? await this.gateway.dedupScope(request.headers) : undefined;
    this.walkBody(request, context, scope);
    return true;
  }

  /**
   * The body's depth is bounded, and (on a deduplicated route, with dedup on) the key made, with the caller's
   * credential and who answers behind the upstream URL. The key hashes the bytes the client sent, the same bytes
   * an untranslated route sends upstream: one hash pass, no second serialisation of a large conversation. A repeat
   * from the same client code sends the same bytes; a body that only differs in whitespace or field order is
   * another key (a miss, never a wrong answer). Without the bytes (a body some other parser made), the key falls back
   * to the canonical form of the parsed body.
   */
  private walkBody(request: GatewayRequest, context: ReturnType<typeof contextOf>, scope: string | undefined): void {
    const input = {
      method: request.method ?? 'GET',
      url: request.originalUrl ?? request.url ?? '',
      body: request.body,
      rawBody: Buffer.isBuffer(request.rawBody) ? request.rawBody : undefined,
      credential: context.identity,
      scope,
    };
    try {
      const key = dedupKey(input, { maxDepth: MAX_DEPTH });
      context.requestHash = key;
      if (scope !== undefined) context.dedupKey = key;
    } catch (error) {
      if (!(error instanceof BodyTooDeepError)) throw error;
      throw new ApiError(400, error.message, 'nested_too_deep');
    }
  }

  /** The status page's own routes: its page and login are open (they check the key themselves), its data needs a session. */
  private statusAllows(execution: ExecutionContext, request: IncomingMessage): boolean {
    const access = Reflect.getMetadata(STATUS_ACCESS, execution.getHandler()) as StatusAccess | undefined;
    return access === 'public' || (access === 'session' && this.sessions.isValid(request.headers));
  }

  private presentsGatewayKey(request: IncomingMessage): boolean {
    return isOneOf(this.keyDigests, clientKey(request.headers));
  }
}

/** The Node response under a Fastify reply (or the Node response itself). */
function rawResponse(response: ServerResponse | { raw: ServerResponse }): ServerResponse {
  return 'raw' in response ? response.raw : response;
}

/** Whether a request carries a body (a length above 0, or chunks). */
function hasBody(request: IncomingMessage): boolean {
  const length = request.headers['content-length'];
  if (length !== undefined) return length !== '0';
  return request.headers['transfer-encoding'] !== undefined;
}
