// The processes tests start, in one place, so that each one is killed (by its own PID, never by name) however its
// test ends: at the end of its suite (the test environment's teardown, after a failure or a timeout too), when the
// Jest process exits (--forceExit), and, as a backstop, by the run's global teardown from the files recorded here.
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The environment variable naming this Jest run's directory of recorded PIDs (made by the global setup). */
export const CHILDREN_DIR_VARIABLE = 'NPO_TEST_CHILDREN_DIR';

/** The global through which test code (loaded in the suite's context) reaches its suite's registry. */
export const REGISTRY_GLOBAL = '__npoTestChildren';

/** A process's start time in clock ticks since boot (Linux /proc), or undefined: tells a PID from a later reuse of it. */
export function startTimeOf(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
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

  /** `dir`: where each live child is recorded as a file (for the global teardown), or undefined for none. */
  constructor(dir) {
    this.dir = dir;
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
        writeFileSync(join(this.dir, String(pid)), JSON.stringify({ pid, start: startTimeOf(pid), label }));
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

  /** The suite is over: its children are killed, and so is any started later by a test still running past its timeout. */
  close() {
    this.#closed = true;
    this.killAll();
  }

  #forget(pid) {
    this.#children.delete(pid);
    if (this.dir) rmSync(join(this.dir, String(pid)), { force: true });
    if (this.#children.size === 0 && this.#closed) process.off('exit', this.#onExit);
  }
}

/** The global teardown's backstop: kills each recorded PID that is still the process recorded, then forgets the run. */
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
      const { pid, start, label } = JSON.parse(readFileSync(join(dir, file), 'utf8'));
      // Without a recorded start time the PID cannot be told from a reuse of it: left alone.
      if (start !== undefined && startTimeOf(pid) === start) {
        process.kill(pid, 'SIGKILL');
        killed.push({ pid, label });
      }
    } catch {
      // already gone, or a half-written file
    }
  }
  rmSync(dir, { recursive: true, force: true });
  return killed;
}
