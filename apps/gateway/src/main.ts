import 'reflect-metadata';
import { ConfigError, helpText, parseGatewayConfig } from './config/gateway-config.js';
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
  const app = await createGateway(config);
  await app.listen(config.port, config.host);
  // The bound port, not the requested one: --port 0 picks a free port.
  const address = app.getHttpServer().address() as { port?: number } | string | null;
  const port = typeof address === 'object' && address?.port !== undefined ? address.port : config.port;
  const upstream = new URL(config.upstream);
  console.log(
    `gateway listening on http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port} (provider ${config.provider}, upstream ${upstream.origin}${upstream.pathname === '/' ? '' : upstream.pathname})`,
  );

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

main().catch((error: unknown) => {
  console.error(`gateway: failed to start: ${(error as Error)?.message ?? error}`);
  process.exit(1);
});
