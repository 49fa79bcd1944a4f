import { Body, Controller, Get, Header, HttpCode, Inject, Post, Req, Res, SetMetadata, type Type } from '@nestjs/common';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_CONFIG } from '../gateway.tokens.js';
import { ApiError } from '../http/api-error.js';
import { clientKey, isOneOf, keyDigest } from '../http/credentials.js';
import { StatusBoard } from './status-board.js';
import { loginPageHtml, statusPageHtml } from './status-page.js';
import { SESSION_COOKIE, SESSION_SECONDS, StatusSessions } from './status-session.js';

/** Handler metadata read by the gateway guard: who may reach a status route when gateway keys are on. */
export const STATUS_ACCESS = 'gateway:status-access';
/** `public`: anyone (the page decides what to show; the login checks the key itself). `session`: a key or a session cookie. */
export type StatusAccess = 'public' | 'session';

const CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'";

type AnyResponse = ServerResponse | { raw: ServerResponse; hijack(): void };

/** The status page's routes under `path`: the page, its login, its SSE stream and a JSON snapshot. */
export function statusController(path: string): Type<unknown> {
  @Controller()
  class StatusController {
    private readonly sessions: StatusSessions;
    private readonly keyDigests: Buffer[];

    constructor(
      @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
      private readonly board: StatusBoard,
    ) {
      this.sessions = new StatusSessions(config.gatewayKeys);
      this.keyDigests = config.gatewayKeys.map(keyDigest);
    }

    /** The page, or (gateway keys on, no session yet) the form to sign in with a key. */
    @Get(path)
    @SetMetadata(STATUS_ACCESS, 'public')
    @Header('content-type', 'text/html; charset=utf-8')
    @Header('cache-control', 'no-store')
    @Header('content-security-policy', CSP)
    @Header('x-frame-options', 'DENY')
    page(@Req() request: IncomingMessage): string {
      return this.allowed(request) ? statusPageHtml() : loginPageHtml();
    }

    /** Trades a gateway key for an HttpOnly, SameSite=Strict session cookie valid on the status routes only. */
    @Post(`${path}/login`)
    @SetMetadata(STATUS_ACCESS, 'public')
    @HttpCode(204)
    login(@Body() body: unknown, @Res({ passthrough: true }) response: AnyResponse): void {
      const key = (body as { key?: unknown } | undefined)?.key;
      if (typeof key !== 'string' || !this.isKey(key)) {
        throw new ApiError(401, 'That key is not one of this gateway\'s keys.', 'invalid_api_key', 'key', 'authentication_error');
      }
      const raw = 'raw' in response ? response.raw : response;
      raw.setHeader('set-cookie', `${SESSION_COOKIE}=${this.sessions.issue()}; Path=${path}; Max-Age=${SESSION_SECONDS}; HttpOnly; SameSite=Strict`);
    }

    /** Snapshots as server-sent events: one at once, then every second and at every breaker transition. */
    @Get(`${path}/events`)
    @SetMetadata(STATUS_ACCESS, 'session')
    events(@Res() response: AnyResponse): void {
      let raw: ServerResponse;
      if ('raw' in response) {
        response.hijack();
        raw = response.raw;
      } else raw = response;
      raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
      raw.flushHeaders();
      this.board.subscribe(raw);
    }

    /** The same snapshot once, as JSON (for scripts). */
    @Get(`${path}/snapshot`)
    @SetMetadata(STATUS_ACCESS, 'session')
    @Header('cache-control', 'no-store')
    snapshot() {
      return this.board.portSnapshot();
    }

    private allowed(request: IncomingMessage): boolean {
      if (this.keyDigests.length === 0) return true;
      const key = clientKey(request.headers);
      return (key !== undefined && this.isKey(key)) || this.sessions.isValid(request.headers);
    }

    private isKey(key: string): boolean {
      return isOneOf(this.keyDigests, key);
    }
  }
  return StatusController;
}
