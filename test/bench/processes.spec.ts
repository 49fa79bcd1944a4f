import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { processCpuMs } from './processes.js';

/**
 * A child that burns CPU when asked and then says how much CPU it has used in all (its own `process.cpuUsage()`,
 * exact to the microsecond), then waits idle for the next request.
 */
const CHILD = `
const readline = require('node:readline');
const used = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; };
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const until = used() + Number(line);
  while (used() < until);
  process.stdout.write(used() + '\\n');
});
process.stdout.write(used() + '\\n');
`;

describe('processCpuMs (the CPU the overhead bench charges each process)', () => {
  it('measures a few milliseconds of CPU to within about a millisecond, not in 10 ms clock ticks', async () => {
    const child = spawn(process.execPath, ['-e', CHILD], { stdio: ['pipe', 'pipe', 'inherit'] });
    try {
      const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
      const reported = async () => Number((await lines.next()).value);
      let own = await reported();
      const differences: number[] = [];
      for (const burnMs of [3, 4, 6, 3, 4]) {
        const before = processCpuMs(child.pid!);
        child.stdin.write(`${burnMs}\n`);
        const ownAfter = await reported();
        const after = processCpuMs(child.pid!);
        // What the child says it burned, and what the bench reads from outside over the same stretch.
        differences.push(Math.abs(after - before - (ownAfter - own)));
        own = ownAfter;
      }
      // Clock ticks would read each burn as 0 or 10 ms: at least 3 ms off for every one of these. What is left is the
      // child's reading of its line and writing of its answer, outside the stretch it measures itself.
      expect(Math.max(...differences)).toBeLessThan(2);
    } finally {
      child.kill();
      await once(child, 'exit');
    }
  });
});
