import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { createServer, connect } from 'node:net';

/**
 * A Redis server a test owns: its own process on its own loopback port (never
 * the machine's shared 6379), so the test can kill, freeze and restart it.
 */
export interface OwnedRedis {
  /** `redis://127.0.0.1:PORT` (with the password when one is required). */
  url: string;
  port: number;
  /** SIGKILL: the server is gone, connections drop. */
  kill(): Promise<void>;
  /** SIGSTOP: the server keeps its connections open but answers nothing. */
  freeze(): void;
  /** SIGCONT after freeze(). */
  thaw(): void;
  /** Starts it again on the same port (after kill()). */
  restart(): Promise<void>;
  /** Stops it for good; safe to call twice. */
  close(): Promise<void>;
}

export interface OwnedRedisOptions {
  /** Makes the server refuse clients that do not authenticate with it. */
  requirePassword?: string;
  /** More `redis-server` arguments (e.g. `--maxmemory 4mb --maxmemory-policy allkeys-lru`). */
  args?: readonly string[];
}

/** Why `redis-server` cannot be started here, if it cannot (tests fail with this reason rather than hang). */
export function redisServerMissing(): string | undefined {
  const executable = (path: string) => {
    try {
      accessSync(path, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  };
  const found = (process.env.PATH ?? '').split(':').some((dir) => dir && executable(`${dir}/redis-server`));
  return found
    ? undefined
    : 'redis-server is not on PATH: on Debian, as root, apt-get install -y redis-server (npm test does it first: scripts/test-prerequisites.mjs)';
}

export async function startOwnedRedis(options: OwnedRedisOptions = {}): Promise<OwnedRedis> {
  const missing = redisServerMissing();
  if (missing) throw new Error(missing);
  let port = 0;
  let child: ChildProcess | undefined;
  let output = '';
  const start = async () => {
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no'];
    if (options.requirePassword) args.push('--requirepass', options.requirePassword);
    args.push(...(options.args ?? []));
    output = '';
    const started = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    child = started;
    let failed = false;
    started.on('error', (error) => {
      failed = true;
      output = `${output}${error.message}\n`.slice(-4_000);
    });
    started.stdout?.on('data', (b: Buffer) => (output = (output + b.toString()).slice(-4_000)));
    started.stderr?.on('data', (b: Buffer) => (output = (output + b.toString()).slice(-4_000)));
    const closed = new Promise((resolve) => started.once('close', resolve));
    const gone = () => failed || started.exitCode !== null || started.signalCode !== null;
    await waitForPort(port, 10_000, gone).catch(async (error: Error) => {
      if (!gone()) started.kill('SIGKILL');
      // Its last words (e.g. "Address already in use") are read before they are reported.
      await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 1_000))]);
      throw new Error(`redis-server did not start on port ${port}: ${error.message}\n${output}`);
    });
  };
  const stop = async (signal: NodeJS.Signals) => {
    const running = child;
    if (!running || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => running.once('exit', () => resolve()));
    running.kill('SIGCONT'); // a frozen server cannot die of SIGTERM
    running.kill(signal);
    await exited;
  };
  // The port is free when picked, yet another process may take it before redis-server binds it: then another one.
  for (let attempt = 1; ; attempt++) {
    port = await freePort();
    try {
      await start();
      break;
    } catch (error) {
      if (attempt === 3 || !/Address already in use/i.test((error as Error).message)) throw error;
    }
  }
  const auth = options.requirePassword ? `:${encodeURIComponent(options.requirePassword)}@` : '';
  return {
    url: `redis://${auth}127.0.0.1:${port}`,
    port,
    kill: () => stop('SIGKILL'),
    freeze: () => child?.kill('SIGSTOP'),
    thaw: () => child?.kill('SIGCONT'),
    restart: async () => {
      await stop('SIGKILL');
      await start();
    },
    close: () => stop('SIGKILL'),
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** Polls until a connection to the port succeeds (no fixed sleep); gives up at once if the server is `gone`. */
async function waitForPort(port: number, timeoutMs: number, gone: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (gone()) throw new Error('redis-server exited before it listened');
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    if (Date.now() > deadline) throw new Error(`nothing listens after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
