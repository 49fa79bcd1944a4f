import {
  Body,
  Controller,
  Get,
  Header,
  HttpCode,
  Inject,
  Post,
  Req,
  Res,
  SetMetadata,
  type Type,
} from '@nestjs/common';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { Budgets } from '../budgets/budgets.service.js';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_CONFIG } from '../common/gateway.tokens.js';
import { ApiError } from '../common/api-error.js';
import { clientAddress, hostCheckOf, listensOnLoopback, type HostCheck } from '../config/allowed-hosts.js';
import { clientKey, isOneOf } from '../common/credentials.js';
import { STATUS_ACCESS, statusSignIn } from './status-access.js';
import { StatusBoard } from './status-board.js';
import { lockedPageHtml, loginPageHtml, statusPageHtml } from './status-page.js';
import { SESSION_COOKIE, SESSION_SECONDS, StatusSessions } from './status-session.js';
import { SessionSecret } from './session-secret.js';
import { SignInThrottle } from './sign-in-throttle.js';

const CSP =
  "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'";

type AnyResponse = ServerResponse | { raw: ServerResponse; hijack(): void };

// Whether the gateway listens on loopback only (then an open page shows nothing to the network).
export { listensOnLoopback };

/**
 * Whether the browser reached the gateway over TLS: the gateway's own socket, or (`--trust-proxy` only: anyone can
 * send the header) the first proxy's `X-Forwarded-Proto`. The session cookie is then `Secure`.
 */
export function servedOverTls(request: IncomingMessage, trustProxy: boolean): boolean {
  if ((request.socket as Partial<TLSSocket>).encrypted === true) return true;
  if (!trustProxy) return false;
  const proto = request.headers['x-forwarded-proto'];
  return (Array.isArray(proto) ? proto[0] : proto)?.split(',')[0]?.trim().toLowerCase() === 'https';
}

/**
 * The status page's origin check: a browser's cross-site request says where it comes from, and that must be a
 * host this gateway serves (--allowed-hosts). Matching `Host` is never enough: a DNS-rebinding page sends its own
 * name in both.
 */
function crossSite(request: IncomingMessage, hosts: HostCheck): boolean {
  const origin = request.headers.origin;
  return origin !== undefined && !hosts.allowsOrigin(origin, request);
}

/** The status page's routes under `path`: the page, its login, its SSE stream and a JSON snapshot. */
export function statusController(path: string): Type<unknown> {
  @Controller()
  class StatusController {
    private readonly sessions: StatusSessions;
    private readonly signIn: () => readonly Buffer[];
    /** Beyond loopback, with no key that may sign in and no --status-public: the page serves nobody. */
    private readonly locked: boolean;
    private readonly hosts: HostCheck;
    private readonly throttle = new SignInThrottle();

    constructor(
      @Inject(GATEWAY_CONFIG) private readonly config: GatewayConfig,
      private readonly board: StatusBoard,
      budgets: Budgets,
      secret: SessionSecret,
    ) {
      this.hosts = hostCheckOf(config);
      this.signIn = statusSignIn(config, budgets);
      this.sessions = new StatusSessions(this.signIn, () => secret.current);
      this.locked = !this.sessions.possible && !listensOnLoopback(config.host) && !config.observability.statusPublic;
    }

    /** The page, or (gateway keys on, no session yet) the form to sign in with a key. */
    @Get(path)
    @SetMetadata(STATUS_ACCESS, 'public')
    @Header('content-type', 'text/html; charset=utf-8')
    @Header('cache-control', 'no-store')
    @Header('content-security-policy', CSP)
    @Header('x-frame-options', 'DENY')
    page(@Req() request: IncomingMessage, @Res({ passthrough: true }) response: AnyResponse): string {
      if (this.locked) {
        ('raw' in response ? response.raw : response).statusCode = 403;
        return lockedPageHtml();
      }
      return this.allowed(request) ? statusPageHtml() : loginPageHtml();
    }

    /**
     * Trades a key that may sign in (a gateway key, or an admin key of the keys
     * file) for an HttpOnly, SameSite=Strict session cookie valid on the status
     * routes only. JSON only and from a served origin only (a cross-site form
     * cannot post here); wrong keys are throttled per client address and in
     * all (see `SignInThrottle`), the right one never is.
     */
    @Post(`${path}/login`)
    @SetMetadata(STATUS_ACCESS, 'public')
    @HttpCode(204)
    login(
      @Req() request: IncomingMessage,
      @Body() body: unknown,
      @Res({ passthrough: true }) response: AnyResponse,
    ): void {
      const raw = 'raw' in response ? response.raw : response;
      if (crossSite(request, this.hosts))
        throw new ApiError(
          403,
          'Sign in from the status page itself: cross-site requests are refused.',
          'cross_site_request',
        );
      const type = request.headers['content-type'];
      if (type === undefined || !/^application\/json\b/i.test(type)) {
        throw new ApiError(
          415,
          `Content-Type must be application/json, got ${type ? `"${type.slice(0, 100)}"` : 'none'}.`,
          'unsupported_media_type',
        );
      }
      if (!this.sessions.possible) {
        throw new ApiError(
          403,
          'Nobody can sign in: this gateway has no --gateway-keys and no "admin": true key in its keys file.',
          'status_login_unavailable',
        );
      }
      const key = (body as { key?: unknown } | undefined)?.key;
      // The key is judged first: the right one always signs in, however many wrong ones came from its address.
      if (typeof key !== 'string' || !this.isKey(key)) {
        const wait = this.throttle.failed(clientAddress(request, this.config.trustProxy));
        if (wait !== undefined) {
          raw.setHeader('retry-after', String(wait));
          throw new ApiError(
            429,
            `Too many failed sign-ins: wait ${wait} s.`,
            'too_many_sign_ins',
            null,
            'rate_limit_error',
          );
        }
        throw new ApiError(
          401,
          'That key may not sign in here (a gateway key, or an "admin": true key of the keys file).',
          'invalid_api_key',
          'key',
          'authentication_error',
        );
      }
      const secure = servedOverTls(request, this.config.trustProxy) ? '; Secure' : '';
      raw.setHeader(
        'set-cookie',
        `${SESSION_COOKIE}=${this.sessions.issue()}; Path=${path}; Max-Age=${SESSION_SECONDS}; HttpOnly; SameSite=Strict${secure}`,
      );
    }

    /** Snapshots as server-sent events: one at once, then every second and at every breaker transition. */
    @Get(`${path}/events`)
    @SetMetadata(STATUS_ACCESS, 'session')
    events(@Req() request: IncomingMessage, @Res() response: AnyResponse): void {
      const raw = 'raw' in response ? response.raw : response;
      this.requireAccess(request);
      const peer = clientAddress(request, this.config.trustProxy);
      const refused = this.board.refuseStream(peer);
      if (refused) {
        // Closed after the answer: a refused watcher must not keep holding one of the gateway's connections.
        raw.setHeader('connection', 'close');
        raw.setHeader('retry-after', '10');
        throw new ApiError(429, `${refused}; try again later.`, 'too_many_streams', null, 'rate_limit_error');
      }
      if ('raw' in response) response.hijack();
      raw.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-store',
        'x-accel-buffering': 'no',
      });
      raw.flushHeaders();
      this.board.subscribe(raw, peer);
    }

    /** The same snapshot once, as JSON (for scripts). */
    @Get(`${path}/snapshot`)
    @SetMetadata(STATUS_ACCESS, 'session')
    @Header('cache-control', 'no-store')
    snapshot(@Req() request: IncomingMessage) {
      this.requireAccess(request);
      return this.board.portSnapshot();
    }

    private allowed(request: IncomingMessage): boolean {
      if (this.locked) return false;
      if (!this.sessions.possible) return true;
      const key = clientKey(request.headers);
      return (key !== undefined && this.isKey(key)) || this.sessions.isValid(request.headers);
    }

    /** The data routes: the guard checks keys and sessions when keys are on; a locked page serves nobody. */
    private requireAccess(request: IncomingMessage): void {
      if (this.locked || (this.sessions.possible && !this.allowed(request))) {
        throw new ApiError(
          403,
          'The status page needs a sign-in here (see docs/operations.md, "The status page").',
          'status_login_required',
        );
      }
    }

    private isKey(key: string): boolean {
      return isOneOf(this.signIn(), key);
    }
  }
  return StatusController;
}
