import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { processCpuMs } from './processes.js';

/**
 * A child that burns CPU when told to (`burn N`), and says how much CPU it has used in all when asked (`report`:
 * its own `process.cpuUsage()`, exact to the microsecond, every thread counted, as the bench counts them).
 */
const CHILD = `
const readline = require('node:readline');
const used = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; };
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  if (line === 'report') return void process.stdout.write(used() + '\\n');
  const until = used() + Number(line.slice('burn '.length));
  while (used() < until);
});
`;

/** Long enough for what a burn set going on the child's other threads (compiling, collecting) to be over. */
const SETTLE_MS = 150;

describe('processCpuMs (the CPU the overhead bench charges each process)', () => {
  it('measures a few milliseconds of CPU to within about a millisecond, not in 10 ms clock ticks', async () => {
    const child = spawn(process.execPath, ['-e', CHILD], { stdio: ['pipe', 'pipe', 'inherit'] });
    try {
      const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
      // The child's own total and the bench's reading of it from outside, taken while the child is idle.
      const both = async () => {
        await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
        child.stdin.write('report\n');
        const own = Number((await lines.next()).value);
        return { own, outside: processCpuMs(child.pid!) };
      };
      let before = await both();
      const differences: number[] = [];
      for (const burnMs of [3, 4, 6, 3, 4, 6, 3]) {
        child.stdin.write(`burn ${burnMs}\n`);
        const after = await both();
        differences.push(Math.abs(after.outside - before.outside - (after.own - before.own)));
        before = after;
      }
      // Clock ticks would read each burn as 0 or 10 ms: at least 3 ms off for every one of these. The child's own figure
      // (getrusage) is itself kept from going backwards by the kernel, and now and then lags a few milliseconds behind
      // the time its threads ran: the typical difference is what is held to a millisecond.
      const median = [...differences].sort((a, b) => a - b)[Math.floor(differences.length / 2)];
      expect(median).toBeLessThan(1);
    } finally {
      child.kill();
      await once(child, 'exit');
    }
  });
});
