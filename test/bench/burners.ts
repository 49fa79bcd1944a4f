import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from './processes.js';

/** The busy loop (scripts/burner.mjs): it stops after its time, or as soon as the process that started it is gone. */
const BURNER = join(repoRoot(), 'scripts/burner.mjs');

export interface Burners {
  readonly pids: number[];
  /** Stops every burner still running (by its PID). */
  stop(): void;
}

/** `count` busy-looping processes (on a 2-core machine, two of them take every core), each stopping by itself after `maxSeconds`. */
export function startBurners(count: number, maxSeconds: number): Burners {
  const running: ChildProcess[] = Array.from({ length: count }, () =>
    spawn(process.execPath, [BURNER, String(maxSeconds), String(process.pid)], { stdio: 'ignore' }),
  );
  const stop = () => {
    for (const burner of running) {
      if (burner.exitCode === null && burner.signalCode === null) burner.kill('SIGKILL');
    }
  };
  // Also when the bench exits without reaching its own clean-up.
  process.once('exit', stop);
  return { pids: running.map((b) => b.pid ?? 0), stop };
}
