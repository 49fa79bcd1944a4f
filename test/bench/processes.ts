import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GATEWAY_NODE_FLAGS } from '../../apps/gateway/src/runtime-flags.js';

/** The monorepo root, found from this file whether it runs from source (test/bench) or from dist/test/bench. */
export function repoRoot(): string {
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

/** Compiled entry points the harness starts as child processes. */
export const ENTRY = {
  mockProvider: 'dist/apps/mock-provider/src/main.js',
  gateway: 'dist/gateway/main.js',
  minimalProxy: 'dist/test/bench/minimal-proxy.js',
  fixedAnswerServer: 'dist/test/bench/fixed-answer-server.js',
  windowMemory: 'dist/test/bench/window-memory.js',
  loopDelay: 'dist/test/bench/loop-delay.js',
  healthProbe: 'dist/test/bench/health-probe.js',
  example: 'dist/apps/example/src/main.js',
} as const;

export function requireBuild(): void {
  const root = repoRoot();
  const missing = Object.values(ENTRY).filter((entry) => !existsSync(join(root, entry)));
  if (missing.length > 0) throw new Error(`not built: ${missing.join(', ')} (run npm run build)`);
}

/** A port that was free a moment ago on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** Settings that would change what the children do if they leaked in from the caller's environment. */
const ENV_PREFIXES = ['ORCHESTRATOR_', 'MOCK_', 'OPENAI_', 'ANTHROPIC_', 'LLAMA_'];

function childEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!ENV_PREFIXES.some((prefix) => name.startsWith(prefix))) env[name] = value;
  }
  return env;
}

const live = new Set<ChildProcess>();
let handlersInstalled = false;

function installExitHandlers(): void {
  if (handlersInstalled) return;
  handlersInstalled = true;
  // Last resort: whatever is still running when this process exits is killed by its own pid.
  process.on('exit', () => {
    for (const child of live) {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });
}

/** Stops every child this process started and has not stopped yet. */
export async function stopAllChildren(): Promise<void> {
  await Promise.all([...live].map((child) => stopChild(child)));
}

/** Ctrl-C and SIGTERM stop the children before the harness exits. */
export function stopChildrenOnSignals(): void {
  installExitHandlers();
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) process.exit(130);
    stopping = true;
    process.stderr.write(`\n${signal}: stopping child processes\n`);
    void stopAllChildren().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
}

async function stopChild(child: ChildProcess, graceMs = 5_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) {
    live.delete(child);
    return;
  }
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }, graceMs);
  await exited;
  clearTimeout(timer);
  live.delete(child);
}

export interface ChildHandle {
  readonly name: string;
  readonly pid: number;
  /** Base URL the child announced, e.g. http://127.0.0.1:41234 */
  readonly url: string;
  /** The last lines the child wrote (stdout and stderr), for error messages. */
  output(): string;
  /** The last line that started with `prefix`, however much the child wrote after it (for periodic reports). */
  lastLine(prefix: string): string | undefined;
  /** CPU time (user + system) the child has used so far, in ms. */
  cpuMs(): number;
  stop(): Promise<void>;
}

const KEEP_LINES = 60;
const REPORT_WORD = 24;
const MAX_REPORTS = 64;

/**
 * What a child wrote, kept for error messages (its last lines) and periodic reports (the last line that starts with
 * each short word and a space), at little cost to this process. The load generator runs here, and a gateway writes
 * a JSON line per request: cutting each of them into a string of its own loaded this process on the gateway's
 * stretches only (the floor logs nothing), an unfairness in the load, not in what is measured. A line is looked at
 * only as far as a report's word can reach, and only a chunk's last lines
 * are cut out of it.
 */
export class ChildOutput {
  private readonly lines: string[] = [];
  private readonly reports = new Map<string, string>();

  add(text: string): void {
    for (let start = 0; start < text.length;) {
      let end = text.indexOf('\n', start);
      if (end < 0) end = text.length;
      // A report: a word of under 24 characters and a space, at the start of the line.
      const limit = Math.min(end, start + REPORT_WORD);
      let space = start;
      while (space < limit && text.charCodeAt(space) !== 0x20) space++;
      if (space > start && space < limit) {
        const key = text.slice(start, space + 1);
        if (this.reports.size < MAX_REPORTS || this.reports.has(key)) this.reports.set(key, text.slice(start, end));
      }
      start = end + 1;
    }
    let from = text.length;
    for (let n = 0; n <= KEEP_LINES && from > 0; n++) from = text.lastIndexOf('\n', from - 1);
    for (const line of text.slice(from + 1).split('\n')) {
      if (!line) continue;
      this.lines.push(line);
      if (this.lines.length > KEEP_LINES) this.lines.shift();
    }
  }

  output(): string {
    return this.lines.join('\n');
  }

  lastLine(prefix: string): string | undefined {
    return this.reports.get(prefix);
  }
}

/** `node [nodeArgs] <script> <args>` from the repository root, tracked so that it is stopped on exit. */
function spawnNode(script: string, args: string[], nodeArgs: string[] = [], env: NodeJS.ProcessEnv = {}): ChildProcess {
  installExitHandlers();
  const root = repoRoot();
  const child = spawn(process.execPath, [...nodeArgs, resolve(root, script), ...args], {
    cwd: root,
    env: { ...childEnv(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  return child;
}

/**
 * Starts `node <script> <args>` from the repository root and resolves once a stdout line matches `ready`
 * (its first capture group is the URL). Rejects, and kills the child, if it exits or takes longer than `timeoutMs`.
 */
export function startNodeChild(
  name: string,
  script: string,
  args: string[],
  ready: RegExp,
  options: { timeoutMs?: number; nodeArgs?: string[]; env?: NodeJS.ProcessEnv } = {},
): Promise<ChildHandle> {
  const child = spawnNode(script, args, options.nodeArgs, options.env);
  const kept = new ChildOutput();

  return new Promise<ChildHandle>((resolve, reject) => {
    let settled = false;
    let stdoutBuffer = '';
    const fail = (message: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      void stopChild(child).finally(() => reject(new Error(`${name}: ${message}\n${kept.output()}`)));
    };
    const timer = setTimeout(
      () => fail(`not ready within ${options.timeoutMs ?? 20_000} ms`),
      options.timeoutMs ?? 20_000,
    );
    child.stderr?.setEncoding('utf8').on('data', (text: string) => kept.add(text));
    child.stdout?.setEncoding('utf8').on('data', (text: string) => {
      kept.add(text);
      if (settled) return;
      stdoutBuffer += text;
      const match = ready.exec(stdoutBuffer);
      if (!match) {
        if (stdoutBuffer.length > 65_536) stdoutBuffer = stdoutBuffer.slice(-4096);
        return;
      }
      settled = true;
      clearTimeout(timer);
      const pid = child.pid ?? 0;
      resolve({
        name,
        pid,
        url: match[1] ?? '',
        output: () => kept.output(),
        lastLine: (prefix) => kept.lastLine(prefix),
        cpuMs: () => processCpuMs(pid),
        stop: () => stopChild(child),
      });
    });
    child.once('error', (error) => fail(`could not start: ${error.message}`));
    child.once('exit', (code, signal) => {
      live.delete(child);
      fail(`exited before it was ready (code ${code}, signal ${signal})`);
    });
  });
}

let clockTicks: number | undefined;

function ticksPerSecond(): number {
  if (clockTicks === undefined) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

const hasSchedstat = existsSync('/proc/self/schedstat');

/**
 * CPU time of a process in ms (Linux): the time each of its threads spent on a core, in nanoseconds, from
 * /proc/<pid>/task/<tid>/schedstat. /proc/<pid>/stat counts in clock ticks (10 ms): a herd of 1,000 answers costs a
 * few of them, so one tick more or less moved its ratio by a sixth to a quarter. A thread that has exited is no
 * longer counted (Node's and nginx's threads live as long as the process); where schedstat is missing, the ticks are
 * used.
 */
export function processCpuMs(pid: number): number {
  if (!hasSchedstat) return processTicksMs(pid);
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch (error) {
      // A thread that ended since the listing.
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
  return ns / 1e6;
}

/** utime + stime of a process from /proc/<pid>/stat, in ms. */
function processTicksMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) may contain spaces; fields after it are plain numbers.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  return ((utime + stime) * 1000) / ticksPerSecond();
}

export function startMockProvider(latencyMs: number, flags: readonly string[] = []): Promise<ChildHandle> {
  return startNodeChild(
    'mock-provider',
    ENTRY.mockProvider,
    [
      '--port',
      '0',
      '--host',
      '127.0.0.1',
      '--latency',
      String(Math.round(latencyMs)),
      '--jitter',
      '0',
      '--mode',
      'ok',
      ...flags,
    ],
    /mock-provider listening on (http:\/\/\S+)/,
  );
}

/** Starts the gateway in front of `upstream` on a free port; retries with another port if that one was taken meanwhile. */
export async function startGateway(
  upstream: string,
  flags: readonly string[],
  nodeArgs: string[] = [],
  { entry }: { entry?: string } = {},
): Promise<ChildHandle> {
  // As `npm start` runs it (see runtime-flags.ts).
  nodeArgs = [...GATEWAY_NODE_FLAGS, ...nodeArgs];
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    try {
      return await startNodeChild(
        'gateway',
        // BENCH_GATEWAY_ENTRY: another build of the gateway (e.g. an older commit's) against the same floor and harness.
        entry ?? process.env.BENCH_GATEWAY_ENTRY ?? ENTRY.gateway,
        ['--provider', 'openai', '--upstream', upstream, '--host', '127.0.0.1', '--port', String(port), ...flags],
        /gateway listening on (http:\/\/[\d.]+:\d+)/,
        { timeoutMs: 30_000, nodeArgs },
      );
    } catch (error) {
      lastError = error;
      if (!String((error as Error).message).includes('EADDRINUSE')) throw error;
    }
  }
  throw lastError;
}

/** node:http alone answering a fixed body (see `fixed-answer-server.ts`). */
export function startFixedAnswerServer(): Promise<ChildHandle> {
  return startNodeChild('fixed-answer', ENTRY.fixedAnswerServer, [], /listening on (http:\/\/\S+)/);
}

export function startMinimalProxy(upstream: string, connections = 256): Promise<ChildHandle> {
  return startNodeChild(
    'minimal-proxy',
    ENTRY.minimalProxy,
    ['--upstream', upstream, '--port', '0', '--connections', String(connections)],
    /minimal-proxy listening on (http:\/\/\S+)/,
  );
}

/**
 * Runs `node [nodeArgs] <script> <args>` to completion and resolves with its stdout. The child is killed
 * (by its pid) if it runs longer than `timeoutMs`; a non-zero exit rejects with its last output.
 */
export function runNodeScript(
  script: string,
  args: string[],
  options: { nodeArgs?: string[]; timeoutMs: number },
): Promise<string> {
  const child = spawnNode(script, args, options.nodeArgs);
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (text: string) => (stdout += text));
  child.stderr?.setEncoding('utf8').on('data', (text: string) => (stderr = (stderr + text).slice(-8192)));
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      void stopChild(child, 1_000).finally(() =>
        reject(new Error(`${script}: still running after ${options.timeoutMs} ms, stopped`)),
      );
    }, options.timeoutMs);
    child.once('error', (error) => {
      clearTimeout(timer);
      live.delete(child);
      reject(error);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      live.delete(child);
      if (code === 0) resolve(stdout);
      else reject(new Error(`${script} exited with code ${code} (signal ${signal})\n${stderr}`));
    });
  });
}
