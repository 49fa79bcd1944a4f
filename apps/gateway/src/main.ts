import cluster from 'node:cluster';
import { randomBytes } from 'node:crypto';
import { ConfigError, helpText, parseGatewayConfig, type GatewayConfig } from './config/gateway-config.js';
import { GatewayCore } from './gateway-core.js';
import { LazyControlPlane } from './control-plane.js';
import { createGatewayServer, serveAhead } from './http/http-server.js';
import { PrimaryHub } from './cluster/primary-hub.js';
import { WORKER_SESSION_SECRET_ENV } from './status/session-secret.js';

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

/**
 * Connections the kernel queues for the gateway to accept (Node's default is 511). A herd of fresh clients connects
 * all at once: past a full queue a connection's SYN is dropped and retried a second or more later, or never opened.
 * The kernel takes the smaller of this and `net.core.somaxconn`.
 */
const LISTEN_BACKLOG = 65_535;

/** One gateway process: listens, and stops gracefully on SIGTERM (and SIGINT, unless it is a worker of `--workers`). */
async function serve(config: GatewayConfig): Promise<void> {
  if (cluster.isWorker) {
    // A worker leaves signals to its primary, which passes on what concerns the workers: Ctrl-C in a terminal
    // reaches every process of the group, and a second one must not cut what the first is draining. SIGHUP (a
    // terminal hanging up, or a file to reload) would otherwise end the worker, even while it starts; the keys file
    // and the upstreams file, when there are any, listen for it themselves.
    process.on('SIGINT', () => undefined);
    process.on('SIGHUP', () => undefined);
  }
  const core = await GatewayCore.create(config);
  // The proxied routes are served by the core's data plane; the control routes' Nest app is made when first needed.
  const control = new LazyControlPlane(core);
  const server = createGatewayServer(config, control.handle, { answerClientErrors: true });
  serveAhead(server, core.plane.handle);
  core.server = server;
  // A worker of --workers answers its siblings' questions for /health from its control routes: they exist before it
  // takes connections.
  if (config.workers > 1) await control.ready();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port: config.port, host: config.host, backlog: LISTEN_BACKLOG }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    console.log(
      `gateway: ${signal}: no new connections; draining requests in flight (at most ${config.shutdownGraceMs / 1000} s)`,
    );
    stopServing(core, control).then(
      ({ finished, cut }) => {
        console.log(
          finished ? 'gateway: drained; stopped' : `gateway: grace period over, ${cut} request(s) cut; stopped`,
        );
        process.exit(0);
      },
      (error: unknown) => {
        console.error(`gateway: failed to stop cleanly: ${(error as Error)?.message ?? error}`);
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', stop);
  if (cluster.isPrimary) process.once('SIGINT', stop);
  // Said once the signals are handled: whoever reads the line may stop the gateway at once (a SIGTERM between the
  // line and the handler ended the process as the signal's default does, not with a drain).
  // A worker of --workers: the supervisor says where the port listens.
  if (cluster.isPrimary) console.log(listeningLine(config, boundPort(server.address(), config.port)));
}

/**
 * `--workers N`: N gateway processes on one port (node:cluster hands each
 * connection to one of them), made one gateway by this primary (`PrimaryHub`):
 * one upstream call per key and one breaker across the workers (through
 * Redis instead with `--redis`), and /metrics, /health and the status page
 * describing them all. A worker that dies is replaced. No signal to this
 * process cuts a request in flight: SIGTERM and SIGINT drain every worker
 * (again: they are already draining), and the primary exits once all have
 * stopped; SIGHUP is passed on only when there is a keys file or an upstreams file to reload.
 */
function supervise(config: GatewayConfig): void {
  new PrimaryHub().listen();
  // One session secret for every worker (a session signed by one is accepted by the next), replaced workers too.
  const workerEnv = { [WORKER_SESSION_SECRET_ENV]: randomBytes(32).toString('hex') };
  let stopping = false;
  const alive = new Set<number>();
  const listening = new Set<number>();
  let announced = false;
  cluster.on('fork', (worker) => alive.add(worker.id));
  cluster.on('listening', (worker, address) => {
    if (listening.has(worker.id) || listening.size >= config.workers) return;
    listening.add(worker.id);
    // The port serves from its first worker on (on a saturated machine the others may take many seconds more);
    // /health lists the workers that serve.
    if (!announced) {
      announced = true;
      console.log(`${listeningLine(config, address.port)} with ${config.workers} workers`);
    }
    if (listening.size === config.workers) console.log(`gateway: all ${config.workers} workers serve`);
  });
  cluster.on('exit', (worker, code, signal) => {
    alive.delete(worker.id);
    if (stopping) {
      if (alive.size > 0) return;
      console.log('gateway: every worker has stopped; stopped');
      process.exit(0);
    }
    console.error(`gateway: worker ${worker.process.pid} exited (${signal ?? code}); starting another`);
    cluster.fork(workerEnv);
  });
  for (let i = 0; i < config.workers; i++) cluster.fork(workerEnv);
  // Handled for as long as the primary lives: a signal it did not handle would end it, and its workers with it.
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) {
      console.log(`gateway: ${signal}: already draining; ${alive.size} worker(s) finishing their requests in flight`);
      return;
    }
    stopping = true;
    console.log(`gateway: ${signal}: draining ${alive.size} worker(s) (at most ${config.shutdownGraceMs / 1000} s)`);
    for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill('SIGTERM');
    if (alive.size === 0) process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.on('SIGHUP', () => {
    const files = [config.budgets.keysFile, config.upstreamsFile?.path].filter((file) => file !== undefined);
    if (stopping || files.length === 0) {
      console.log(
        `gateway: SIGHUP: ${stopping ? 'draining' : 'no --keys-file or --upstreams-file to reload'}; nothing to do`,
      );
      return;
    }
    // Each worker holds its own copy of the keys and of the upstreams.
    console.log(`gateway: SIGHUP: ${alive.size} worker(s) reload ${files.join(' and ')}`);
    for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill('SIGHUP');
  });
}

/**
 * The graceful stop `npm start` does on SIGTERM or SIGINT: stop accepting, let requests and streams in flight finish
 * within `--shutdown-grace`, answer late arrivals with a retryable 503, then close the control routes and the core
 * (breakers, stores, upstream connections). Resolves with what happened.
 */
async function stopServing(core: GatewayCore, control: LazyControlPlane): Promise<{ finished: boolean; cut: number }> {
  const outcome = await core.lifecycle.drain(core.server!, core.config.shutdownGraceMs);
  core.quiesce();
  await control.close();
  await core.close();
  return outcome;
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
