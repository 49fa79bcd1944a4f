import 'reflect-metadata';
import type { INestApplication, LoggerService, LogLevel } from '@nestjs/common';
import { HttpAdapterHost, NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { createServer, type RequestListener, type Server } from 'node:http';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import type { GatewayConfig } from './config/gateway-config.js';
import { GatewayCore } from './gateway-core.js';
import { GatewayModule } from './gateway.module.js';
import { GatewayExceptionFilter } from './http/gateway-exception.filter.js';
import { createGatewayServer, gatewayExpressAdapter, serveAhead } from './http/http-server.js';
import { corsOptions } from './http/cors.js';
import { unroutedApi } from './http/error-reply.js';
import { SILENT_LINES } from './common/context-log.js';
import { createLogger, nestLoggerOf } from './observability/logger.js';

export interface CreateGatewayOptions {
  logger?: false | LogLevel[] | LoggerService;
}

const MULTIPART = 'multipart/form-data';

/**
 * Builds the whole gateway as one Nest app (not yet listening): its core, with the data plane ahead of Nest's router
 * on the app's HTTP server. Closing the app stops the core. (`npm start` listens with the core alone and makes the
 * Nest app when a control route is first asked for: see main.ts.)
 */
export async function createGateway(
  config: GatewayConfig,
  options: CreateGatewayOptions = {},
): Promise<INestApplication> {
  const log = createLogger(config.observability);
  // Nest's own warnings and errors, and the services' lines, go through the same logger: one format on stdout.
  const logger =
    options.logger === undefined
      ? nestLoggerOf(log)
      : Array.isArray(options.logger)
        ? nestLoggerOf(log, options.logger)
        : options.logger;
  // Nest's LoggerService takes the context after the message, as the services' lines are written.
  const core = await GatewayCore.create(config, { log, lines: logger === false ? SILENT_LINES : logger });
  try {
    const app = await createControlApp(core, { logger, onServer: 'own' });
    core.server = app.getHttpServer() as Server;
    serveAhead(core.server, core.plane.handle);
    return app;
  } catch (error) {
    await core.close();
    throw error;
  }
}

/**
 * The control routes as a Nest app over `core`, behind a server that is already listening: the request listener to
 * hand the requests the data plane leaves. Nest and its platform are loaded only now.
 */
export async function createControlPlane(
  core: GatewayCore,
  logger: false | LoggerService,
): Promise<{ app: INestApplication; handle: RequestListener }> {
  let handle: RequestListener | undefined;
  const app = await createControlApp(core, { logger, onServer: (listener) => (handle = listener) });
  await app.init();
  if (core.config.platform === 'fastify')
    await (app.getHttpAdapter().getInstance() as { ready(): Promise<unknown> }).ready();
  else handle = app.getHttpAdapter().getInstance() as RequestListener;
  if (!handle) throw new Error('the control plane has no request listener');
  return { app, handle };
}

/**
 * `own`: the app's HTTP server is the gateway's (made by `createGatewayServer`; the app listens). Otherwise the app
 * gets a server that never listens, and its request listener is handed to `onServer`.
 */
async function createControlApp(
  core: GatewayCore,
  options: { logger: false | LoggerService; onServer: 'own' | ((listener: RequestListener) => void) },
): Promise<INestApplication> {
  const { config } = core;
  const { logger, onServer } = options;
  const module = GatewayModule.forRoot(core, onServer === 'own');
  let app: INestApplication;
  if (config.platform === 'fastify') {
    const fastify = await NestFactory.create<NestFastifyApplication>(
      module,
      // Multipart bodies are relayed as bytes (below), never parsed here.
      new FastifyAdapter({
        bodyLimit: config.maxBodyBytes,
        multipart: false,
        // request.ip, .hostname and .protocol believe X-Forwarded-* only with --trust-proxy (as the gateway's own reads do).
        trustProxy: config.trustProxy,
        serverFactory: (handler: RequestListener) => {
          if (onServer === 'own') return createGatewayServer(config, handler);
          onServer(handler);
          return createServer();
        },
      } as ConstructorParameters<typeof FastifyAdapter>[0]),
      // The body's bytes are kept and relayed unchanged where nothing is translated.
      { logger, rawBody: true },
    );
    if (config.corsOrigins) fastify.enableCors(corsOptions(config.corsOrigins));
    // An upload (audio to transcribe) is kept as the bytes the client sent, boundary and all.
    fastify
      .getHttpAdapter()
      .getInstance()
      .addContentTypeParser(MULTIPART, { parseAs: 'buffer', bodyLimit: config.maxBodyBytes }, (request, body, done) => {
        (request as unknown as { rawBody?: Buffer }).rawBody = body as Buffer;
        done(null, body);
      });
    app = fastify;
  } else {
    const express = await NestFactory.create<NestExpressApplication>(
      module,
      await gatewayExpressAdapter(config, onServer === 'own'),
      { bodyParser: false, rawBody: true, logger },
    );
    // Before the body parser, so that its refusals (invalid JSON, too large) carry the CORS headers too.
    if (config.corsOrigins) express.enableCors(corsOptions(config.corsOrigins));
    express.useBodyParser('json', { limit: config.maxBodyBytes, type: ['application/json', 'application/*+json'] });
    // An upload (audio to transcribe) is kept as the bytes the client sent, boundary and all.
    express.useBodyParser('raw', { limit: config.maxBodyBytes, type: MULTIPART });
    express.disable('x-powered-by');
    // req.ip, .hostname and .protocol believe X-Forwarded-* only with --trust-proxy (as the gateway's own reads do).
    express.set('trust proxy', config.trustProxy);
    express.set('etag', false);
    app = express;
  }
  app.useGlobalFilters(new GatewayExceptionFilter(app.get(HttpAdapterHost), config, unroutedApi(config)));
  return app;
}

/**
 * The graceful stop of a gateway made by `createGateway`: stop accepting, let requests and streams in flight finish
 * within `--shutdown-grace`, answer late arrivals with a retryable 503, then close the app (breakers, stores,
 * upstream connections). Resolves with what happened.
 */
export async function stopGateway(
  app: INestApplication,
  config: GatewayConfig,
): Promise<{ finished: boolean; cut: number }> {
  const outcome = await app.get(GatewayCore).lifecycle.drain(app.getHttpServer() as Server, config.shutdownGraceMs);
  await app.close();
  return outcome;
}
