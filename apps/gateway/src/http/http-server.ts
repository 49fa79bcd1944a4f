import type { ExpressAdapter } from '@nestjs/platform-express';
import {
  STATUS_CODES,
  createServer,
  type IncomingMessage,
  type RequestListener,
  type Server,
  type ServerOptions,
  type ServerResponse,
} from 'node:http';
import type { Duplex } from 'node:stream';
import type { GatewayConfig } from '../config/gateway-config.js';
import { hostCheckOf } from '../config/allowed-hosts.js';
import { ApiError } from '../common/api-error.js';
import { UNLOGGED, answerAndClose, apiOfUrl, errorReply, unroutedApi } from './error-reply.js';
import { guardConnectionTable } from './slow-clients.js';

/**
 * Node's own limits on what a client may take, set on the HTTP server of
 * either platform: a client that drips its headers or body is cut once
 * `--request-timeout` has passed (Fastify would otherwise turn this off), and
 * stalled connections are looked for every second rather than every 30. Idle
 * connections stay open for `--keep-alive-timeout` (65 s, not Node's 5): a
 * load balancer in front (60 s idle timeout on AWS's, Google's and nginx's
 * upstream keep-alive) never reuses one the gateway is closing, and clients
 * that come back as a herd find their connections still open instead of all
 * connecting at once past the listen backlog.
 */
export function serverOptions(config: GatewayConfig): ServerOptions {
  return {
    requestTimeout: config.requestTimeoutMs,
    headersTimeout: Math.min(10_000, config.requestTimeoutMs),
    keepAliveTimeout: config.keepAliveTimeoutMs,
    connectionsCheckingInterval: 1_000,
  };
}

/** Serves a request ahead of the platform, or returns false to leave it to the platform's router. */
export type FrontHandler = (request: IncomingMessage, response: ServerResponse) => boolean;

const FRONTS = new WeakMap<Server, (front: FrontHandler) => void>();

/**
 * A server made with `serverOptions`, the connection cap (connections beyond it are closed at once) and the guards
 * against slow clients (slow-clients.ts). Each request's host is checked first (`--allowed-hosts`), on every route
 * of either platform; then it goes to the front handler given by `serveAhead` (the data plane), then to the
 * platform's.
 */
export function createGatewayServer(
  config: GatewayConfig,
  handler?: RequestListener,
  options: { answerClientErrors?: boolean } = {},
): Server {
  let front: FrontHandler | undefined;
  const hosts = hostCheckOf(config);
  const handle = (request: IncomingMessage, response: ServerResponse) => {
    if (!hosts.allows(request)) return misdirected(config, request, response);
    if (front !== undefined && front(request, response)) return;
    handler?.(request, response);
  };
  const server = createServer(serverOptions(config), handle);
  FRONTS.set(server, (next) => (front = next));
  server.maxConnections = config.maxConnections;
  guardConnectionTable(server, config, handle);
  if (options.answerClientErrors) server.on('clientError', clientErrorAnswer(config));
  return server;
}

/**
 * A request Node's parser refuses (not HTTP, headers too large, or not in by --request-timeout): a JSON error that
 * names the problem, as Fastify's server answers it, where Node's own answer has a status line only. Like Node's,
 * written only while no answer on the connection has begun, then the connection is closed.
 */
function clientErrorAnswer(config: GatewayConfig): (error: NodeJS.ErrnoException, socket: Duplex) => void {
  const api = unroutedApi(config);
  return (error, socket) => {
    if (error.code === 'ECONNRESET' || socket.destroyed) return;
    const [status, message, code] =
      error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'The request did not arrive in time (--request-timeout).', 'request_timeout']
        : error.code === 'HPE_HEADER_OVERFLOW'
          ? [431, 'The request headers are larger than this gateway accepts.', 'headers_too_large']
          : [400, 'The request is not valid HTTP.', 'malformed_request'];
    const refusal = new ApiError(status, message, code, null, 'invalid_request_error');
    const answering = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (socket.writable && !answering?.headersSent) {
      const reply = errorReply(refusal, { api }, UNLOGGED);
      const headers = { ...reply.headers, 'content-length': String(reply.body.length), connection: 'close' };
      const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`);
      socket.write(`HTTP/1.1 ${reply.status} ${STATUS_CODES[reply.status]}\r\n${head.join('')}\r\n`);
      socket.write(reply.body);
    }
    socket.destroy();
  };
}

/**
 * A host this gateway does not serve (a DNS-rebinding page, most likely): 421, before any route ran, so no key is
 * looked at and nothing reaches the provider. In the proxied route's API, else in the gateway's own JSON.
 */
function misdirected(config: GatewayConfig, request: IncomingMessage, response: ServerResponse): void {
  const error = new ApiError(
    421,
    'This gateway does not serve that host: add it to --allowed-hosts if it is yours (see docs/security.md, "DNS rebinding and the Host header").',
    'host_not_allowed',
    null,
    'invalid_request_error',
  );
  // The connection was opened for a host that is not ours: nothing more is taken on it.
  answerAndClose(response, error, apiOfUrl(config, request.url));
}

/** Puts `front` ahead of the platform on a server made by `createGatewayServer`. */
export function serveAhead(server: Server, front: FrontHandler): void {
  const set = FRONTS.get(server);
  if (!set) throw new Error('serveAhead: the server was not made by createGatewayServer');
  set(front);
}

/**
 * Nest's Express adapter, on a server made by `createGatewayServer` (Nest's own takes no server options), or with
 * `ownServer` false on one that never listens (the app's requests are handed to it by a server already listening).
 * Express and its adapter are loaded only for `--platform express`.
 */
export async function gatewayExpressAdapter(config: GatewayConfig, ownServer = true): Promise<ExpressAdapter> {
  const { ExpressAdapter } = await import('@nestjs/platform-express');
  class GatewayExpressAdapter extends ExpressAdapter {
    override initHttpServer(): void {
      this.httpServer = ownServer ? createGatewayServer(config, this.getInstance()) : createServer();
    }
  }
  return new GatewayExpressAdapter();
}
