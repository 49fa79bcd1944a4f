#!/usr/bin/env node
// Runs a command on a busy machine: starts N busy-looping processes (2 by default: on a 2-core machine they take
// every core), runs the command, and stops them by their PIDs when it ends. Exits with the command's status.
//
//   node scripts/with-burners.mjs [--burners N] [--max-seconds S] -- <command> [args...]
//
// Each burner is bounded by itself as well: it stops after --max-seconds (default 1800), or as soon as this script
// is gone (its parent changed), so that a killed run never leaves them spinning.
import { spawn } from 'node:child_process';

function usage(message) {
  process.stderr.write(
    `with-burners: ${message}\nusage: node scripts/with-burners.mjs [--burners N] [--max-seconds S] -- <command> [args...]\n`,
  );
  process.exit(2);
}

const args = process.argv.slice(2);
const separator = args.indexOf('--');
if (separator < 0 || separator === args.length - 1) usage('no command given');
const options = args.slice(0, separator);
const command = args.slice(separator + 1);
let burners = 2;
let maxSeconds = 1800;
for (let i = 0; i < options.length; i += 2) {
  const value = Number(options[i + 1]);
  if (!Number.isInteger(value) || value < 0) usage(`${options[i]} needs a whole number, got ${options[i + 1]}`);
  if (options[i] === '--burners') burners = value;
  else if (options[i] === '--max-seconds') maxSeconds = value;
  else usage(`unknown option ${options[i]}`);
}

const BURNER = new URL('./burner.mjs', import.meta.url).pathname;

const running = [];
for (let i = 0; i < burners; i++) {
  const burner = spawn(process.execPath, [BURNER, String(maxSeconds), String(process.pid)], { stdio: 'ignore' });
  running.push(burner);
}
process.stderr.write(
  `with-burners: ${burners} busy processes (PIDs ${running.map((b) => b.pid).join(' ')}), each stopping by itself after ${maxSeconds} s at most\n`,
);

function stopBurners() {
  for (const burner of running) {
    if (burner.exitCode === null && burner.signalCode === null) {
      try {
        process.kill(burner.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
}

const started = Date.now();
const child = spawn(command[0], command.slice(1), { stdio: 'inherit' });
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    stopBurners();
    if (child.exitCode === null) child.kill(signal);
  });
}
child.on('error', (error) => {
  stopBurners();
  process.stderr.write(`with-burners: could not run ${command[0]}: ${error.message}\n`);
  process.exit(127);
});
child.on('exit', (code, signal) => {
  const stillBurning = running.filter((b) => b.exitCode === null && b.signalCode === null).length;
  stopBurners();
  const seconds = ((Date.now() - started) / 1000).toFixed(0);
  process.stderr.write(
    `with-burners: ${command.join(' ')} ended (${signal ?? `status ${code}`}) after ${seconds} s; ${stillBurning} of ${burners} burners were still running, stopped\n`,
  );
  process.exit(code ?? 1);
});
