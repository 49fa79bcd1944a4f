import { spawn, type ChildProcess } from 'node:child_process';

/**
 * A tight loop that looks at the clock and at its parent every 2^20 turns (a few milliseconds): it stops after its
 * time or as soon as the process that started it is gone, so that a killed bench never leaves it spinning.
 */
const BURNER = `
const end = Date.now() + Number(process.argv[1]) * 1000;
const parent = Number(process.argv[2]);
for (let i = 1; ; i++) {
  if ((i & 0xfffff) === 0 && (Date.now() > end || process.ppid !== parent)) process.exit(0);
}`;

export interface Burners {
  readonly pids: number[];
  /** Stops every burner still running (by its PID). */
  stop(): void;
}

/** `count` busy-looping processes (on a 2-core machine, two of them take every core), each stopping by itself after `maxSeconds`. */
export function startBurners(count: number, maxSeconds: number): Burners {
  const running: ChildProcess[] = Array.from({ length: count }, () =>
    spawn(process.execPath, ['-e', BURNER, String(maxSeconds), String(process.pid)], { stdio: 'ignore' }),
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
