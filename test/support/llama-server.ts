import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ownChild } from './children.js';

/**
 * A real llama.cpp server (`llama-server`) for tests, from the prebuilt tarball in
 * `../shared/tools/llama-server/` (binary, shared libraries and `tiny.gguf`).
 *
 * - `LLAMA_SERVER_DIR`: a directory holding `llama-server-linux-x64.tgz`, or an extracted
 *   `llama-dist/` (or that directory itself). Default: `<repo root>/../shared/tools/llama-server`.
 * - `LLAMA_SERVER_URL`: a server the user already runs; then nothing is started or stopped.
 *
 * The tarball is extracted once per tarball version (size + mtime) into a cache directory
 * under the OS temp directory; concurrent extractions each use a private directory and the
 * first atomic rename wins.
 */

export const TARBALL_NAME = 'llama-server-linux-x64.tgz';
const DIST_NAME = 'llama-dist';
const BINARY_NAME = 'llama-server';
const MODEL_NAME = 'tiny.gguf';
const STDERR_LIMIT = 64 * 1024;

export interface LlamaServerOptions {
  /** Extra command-line flags, appended last (a repeated flag overrides the defaults: the last one wins). */
  args?: string[];
  /** Context size (`-c`), default 512. */
  ctx?: number;
  /** `--embeddings --pooling mean`. */
  embeddings?: boolean;
  /** `--metrics` (GET /metrics answers 501 without it). */
  metrics?: boolean;
  /** true: `--slots`, false: `--no-slots`; unset: the server's default (enabled in this build). */
  slots?: boolean;
  /** `--api-key`; every route except /health and /v1/health then needs it. */
  apiKey?: string;
  /** Model file, default the tarball's `tiny.gguf`. */
  model?: string;
  /** Bound on the wait for GET /health to answer 200, default 20 s. */
  readyTimeoutMs?: number;
  /** Use LLAMA_SERVER_URL when it is set (default true); false always starts a server. */
  allowExternal?: boolean;
}

export interface LlamaServer {
  /** e.g. `http://127.0.0.1:18123`, no trailing slash (a restart may move it to another port). */
  readonly url: string;
  /** The server's process id; undefined for a server given by LLAMA_SERVER_URL. */
  readonly pid: number | undefined;
  /** True when the server came from LLAMA_SERVER_URL (then close() leaves it running and restart() throws). */
  readonly external: boolean;
  /** What the server wrote to stderr and stdout (the last 64 KB). */
  output(): string;
  /** Stops the server (SIGTERM, then SIGKILL after a bound). Safe to call twice. */
  close(): Promise<void>;
  /** Stops and starts the server again with the same options, `args` (when given) replacing `options.args`. */
  restart(args?: string[]): Promise<void>;
}

/** The monorepo root, found from this file (source or compiled). */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest)) {
      const name = (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name;
      if (name === 'nest-prompt-orchestrator-monorepo') return dir;
    }
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  throw new Error('cannot find the repository root (package.json of nest-prompt-orchestrator-monorepo)');
}

/** The directory that should hold the tarball (or an extracted llama-dist). */
export function llamaToolDir(): string {
  const fromEnv = process.env.LLAMA_SERVER_DIR;
  if (fromEnv !== undefined && fromEnv !== '') return resolve(fromEnv);
  return resolve(repoRoot(), '..', 'shared', 'tools', 'llama-server');
}

type Source = { kind: 'dist'; dir: string } | { kind: 'tarball'; file: string };

function findSource(toolDir: string): Source | undefined {
  if (existsSync(join(toolDir, BINARY_NAME))) return { kind: 'dist', dir: toolDir };
  if (existsSync(join(toolDir, DIST_NAME, BINARY_NAME))) return { kind: 'dist', dir: join(toolDir, DIST_NAME) };
  if (existsSync(join(toolDir, TARBALL_NAME))) return { kind: 'tarball', file: join(toolDir, TARBALL_NAME) };
  return undefined;
}

/**
 * Why a llama-server cannot be run here, or undefined when it can (or when LLAMA_SERVER_URL names one).
 * It never skips anything itself: the caller decides what an unavailable server means.
 */
export function llamaServerAvailable(): string | undefined {
  if (process.env.LLAMA_SERVER_URL) return undefined;
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    return `the prebuilt llama-server is linux-x64 only (this is ${process.platform}-${process.arch}); set LLAMA_SERVER_URL to a running server`;
  }
  try {
    const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
    if (!/\bavx2\b/.test(cpuinfo)) return 'the prebuilt llama-server needs a CPU with AVX2';
  } catch {
    // No /proc/cpuinfo: let the start itself report a problem.
  }
  let toolDir: string;
  try {
    toolDir = llamaToolDir();
  } catch (error) {
    return (error as Error).message;
  }
  if (!findSource(toolDir)) {
    return `no ${TARBALL_NAME} (or extracted ${DIST_NAME}/) in ${toolDir}; set LLAMA_SERVER_DIR or LLAMA_SERVER_URL`;
  }
  return undefined;
}

/** The extracted llama-dist directory (binary, libraries, tiny.gguf), extracting the tarball on first use. */
export function llamaDistDir(): string {
  const toolDir = llamaToolDir();
  const source = findSource(toolDir);
  if (!source) throw new Error(llamaServerAvailable() ?? `no llama-server found in ${toolDir}`);
  if (source.kind === 'dist') return source.dir;

  const stat = statSync(source.file);
  const cacheRoot = join(tmpdir(), 'nest-prompt-orchestrator-llama', `${stat.size}-${Math.floor(stat.mtimeMs)}`);
  const finalDir = join(cacheRoot, DIST_NAME);
  if (existsSync(join(finalDir, BINARY_NAME))) return finalDir;

  mkdirSync(cacheRoot, { recursive: true });
  const scratch = mkdtempSync(join(cacheRoot, '.extract-'));
  try {
    execFileSync('tar', ['xzf', source.file, '-C', scratch], { stdio: ['ignore', 'ignore', 'pipe'] });
    const extracted = join(scratch, DIST_NAME);
    if (!existsSync(join(extracted, BINARY_NAME))) {
      throw new Error(`${source.file} does not contain ${DIST_NAME}/${BINARY_NAME}`);
    }
    try {
      renameSync(extracted, finalDir);
    } catch (error) {
      // Another process renamed its copy first: use that one.
      if (!existsSync(join(finalDir, BINARY_NAME))) throw error;
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  return finalDir;
}

/** A port that was free a moment ago on 127.0.0.1 (LLAMA_SERVER_PORTS=lo-hi restricts the range). */
async function freePort(avoid: Set<number>): Promise<number> {
  const range = /^(\d+)-(\d+)$/.exec(process.env.LLAMA_SERVER_PORTS ?? '');
  if (!range) return listenOn(0);
  const lo = Number(range[1]);
  const hi = Number(range[2]);
  const size = hi - lo + 1;
  const start = Math.floor(Math.random() * size);
  for (let i = 0; i < size; i++) {
    const port = lo + ((start + i) % size);
    if (avoid.has(port)) continue;
    try {
      return await listenOn(port);
    } catch {
      // taken: try the next one
    }
  }
  throw new Error(`no free port in LLAMA_SERVER_PORTS=${lo}-${hi}`);
}

function listenOn(port: number): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const address = server.address();
      const bound = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolvePort(bound));
    });
  });
}

/**
 * llama-server reads LLAMA_ARG_* and LLAMA_API_KEY, and AIP_* (Vertex AI mode: AIP_HTTP_PORT even replaces --port),
 * from its environment: none of the caller's leak in.
 */
function childEnv(libDir: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith('LLAMA_') && !name.startsWith('AIP_')) env[name] = value;
  }
  env.LD_LIBRARY_PATH = env.LD_LIBRARY_PATH ? `${libDir}:${env.LD_LIBRARY_PATH}` : libDir;
  return env;
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

function waitForExit(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (exited(child)) return Promise.resolve(true);
  return new Promise((resolveExit) => {
    const timer = setTimeout(() => {
      child.off('exit', onExit);
      resolveExit(false);
    }, timeoutMs);
    const onExit = (): void => {
      clearTimeout(timer);
      resolveExit(true);
    };
    child.once('exit', onExit);
  });
}

/** SIGTERM, then SIGKILL if the process is still there after `graceMs`; always by the child's own pid. */
async function stopChild(child: ChildProcess, graceMs = 5_000): Promise<void> {
  if (child.pid !== undefined && !exited(child)) {
    child.kill('SIGTERM');
    if (!(await waitForExit(child, graceMs))) {
      child.kill('SIGKILL');
      await waitForExit(child, graceMs);
    }
  }
}

function serverArgs(options: LlamaServerOptions, model: string, port: number, extra: string[]): string[] {
  const args = [
    '-m',
    model,
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '-c',
    String(options.ctx ?? 512),
    '--jinja',
    '-t',
    '1',
  ];
  if (options.embeddings) args.push('--embeddings', '--pooling', 'mean');
  if (options.metrics) args.push('--metrics');
  if (options.slots === true) args.push('--slots');
  if (options.slots === false) args.push('--no-slots');
  if (options.apiKey !== undefined) args.push('--api-key', options.apiKey);
  return [...args, ...extra];
}

/** Polls GET /health until it answers 200; returns false at the deadline or when `stop()` says so. */
async function waitHealthy(url: string, deadline: number, stop: () => boolean): Promise<boolean> {
  while (Date.now() < deadline && !stop()) {
    try {
      const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1_000) });
      await response.arrayBuffer();
      if (response.status === 200) return true;
    } catch {
      // not listening yet
    }
    await new Promise((resolveSleep) => setTimeout(resolveSleep, 50));
  }
  return false;
}

interface Running {
  child: ChildProcess;
  port: number;
}

/**
 * Starts a llama-server on a free loopback port (or uses LLAMA_SERVER_URL) and waits for GET /health to be 200.
 * Fails with the server's own error output when it exits or does not get ready in time.
 */
export async function startLlamaServer(options: LlamaServerOptions = {}): Promise<LlamaServer> {
  const externalUrl = process.env.LLAMA_SERVER_URL;
  if (externalUrl && options.allowExternal !== false) {
    const url = externalUrl.replace(/\/+$/, '');
    const ready = await waitHealthy(url, Date.now() + (options.readyTimeoutMs ?? 120_000), () => false);
    if (!ready) throw new Error(`LLAMA_SERVER_URL=${url}: GET /health did not answer 200`);
    return {
      url,
      pid: undefined,
      external: true,
      output: () => '',
      close: async () => undefined,
      restart: async () => {
        throw new Error(`cannot restart the server at LLAMA_SERVER_URL=${url}: this process did not start it`);
      },
    };
  }

  const unavailable = llamaServerAvailable();
  if (unavailable) throw new Error(`llama-server unavailable: ${unavailable}`);
  const dist = llamaDistDir();
  const binary = join(dist, BINARY_NAME);
  const model = options.model ?? join(dist, MODEL_NAME);

  let output = '';
  const record = (chunk: Buffer): void => {
    output += chunk.toString('utf8');
    if (output.length > STDERR_LIMIT) output = output.slice(output.length - STDERR_LIMIT);
  };

  const launch = async (extra: string[], preferredPort: number | undefined): Promise<Running> => {
    const tried = new Set<number>();
    for (let attempt = 0; attempt < 3; attempt++) {
      const port = attempt === 0 && preferredPort !== undefined ? preferredPort : await freePort(tried);
      tried.add(port);
      output = '';
      const child = ownChild(
        spawn(binary, serverArgs(options, model, port, extra), {
          cwd: dist,
          env: childEnv(dist),
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
        'llama-server',
      );
      child.stdout?.on('data', record);
      child.stderr?.on('data', record);
      let spawnError: Error | undefined;
      child.once('error', (error) => (spawnError = error));

      const deadline = Date.now() + (options.readyTimeoutMs ?? 120_000);
      const ready = await waitHealthy(
        `http://127.0.0.1:${port}`,
        deadline,
        () => exited(child) || spawnError !== undefined,
      );
      if (ready && !exited(child)) return { child, port };

      await stopChild(child);
      const tail = output.trim().split('\n').slice(-15).join('\n');
      if (spawnError) throw new Error(`cannot run ${binary}: ${spawnError.message}`);
      if (/couldn't bind/i.test(output)) continue; // someone took the port between the probe and the bind
      const why =
        exited(child) && child.exitCode !== null ? `exited with code ${child.exitCode}` : 'was not ready in time';
      throw new Error(`llama-server ${why} (port ${port}):\n${tail}`);
    }
    throw new Error(
      `llama-server could not bind a port after 3 attempts:\n${output.trim().split('\n').slice(-5).join('\n')}`,
    );
  };

  let extra = options.args ?? [];
  let current: Running | undefined = await launch(extra, undefined);
  let closing: Promise<void> | undefined;

  const server: LlamaServer = {
    get url() {
      if (!current) throw new Error('llama-server is closed');
      return `http://127.0.0.1:${current.port}`;
    },
    get pid() {
      return current?.child.pid;
    },
    external: false,
    output: () => output,
    close: () =>
      (closing ??= (async () => {
        if (current) await stopChild(current.child);
      })()),
    restart: async (args?: string[]) => {
      if (closing) throw new Error('llama-server is closed');
      if (!current) throw new Error('llama-server is not running (an earlier restart failed)');
      const port = current.port;
      await stopChild(current.child);
      current = undefined;
      if (args !== undefined) extra = args;
      current = await launch(extra, port);
    },
  };
  return server;
}
