import { execFile, type ChildProcess, type ExecFileOptions } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';

/**
 * Every process a test starts is given to `ownChild`: under Jest (test/support/jest-environment.mjs) it is killed at
 * the end of its suite however the suite ended, and when the Jest process exits; elsewhere (the bench scripts), when
 * this process exits. Kills are by the child's own PID.
 */
interface Registry {
  track(child: ChildProcess, label?: string): void;
}

const REGISTRY_GLOBAL = '__npoTestChildren';

let outsideJest: Set<ChildProcess> | undefined;
const gone = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null;

function registry(): Registry {
  const suite = (globalThis as Record<string, unknown>)[REGISTRY_GLOBAL] as Registry | undefined;
  if (suite) return suite;
  if (!outsideJest) {
    const children = (outsideJest = new Set());
    process.once('exit', () => {
      for (const child of children) if (!gone(child)) child.kill('SIGKILL');
    });
  }
  const children = outsideJest;
  return {
    track: (child) => {
      children.add(child);
      child.once('exit', () => children.delete(child));
    },
  };
}

/** Records `child` (just spawned) to be killed if nothing else stops it; returns it. */
export function ownChild<T extends ChildProcess>(child: T, label: string): T {
  registry().track(child, label);
  return child;
}

/** `execFile`, promised (utf8 output), its child recorded like any other. */
export function execFileOwned(
  file: string,
  args: readonly string[],
  options: ExecFileOptions = {},
): Promise<{ stdout: string; stderr: string }> {
  const pending = promisify(execFile)(file, args, { ...options, encoding: 'utf8' });
  ownChild(pending.child, file);
  return pending;
}

/** Whether `pid` is a process still running (Linux /proc): not gone, nor a zombie waiting to be reaped. */
export function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}
