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

export interface CreateGatewayOptions {
  logger?: false | LogLevel[] | LoggerService;
}

/** Builds the gateway app on the configured platform (not yet listening). */
export async function createGateway(config: GatewayConfig, options: CreateGatewayOptions = {}): Promise<INestApplication> {
  const module = GatewayModule.forRoot(config);
  const logger = options.logger ?? ['error', 'warn'];
  let app: INestApplication;
  if (config.platform === 'fastify') {
    const fastify = await NestFactory.create<NestFastifyApplication>(
      module,
      new FastifyAdapter({ bodyLimit: config.maxBodyBytes, serverFactory: (handler: RequestListener) => createGatewayServer(config, handler) }),
      // The body's bytes are kept and relayed unchanged where nothing is translated.
      { logger, rawBody: true },
    );
    app = fastify;
  } else {
    const express = await NestFactory.create<NestExpressApplication>(module, new GatewayExpressAdapter(config), {
      bodyParser: false,
      rawBody: true,
      logger,
    });
    express.useBodyParser('json', { limit: config.maxBodyBytes, type: ['application/json', 'application/*+json'] });
    express.disable('x-powered-by');
    express.set('etag', false);
    app = express;
  }
  app.useGlobalFilters(new GatewayExceptionFilter(app.get(HttpAdapterHost), config));
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
