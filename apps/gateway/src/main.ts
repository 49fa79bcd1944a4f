import 'reflect-metadata';
import cluster from 'node:cluster';
import { ConfigError, helpText, parseGatewayConfig, type GatewayConfig } from './config/gateway-config.js';
import { createGateway, stopGateway } from './gateway.factory.js';

async function main(): Promise<void> {
  let config;
  try {
    config = parseGatewayConfig(process.argv.slice(2), process.env);
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`gateway: ${error.message}`);
      process.exit(2);
    }
    throw error;
  }
  if (!config) {
    console.log(helpText());
    return;
  }
  if (config.workers > 1 && cluster.isPrimary) return supervise(config);
  await serve(config);
}

/** One gateway process: listens, and stops gracefully on SIGTERM/SIGINT. */
async function serve(config: GatewayConfig): Promise<void> {
  const app = await createGateway(config);
  await app.listen(config.port, config.host);
  // A worker of --workers: the supervisor says where the fleet listens.
  if (cluster.isPrimary) console.log(listeningLine(config, boundPort(app.getHttpServer().address(), config.port)));

  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    console.log(`gateway: ${signal}: no new connections; draining requests in flight (at most ${config.shutdownGraceMs / 1000} s)`);
    stopGateway(app, config).then(
      ({ finished, cut }) => {
        console.log(finished ? 'gateway: drained; stopped' : `gateway: grace period over, ${cut} request(s) cut; stopped`);
        process.exit(0);
      },
      (error: unknown) => {
        console.error(`gateway: failed to stop cleanly: ${(error as Error)?.message ?? error}`);
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

/**
 * `--workers N`: N gateway processes on one port (node:cluster hands each
 * connection to one of them). They share answers, calls and breaker state
 * only through `--redis`. A worker that dies is replaced; SIGTERM drains them all.
 */
function supervise(config: GatewayConfig): void {
  if (!config.redisUrl) {
    console.warn(`gateway: --workers ${config.workers} without --redis: each worker dedups and breaks on its own`);
  }
  let stopping = false;
  let announced = false;
  cluster.on('listening', (_worker, address) => {
    if (announced) return;
    announced = true;
    console.log(`${listeningLine(config, address.port)} with ${config.workers} workers`);
  });
  cluster.on('exit', (worker, code, signal) => {
    if (stopping) {
      if (Object.keys(cluster.workers ?? {}).length === 0) process.exit(0);
      return;
    }
    console.error(`gateway: worker ${worker.process.pid} exited (${signal ?? code}); starting another`);
    cluster.fork();
  });
  for (let i = 0; i < config.workers; i++) cluster.fork();
  const stop = () => {
    if (stopping) return;
    stopping = true;
    for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill('SIGTERM');
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  // SIGHUP re-reads the keys file: each worker holds its own copy of the keys.
  process.on('SIGHUP', () => {
    for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill('SIGHUP');
  });
}

function boundPort(address: unknown, fallback: number): number {
  // The bound port, not the requested one: --port 0 picks a free port.
  const port = (address as { port?: number } | null)?.port;
  return typeof port === 'number' ? port : fallback;
}

function listeningLine(config: GatewayConfig, port: number): string {
  const upstream = new URL(config.upstream);
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  return `gateway listening on http://${host}:${port} (provider ${config.provider}, upstream ${upstream.origin}${upstream.pathname === '/' ? '' : upstream.pathname})`;
}

main().catch((error: unknown) => {
  console.error(`gateway: failed to start: ${(error as Error)?.message ?? error}`);
  process.exit(1);
});
