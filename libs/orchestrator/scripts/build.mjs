// Builds the package from the same sources twice with tsc: dist/esm (ES modules) and dist/cjs (CommonJS,
// marked by a nested package.json), each with its own declarations so that TypeScript reads every entry
// point in the format Node will load. dist/ is removed first: files of deleted or moved sources never ship.
import { spawn } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');

function compile(project) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [tsc, '-p', join(root, project)], { stdio: 'inherit' });
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`tsc -p ${project} exited with ${code}`))));
  });
}

rmSync(join(root, 'dist'), { recursive: true, force: true });
try {
  await Promise.all([compile('tsconfig.lib.json'), compile('tsconfig.cjs.json')]);
} catch (error) {
  console.error(error.message);
  process.exit(1);
}
writeFileSync(join(root, 'dist/cjs/package.json'), `${JSON.stringify({ type: 'commonjs' }, null, 2)}\n`);
