import { ExpressAdapter } from '@nestjs/platform-express';
import { createServer, type IncomingMessage, type RequestListener, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import type { GatewayConfig } from '../config/gateway-config.js';
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
 * against slow clients (slow-clients.ts). Each
 * request goes first to the front handler given by `serveAhead` (the data plane), then to the platform's.
 */
export function createGatewayServer(config: GatewayConfig, handler?: RequestListener): Server {
  let front: FrontHandler | undefined;
  const handle = (request: IncomingMessage, response: ServerResponse) => {
    if (front !== undefined && front(request, response)) return;
    handler?.(request, response);
  };
  const server = createServer(serverOptions(config), handle);
  FRONTS.set(server, (next) => (front = next));
  server.maxConnections = config.maxConnections;
  guardConnectionTable(server, config, handle);
  return server;
}

/** Puts `front` ahead of the platform on a server made by `createGatewayServer`. */
export function serveAhead(server: Server, front: FrontHandler): void {
  const set = FRONTS.get(server);
  if (!set) throw new Error('serveAhead: the server was not made by createGatewayServer');
  set(front);
}

/** Nest's Express adapter, on a server made by `createGatewayServer` (Nest's own takes no server options). */
export class GatewayExpressAdapter extends ExpressAdapter {
  constructor(private readonly config: GatewayConfig) {
    super();
  }

  override initHttpServer(): void {
    this.httpServer = createGatewayServer(this.config, this.getInstance());
  }
}
