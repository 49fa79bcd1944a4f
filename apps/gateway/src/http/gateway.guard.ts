import { Inject, Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { BodyTooDeepError, dedupKey } from 'nest-prompt-orchestrator';
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_CONFIG } from '../gateway.tokens.js';
import { ROUTES } from '../providers/provider.js';
import { routeSpecOf } from '../routes/gateway-route.decorator.js';
import { ApiError } from './api-error.js';
import { contextOf } from './request-context.js';

// Deeper than any real request; serialising it again for the provider would overflow the stack.
const MAX_DEPTH = 128;

type GatewayRequest = IncomingMessage & { body?: unknown; originalUrl?: string; raw?: IncomingMessage };

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

  constructor(@Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig) {
    this.keyDigests = config.gatewayKeys.map(digest);
  }

  canActivate(execution: ExecutionContext): boolean {
    const request = execution.switchToHttp().getRequest<GatewayRequest>();
    const context = contextOf(request);
    const spec = routeSpecOf(execution.getHandler());
    if (spec) {
      context.route = spec.route;
      context.api = ROUTES[spec.route].api;
    }
    if (this.keyDigests.length > 0 && !this.presentsGatewayKey(request)) {
      throw new ApiError(
        401,
        'This gateway needs an API key: send one of its keys as "Authorization: Bearer <key>" or "x-api-key".',
        'invalid_api_key',
        null,
        'authentication_error',
      );
    }
    if (!spec) return true;
    if (spec.validate) {
      const type = request.headers['content-type'];
      if (!type || !/^application\/(.+\+)?json\b/i.test(type)) {
        throw new ApiError(
          415,
          `Content-Type must be application/json, got ${type ? `"${type.slice(0, 100)}"` : 'none'}.`,
          'unsupported_media_type',
        );
      }
      spec.validate(request.body);
    }
    this.walkBody(request, context);
    return true;
  }

  /** One pass over the body: its depth is bounded, and (with dedup on) its canonical form hashed into the key. */
  private walkBody(request: GatewayRequest, context: ReturnType<typeof contextOf>): void {
    const input = {
      method: request.method ?? 'GET',
      url: request.originalUrl ?? request.url ?? '',
      body: request.body,
      credential: credentialOf(request.headers),
    };
    try {
      const key = dedupKey(input, { maxDepth: MAX_DEPTH });
      if (this.config.dedup) context.dedupKey = key;
    } catch (error) {
      if (!(error instanceof BodyTooDeepError)) throw error;
      throw new ApiError(400, error.message, 'nested_too_deep');
    }
  }

  private presentsGatewayKey(request: IncomingMessage): boolean {
    const key = clientKey(request.headers);
    if (!key) return false;
    const presented = digest(key);
    return this.keyDigests.some((known) => timingSafeEqual(known, presented));
  }
}

/** The key a client sent, from `Authorization: Bearer` or `x-api-key`. */
export function clientKey(headers: IncomingMessage['headers']): string | undefined {
  const authorization = headers.authorization;
  if (typeof authorization === 'string' && authorization.toLowerCase().startsWith('bearer ')) {
    return authorization.slice(7).trim() || undefined;
  }
  const apiKey = headers['x-api-key'];
  return typeof apiKey === 'string' && apiKey ? apiKey : undefined;
}

/** The caller's identity in the dedup key: the `authorization` header, else `x-api-key` (as the plugin's default). */
function credentialOf(headers: IncomingMessage['headers']): string | undefined {
  const value = headers.authorization ?? headers['x-api-key'];
  return Array.isArray(value) ? value.join(',') : value;
}

function digest(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}
