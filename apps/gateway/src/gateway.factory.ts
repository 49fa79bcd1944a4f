import type { INestApplication, LoggerService, LogLevel } from '@nestjs/common';
import { HttpAdapterHost, NestFactory } from '@nestjs/core';
import { ExpressAdapter, type NestExpressApplication } from '@nestjs/platform-express';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import type { GatewayConfig } from './config/gateway-config.js';
import { GatewayModule } from './gateway.module.js';
import { GatewayExceptionFilter } from './http/gateway-exception.filter.js';
import { unroutedApi } from './http/request-context.middleware.js';

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
      new FastifyAdapter({ bodyLimit: config.maxBodyBytes }),
      // The body's bytes are kept and relayed unchanged where nothing is translated.
      { logger, rawBody: true },
    );
    app = fastify;
  } else {
    const express = await NestFactory.create<NestExpressApplication>(module, new ExpressAdapter(), {
      bodyParser: false,
      rawBody: true,
      logger,
    });
    express.useBodyParser('json', { limit: config.maxBodyBytes, type: ['application/json', 'application/*+json'] });
    express.disable('x-powered-by');
    express.set('etag', false);
    app = express;
  }
  app.useGlobalFilters(new GatewayExceptionFilter(app.get(HttpAdapterHost), unroutedApi(config)));
  app.enableShutdownHooks();
  return app;
}
