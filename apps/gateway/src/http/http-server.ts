import { ExpressAdapter } from '@nestjs/platform-express';
import { createServer, type RequestListener, type Server, type ServerOptions } from 'node:http';
import type { GatewayConfig } from '../config/gateway-config.js';

/**
 * Node's own limits on what a client may take, set on the HTTP server of
 * either platform: a client that drips its headers or body is cut once
 * `--request-timeout` has passed (Fastify would otherwise turn this off), and
 * stalled connections are looked for every second rather than every 30.
 */
export function serverOptions(config: GatewayConfig): ServerOptions {
  return {
    requestTimeout: config.requestTimeoutMs,
    headersTimeout: Math.min(10_000, config.requestTimeoutMs),
    keepAliveTimeout: 5_000,
    connectionsCheckingInterval: 1_000,
  };
}

/** A server made with `serverOptions`, and the connection cap (connections beyond it are closed at once). */
export function createGatewayServer(config: GatewayConfig, handler?: RequestListener): Server {
  const server = createServer(serverOptions(config), handler);
  server.maxConnections = config.maxConnections;
  return server;
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
