#!/usr/bin/env node
// Builds the repository (`npm run build`) when a source is newer than the build or the build is missing; else does
// nothing. Jest's global setup runs it once before the suites (test/support/global-setup.mjs), so no test builds;
// suites only check (--check) that the build they start is current.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SOURCES = [
  'apps/gateway/src',
  'apps/mock-provider/src',
  'apps/example/src',
  'libs/orchestrator/src',
  'test/bench',
];
const BUILT = [
  'dist/apps/gateway/src/main.js',
  'dist/gateway/main.js',
  'dist/apps/gateway/src/status/page/status-page.js',
  'libs/orchestrator/dist/esm/index.js',
].map((file) => join(ROOT, file));

function newestSource(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(path));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts'))
      newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

export function buildIsStale() {
  if (!BUILT.every((file) => existsSync(file))) return true;
  const built = Math.min(...BUILT.map((file) => statSync(file).mtimeMs));
  return SOURCES.some((dir) => existsSync(join(ROOT, dir)) && newestSource(join(ROOT, dir)) > built);
}

/** Throws with the build's output when it fails. */
export function buildIfStale() {
  if (!buildIsStale()) return;
  const build = spawnSync('npm', ['run', 'build', '--silent'], { cwd: ROOT, encoding: 'utf8' });
  if (build.status !== 0) throw new Error(`npm run build failed:\n${build.stdout}\n${build.stderr}`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  // --check: only says whether the build is current (exit 1 if not), never builds.
  if (process.argv.includes('--check')) {
    if (buildIsStale()) {
      process.stderr.write(
        "the build is missing or older than a source: run `npm run build` (Jest's global setup does)\n",
      );
      process.exit(1);
    }
    process.exit(0);
  }
  try {
    buildIfStale();
  } catch (error) {
    process.stderr.write(`${error.message}\n`);
    process.exit(1);
  }
}
