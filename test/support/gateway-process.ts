import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { GATEWAY_NODE_FLAGS } from '../../apps/gateway/src/runtime-flags.js';
import { readFileSync } from 'node:fs';
import { ownChild } from './children.js';
import { join } from 'node:path';

/**
 * The gateway as its users run it: the built bundle (`node dist/gateway/main.js`, as `npm start`) in a process of its
 * own, for what only a real process shows (exit codes, signals, its own memory).
 */

export const ROOT = process.cwd();
export const GATEWAY_MAIN = join(ROOT, 'dist/gateway/main.js');

/**
 * Checks that the build is there and not older than a source (scripts/build-if-stale.mjs --check). Jest's global
 * setup built it before any suite; a suite never builds inside its own time, and never runs an old build either.
 */
export async function ensureBuilt(): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    execFile(
      process.execPath,
      [join(ROOT, 'scripts/build-if-stale.mjs'), '--check'],
      { cwd: ROOT },
      (error, stdout, stderr) => (error ? reject(new Error(`${stdout}${stderr}`)) : resolve()),
    );
  });
}

export const MOCK_MAIN = join(ROOT, 'dist/apps/mock-provider/src/main.js');

export interface AppProcess {
  child: ChildProcess;
  url: string;
  pid: number;
  output(): string;
  /** Resolves with the exit code (or null after a signal). */
  exited: Promise<number | null>;
  /** SIGKILL if still running; safe to call twice. */
  kill(): void;
  /** kill(), then its exit: what a suite's cleanup awaits, so that nothing it started outlives it. */
  stop(): Promise<void>;
}

/** The gateway as a process. */
export type GatewayProcess = AppProcess;

/** How long an app may take to say it listens: generous, since several Nest apps booting on a saturated two-core machine take many seconds. */
const START_TIMEOUT_MS = 120_000;

/** Starts a built app and waits (bounded) for its "listening on http://..." line. */
async function startApp(
  main: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  startTimeoutMs = START_TIMEOUT_MS,
  nodeArgs: readonly string[] = [],
): Promise<AppProcess> {
  const child = ownChild(
    spawn(process.execPath, [...nodeArgs, main, ...args], {
      cwd: ROOT,
      env: { PATH: process.env.PATH, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
    main,
  );
  let output = '';
  child.stdout.on('data', (b: Buffer) => (output += b.toString()));
  child.stderr.on('data', (b: Buffer) => (output += b.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const kill = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  const deadline = Date.now() + startTimeoutMs;
  let url: string | undefined;
  while (!url) {
    if (Date.now() > deadline || child.exitCode !== null) {
      kill();
      throw new Error(`${main} did not start:\n${output}`);
    }
    url = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output)?.[1];
    if (!url) await new Promise((resolve) => setTimeout(resolve, 20)); // polling interval
  }
  const stop = async () => {
    kill();
    await exited;
  };
  return { child, url, pid: child.pid!, output: () => output, exited, kill, stop };
}

/** Starts the built gateway with `args` (`--port 0` is added), and `nodeArgs` beside the flags it always runs with. */
export function startGatewayProcess(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  startTimeoutMs?: number,
  nodeArgs: readonly string[] = [],
): Promise<AppProcess> {
  return startApp(GATEWAY_MAIN, ['--port', '0', ...args], env, startTimeoutMs, [...GATEWAY_NODE_FLAGS, ...nodeArgs]);
}

/** Starts the built simulated provider with `args` (`--port 0` is added). */
export function startMockProcess(args: string[] = []): Promise<AppProcess> {
  return startApp(MOCK_MAIN, ['--port', '0', ...args], {});
}

/** Resident set size of a process, in bytes (Linux: /proc). */
export function rssOf(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  if (!kb) throw new Error(`no VmRSS for process ${pid}`);
  return Number(kb) * 1024;
}

/** Until every replica says it coordinates through Redis (`/health`'s `coordination`), within `timeoutMs` each. */
export async function untilCoordinated(
  replicas: ReadonlyArray<{ url: string; output?: () => string }>,
  options: { timeoutMs?: number; headers?: Record<string, string> } = {},
): Promise<void> {
  for (const replica of replicas) {
    for (const deadline = Date.now() + (options.timeoutMs ?? 60_000); ;) {
      const health = (await (await fetch(`${replica.url}/health`, { headers: options.headers })).json()) as {
        coordination: { state: string } | null;
      };
      if (health.coordination?.state === 'ok') break;
      if (Date.now() > deadline)
        throw new Error(
          `${replica.url} never coordinated through Redis${replica.output ? `:\n${replica.output().slice(-2_000)}` : ''}`,
        );
      await new Promise((resolve) => setTimeout(resolve, 50)); // polling interval
    }
  }
}
