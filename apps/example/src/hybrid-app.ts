import type { INestApplication, LogLevel } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Transport, type MicroserviceOptions } from '@nestjs/microservices';
import { ExampleModule } from './example.module.js';

export interface HybridAppOptions {
  host: string;
  /** HTTP (routes and GraphQL); 0 for any free port. */
  port: number;
  /** The TCP transport for other services (message pattern `rates`). */
  rpcPort: number;
  logger?: LogLevel[] | false;
}

/**
 * The example as one hybrid app: HTTP routes and GraphQL on `port`, the TCP microservice on `rpcPort`, all under one
 * orchestrator. `inheritAppConfig` matters: without it Nest gives a connected microservice none of the app's global
 * interceptors (`APP_INTERCEPTOR` ones included), and its decorated handlers would refuse every message with an
 * `ORCHESTRATOR_NOT_APPLIED` error.
 */
export async function startHybridApp(options: HybridAppOptions): Promise<INestApplication> {
  const app = await NestFactory.create(ExampleModule, { logger: options.logger ?? ['error', 'warn'] });
  app.connectMicroservice<MicroserviceOptions>(
    { transport: Transport.TCP, options: { host: options.host, port: options.rpcPort } },
    { inheritAppConfig: true },
  );
  await app.startAllMicroservices();
  await app.listen(options.port, options.host);
  return app;
}
