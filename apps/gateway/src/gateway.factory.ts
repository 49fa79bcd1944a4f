import type { INestApplication, LoggerService, LogLevel } from '@nestjs/common';
import { HttpAdapterHost, NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { RequestListener, Server } from 'node:http';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import type { GatewayConfig } from './config/gateway-config.js';
import { GatewayModule } from './gateway.module.js';
import { GatewayExceptionFilter } from './http/gateway-exception.filter.js';
import { createGatewayServer, gatewayExpressAdapter, serveAhead } from './http/http-server.js';
import { corsOptions } from './http/cors.js';
import { DataPlane } from './data-plane/data-plane.js';
import { GatewayService } from './gateway.service.js';
import { Budgets } from './budgets/budgets.service.js';
import { UsageLedger } from './observability/usage-ledger.js';
import { GatewayTelemetry } from './observability/gateway-telemetry.js';
import { OrchestratorService } from 'nest-prompt-orchestrator';
import { Lifecycle } from './common/lifecycle.js';
import { unroutedApi } from './http/request-context.middleware.js';
import { createLogger, nestLoggerOf } from './observability/logger.js';
import { redactor } from './common/redaction.js';
import { upstreamKeys } from './upstreams/upstream-set.js';
import { UpstreamRotation } from './upstream-rotation.js';

export interface CreateGatewayOptions {
  logger?: false | LogLevel[] | LoggerService;
}

const MULTIPART = 'multipart/form-data';

/** Builds the gateway app on the configured platform (not yet listening). */
export async function createGateway(
  config: GatewayConfig,
  options: CreateGatewayOptions = {},
): Promise<INestApplication> {
  redactor.add(config.gatewayKeys);
  // Provider keys are also looked for in a stream's ordinary events (a provider quoting one outside an error).
  redactor.watch([config.providerKey, ...upstreamKeys(config)]);
  const log = createLogger(config.observability);
  const module = GatewayModule.forRoot(config, log);
  // Nest's own warnings and errors go through the same logger: one format on stdout.
  const logger = options.logger ?? nestLoggerOf(log);
  if (config.allowedHosts === '*') {
    log.warn(
      { context: 'Gateway' },
      '--allowed-hosts * answers any Host: a DNS-rebinding web page can reach this gateway and spend its provider key (docs/security.md)',
    );
  }
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
    const express = await NestFactory.create<NestExpressApplication>(module, await gatewayExpressAdapter(config), {
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
    // req.ip, .hostname and .protocol believe X-Forwarded-* only with --trust-proxy (as the gateway's own reads do).
    express.set('trust proxy', config.trustProxy);
    express.set('etag', false);
    app = express;
  }
  app.useGlobalFilters(new GatewayExceptionFilter(app.get(HttpAdapterHost), config, unroutedApi(config)));
  // The proxied routes run on the data plane, ahead of the platform's router; Nest serves the control routes.
  const plane = new DataPlane({
    config,
    gateway: app.get(GatewayService),
    budgets: app.get(Budgets),
    usage: app.get(UsageLedger),
    telemetry: app.get(GatewayTelemetry),
    lifecycle: app.get(Lifecycle),
    orchestrator: app.get(OrchestratorService),
    warn: (line) => log.warn({ context: 'Gateway' }, line),
  });
  // A reloaded upstreams file brings other fallback chains (and groups) to the attempts.
  app.get(UpstreamRotation).live?.onChange((file) => plane.attempts.update(file));
  serveAhead(app.getHttpServer() as Server, plane.handle);
  return app;
}

/**
 * The graceful stop `npm start` does on SIGTERM or SIGINT: stop accepting,
 * let requests and streams in flight finish within `--shutdown-grace`, answer
 * late arrivals with a retryable 503, then close the app (breakers, stores,
 * upstream connections). Resolves with what happened.
 */
export async function stopGateway(
  app: INestApplication,
  config: GatewayConfig,
): Promise<{ finished: boolean; cut: number }> {
  const outcome = await app.get(Lifecycle).drain(app.getHttpServer() as Server, config.shutdownGraceMs);
  await app.close();
  return outcome;
}
