import { describe, expect, it } from '@jest/globals';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileOwned, isRunning } from '../support/children.js';
import { ROOT } from '../support/gateway-process.js';

/**
 * A suite that times out leaves no process behind: test/support/fixtures/times-out.fixture.ts, run in a Jest of its
 * own (as `npm test` runs Jest, with --forceExit), starts a Redis server, a gateway process and a gateway that never
 * says it listens, then times out. Once that Jest has exited, none of the three runs.
 */

describe('processes started by a suite that times out', () => {
  it('are all killed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'npo-orphans-'));
    const pidFile = join(dir, 'pids.json');
    try {
      const jest = [
        ...[
          '--experimental-vm-modules',
          join(ROOT, 'node_modules/jest/bin/jest.js'),
          '--runInBand',
          '--forceExit',
          '--ci',
        ],
        ...['--roots', '<rootDir>/test/support/fixtures', '--testMatch', '**/*.fixture.ts'],
      ];
      const run = await execFileOwned(process.execPath, jest, {
        cwd: ROOT,
        env: { ...process.env, ORPHANS_PID_FILE: pidFile },
      }).then(
        ({ stdout, stderr }) => ({ code: 0, output: stdout + stderr }),
        (error: { code?: number; stdout?: string; stderr?: string }) => ({
          code: error.code,
          output: `${error.stdout}${error.stderr}`,
        }),
      );
      // The fixture did time out, holding its processes.
      expect(run.code).toBe(1);
      expect(run.output).toMatch(/Exceeded timeout of 1000 ms/);
      const pids = JSON.parse(readFileSync(pidFile, 'utf8')) as Record<'gateway' | 'redis' | 'starting', number>;
      expect(Object.values(pids).every((pid) => Number.isInteger(pid) && pid > 0)).toBe(true);
      const left = Object.entries(pids).filter(([, pid]) => isRunning(pid));
      expect(left).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 600_000);
});
