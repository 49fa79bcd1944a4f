import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildIfStale } from '../../scripts/build-if-stale.mjs';
import { CHILDREN_DIR_VARIABLE } from './child-registry.mjs';

/** Builds once before any suite, when a source is newer than the build: no test builds inside its own time. */
export default function globalSetup() {
  // This run's record of the processes tests start (test/support/child-registry.mjs), read by the global teardown.
  process.env[CHILDREN_DIR_VARIABLE] = mkdtempSync(join(tmpdir(), 'npo-jest-children-'));
  buildIfStale();
}
