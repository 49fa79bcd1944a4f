// The processes tests start, in one place, so that each one is killed (by its own PID, never by name) however its
// test ends: at the end of its suite (the test environment's teardown, after a failure or a timeout too), when the
// Jest process exits (--forceExit), and, as a backstop, by the run's global teardown from the files recorded here.
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The environment variable naming this Jest run's directory of recorded PIDs (made by the global setup). */
export const CHILDREN_DIR_VARIABLE = 'NPO_TEST_CHILDREN_DIR';

/** The global through which test code (loaded in the suite's context) reaches its suite's registry. */
export const REGISTRY_GLOBAL = '__npoTestChildren';

/** The fields of /proc/<pid>/stat after the command name (state first), or undefined once the process is gone. */
function statOf(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** A process's start time in clock ticks since boot (Linux /proc), or undefined: tells a PID from a later reuse of it. */
export function startTimeOf(pid) {
  return statOf(pid)?.[19];
}

/** A process's command line as it runs now (Linux /proc), or undefined. */
function commandLineOf(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ') || undefined;
  } catch {
    return undefined;
  }
}

const gone = (child) => child.exitCode !== null || child.signalCode !== null;

/** The children one suite started. */
export class ChildRegistry {
  #children = new Map();
  #closed = false;
  #onExit = () => this.killAll();

  /**
   * `dir`: where each live child is recorded as a file (for the global teardown), or undefined for none; `suite`: the
   * test file, recorded with each child so that a leak names the suite it came from.
   */
  constructor(dir, suite) {
    this.dir = dir;
    this.suite = suite;
    process.on('exit', this.#onExit);
  }

  /** Records a spawned child until it exits; one started after the suite ended is killed at once. */
  track(child, label = 'child') {
    const pid = child.pid;
    if (pid === undefined || gone(child)) return;
    this.#children.set(pid, child);
    child.once('exit', () => this.#forget(pid));
    if (this.dir) {
      try {
        mkdirSync(this.dir, { recursive: true });
        const record = { pid, start: startTimeOf(pid), label, suite: this.suite, command: child.spawnargs.join(' ') };
        writeFileSync(join(this.dir, String(pid)), JSON.stringify(record));
      } catch {
        // The in-process kills still apply; the file is only the backstop.
      }
    }
    if (this.#closed) this.killAll();
  }

  /** PIDs of the recorded children still running. */
  pids() {
    return [...this.#children.values()].filter((child) => !gone(child)).map((child) => child.pid);
  }

  /** SIGKILL to every recorded child still running (a stopped one too: SIGKILL needs no SIGCONT). */
  killAll() {
    for (const child of this.#children.values()) {
      if (!gone(child)) child.kill('SIGKILL');
    }
  }

  /**
   * The suite is over: its children are killed, and so is any started later by a test still running past its timeout.
   * Resolves, once they have exited, to those the suite left behind: `running`, never signalled (a leak: a suite stops
   * what it starts), and `unawaited`, signalled but not waited for (still there for whatever runs next).
   */
  async close() {
    this.#closed = true;
    const left = [...this.#children.values()].filter((child) => !gone(child));
    const exited = left.map(
      (child) => new Promise((resolve) => (gone(child) ? resolve() : child.once('exit', resolve))),
    );
    const described = (child) => ({ pid: child.pid, command: child.spawnargs.join(' ') });
    const running = left.filter((child) => !child.killed).map(described);
    const unawaited = left.filter((child) => child.killed).map(described);
    this.killAll();
    // Bounded so that a process stuck in the kernel cannot hang the run; the global teardown is the backstop for it.
    let timer;
    await Promise.race([Promise.all(exited), new Promise((resolve) => (timer = setTimeout(resolve, 10_000)))]);
    clearTimeout(timer);
    return { running, unawaited };
  }

  #forget(pid) {
    this.#children.delete(pid);
    if (this.dir) rmSync(join(this.dir, String(pid)), { force: true });
    if (this.#children.size === 0 && this.#closed) process.off('exit', this.#onExit);
  }
}

/**
 * The global teardown's backstop: kills each recorded PID that is still the process recorded, then forgets the run.
 * Returns what it killed, with the suite that started each and its command line, so that the leak can be found.
 */
export function killRecorded(dir) {
  const killed = [];
  let files;
  try {
    files = readdirSync(dir);
  } catch {
    return killed;
  }
  for (const file of files) {
    try {
      const { pid, start, label, suite, command } = JSON.parse(readFileSync(join(dir, file), 'utf8'));
      const stat = statOf(pid);
      // Without a recorded start time the PID cannot be told from a reuse of it: left alone. A zombie has already
      // exited (its parent has yet to reap it): not a leak.
      if (start !== undefined && stat?.[19] === start && stat[0] !== 'Z') {
        const running = commandLineOf(pid) ?? command;
        process.kill(pid, 'SIGKILL');
        killed.push({ pid, label, suite, command: running });
      }
    } catch {
      // already gone, or a half-written file
    }
  }
  rmSync(dir, { recursive: true, force: true });
  return killed;
}
