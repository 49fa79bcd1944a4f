import { Inject, Injectable, UnauthorizedException, type NestMiddleware } from '@nestjs/common';
import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { GATEWAY_CONFIG } from '../gateway.tokens.js';
import type { GatewayConfig } from '../config/gateway-config.js';
import { attachContext, serverTiming, type RequestContext } from './request-context.js';

// A propagated id is echoed in headers and logs: accept only a short, plain token.
const REQUEST_ID = /^[\w.:-]{1,128}$/;

/**
 * Runs first on every request: gives it an `x-request-id` (propagated or new),
 * adds `Server-Timing` when the headers go out, and, when gateway keys are
 * configured, refuses clients that do not present one.
 */
@Injectable()
export class RequestContextMiddleware implements NestMiddleware {
  private readonly keyDigests: Buffer[];

  constructor(@Inject(GATEWAY_CONFIG) config: GatewayConfig) {
    this.keyDigests = config.gatewayKeys.map(digest);
  }

  use(request: IncomingMessage, response: ServerResponse, next: (error?: unknown) => void): void {
    const incoming = request.headers['x-request-id'];
    const id = typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
    const context: RequestContext = { id, startedAt: performance.now() };
    attachContext(request, context);
    response.setHeader('x-request-id', id);
    const writeHead = response.writeHead;
    response.writeHead = function (this: ServerResponse, ...args: unknown[]) {
      if (!this.headersSent) this.setHeader('server-timing', serverTiming(context, performance.now()));
      return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args);
    } as ServerResponse['writeHead'];

    if (this.keyDigests.length > 0 && !this.presentsGatewayKey(request)) {
      next(
        new UnauthorizedException({
          error: {
            message: 'This gateway needs an API key: send one of its keys as "Authorization: Bearer <key>" or "x-api-key".',
            type: 'authentication_error',
            param: null,
            code: 'invalid_api_key',
          },
        }),
      );
      return;
    }
    next();
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

function digest(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}
