import { relative } from 'node:path';
import { CHILDREN_DIR_VARIABLE, killRecorded } from './child-registry.mjs';

/** The backstop: any process a test started that is somehow still running when the run ends is killed. */
export default function globalTeardown() {
  const dir = process.env[CHILDREN_DIR_VARIABLE];
  if (!dir) return;
  for (const { pid, label, suite, command } of killRecorded(dir)) {
    const by = suite ? ` by ${relative(process.cwd(), suite)}` : '';
    process.stderr.write(`killed ${label} (pid ${pid}), left running${by}: ${command ?? '(command unknown)'}\n`);
  }
}
