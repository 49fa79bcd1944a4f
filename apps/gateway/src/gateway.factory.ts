import type { INestApplication, LoggerService, LogLevel } from '@nestjs/common';
import { HttpAdapterHost, NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { RequestListener, Server } from 'node:http';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import type { GatewayConfig } from './config/gateway-config.js';
import { GatewayModule } from './gateway.module.js';
import { GatewayExceptionFilter } from './http/gateway-exception.filter.js';
import { GatewayExpressAdapter, createGatewayServer } from './http/http-server.js';
import { Lifecycle } from './http/lifecycle.js';
import { unroutedApi } from './http/request-context.middleware.js';
import { createLogger, nestLoggerOf } from './observability/logger.js';
import { redactor } from './http/redaction.js';

export interface CreateGatewayOptions {
  logger?: false | LogLevel[] | LoggerService;
}

const MULTIPART = 'multipart/form-data';

/** Builds the gateway app on the configured platform (not yet listening). */
export async function createGateway(config: GatewayConfig, options: CreateGatewayOptions = {}): Promise<INestApplication> {
  redactor.add([config.providerKey, ...config.gatewayKeys]);
  const log = createLogger(config.observability);
  const module = GatewayModule.forRoot(config, log);
  // Nest's own warnings and errors go through the same logger: one format on stdout.
  const logger = options.logger ?? nestLoggerOf(log);
  let app: INestApplication;
  if (config.platform === 'fastify') {
    const fastify = await NestFactory.create<NestFastifyApplication>(
      module,
      // Multipart bodies are relayed as bytes (below), never parsed here.
      new FastifyAdapter({
        bodyLimit: config.maxBodyBytes,
        multipart: false,
        serverFactory: (handler: RequestListener) => createGatewayServer(config, handler),
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
    const express = await NestFactory.create<NestExpressApplication>(module, new GatewayExpressAdapter(config), {
      bodyParser: false,
      rawBody: true,
      logger,
    });
    // Before the body parser, so that its refusals (invalid JSON, too large) carry the CORS headers too.
    if (config.corsOrigins) express.enableCors(corsOptions(config.corsOrigins));
    express.useBodyParser('json', { limit: config.maxBodyBytes, type: ['application/json', 'application/*+json'] });
    // An upload (audio to transcribe) is kept as the bytes the client sent, boundary and all.
    express.useBodyParser('raw', { limit: config.maxBodyBytes, type: MULTIPART });
    express.disable('x-powered-by');
    express.set('etag', false);
    app = express;
  }
  app.useGlobalFilters(new GatewayExceptionFilter(app.get(HttpAdapterHost), config, unroutedApi(config)));
  return app;
}

/**
 * The graceful stop `npm start` does on SIGTERM or SIGINT: stop accepting,
 * let requests and streams in flight finish within `--shutdown-grace`, answer
 * late arrivals with a retryable 503, then close the app (breakers, stores,
 * upstream connections). Resolves with what happened.
 */
export async function stopGateway(app: INestApplication, config: GatewayConfig): Promise<{ finished: boolean; cut: number }> {
  const outcome = await app.get(Lifecycle).drain(app.getHttpServer() as Server, config.shutdownGraceMs);
  await app.close();
  return outcome;
}

/** Response headers a browser app may read: how the gateway answered, when to retry, and the id to quote. */
export const EXPOSED_HEADERS = ['x-orchestrator-dedup', 'retry-after', 'x-request-id', 'x-should-retry', 'server-timing'];

/**
 * CORS for browser apps: preflights (any path) are answered by the platform
 * before routing, so before the gateway's key check, as llama-server answers
 * them before its own. The allowed origin is echoed (with `Vary: Origin`);
 * requested headers are allowed as asked (a bare `*` would not cover
 * `Authorization`); no cookies are involved, so no credentials mode.
 */
export function corsOptions(origins: string[] | '*') {
  return {
    origin: origins === '*' ? true : origins,
    methods: ['GET', 'HEAD', 'POST', 'DELETE', 'OPTIONS'],
    exposedHeaders: EXPOSED_HEADERS,
    maxAge: 600,
    optionsSuccessStatus: 204,
  };
}
