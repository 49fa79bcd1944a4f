#!/usr/bin/env node
// Consumer tests: packs the library as npm would publish it, checks the tarball, then installs it into each
// fixture app under test/consumers/ (a temporary copy, so no node_modules is left in the repository) and runs
// that app's own tests. Non-zero exit if anything fails.
//
//   npm run test:consumers [-- <fixture>...] [-- --keep] [-- --jobs N]
//
// CONSUMERS_NPM_CACHE sets the npm cache the fixture installs use (default: npm's own cache, ~/.npm); keep it
// between runs so that installs are served from it (--prefer-offline). CONSUMERS_TMPDIR sets where the copies go.
import { spawn } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..', '..');
const library = join(repo, 'libs', 'orchestrator');
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

const args = process.argv.slice(2);
const keep = args.includes('--keep');
const jobsAt = args.indexOf('--jobs');
// One fixture at a time by default: on a 2-core machine running them side by side takes as long in all, and makes
// each one's timings (a breaker refusal within 1 s, a 200 ms timeout) twice as tight.
const jobs = jobsAt >= 0 ? Math.max(1, Number(args[jobsAt + 1]) || 1) : 1;
const wanted = args.filter((arg, i) => !arg.startsWith('--') && !(jobsAt >= 0 && i === jobsAt + 1));
// `_shared/`: files several fixtures use alike, copied into each copy that names them in its package.json's
// `consumerShared` (same path in both), so that one source serves them all.
const SHARED = join(here, '_shared');
const fixtures = readdirSync(here).filter(
  (name) => statSync(join(here, name)).isDirectory() && !name.startsWith('.') && !name.startsWith('_'),
);
for (const name of wanted) {
  if (!fixtures.includes(name)) fail(`unknown fixture ${name} (known: ${fixtures.join(', ')})`);
}
const selected = wanted.length ? wanted : fixtures;

const work = mkdtempSync(join(process.env.CONSUMERS_TMPDIR ?? tmpdir(), 'npo-consumers-'));
const cacheArgs = process.env.CONSUMERS_NPM_CACHE ? ['--cache', process.env.CONSUMERS_NPM_CACHE] : [];
const started = Date.now();
const seconds = (ms) => `${(ms / 1000).toFixed(1)} s`;

/** Runs a command; resolves with its exit code, its stdout and all its output (also written to `log`). */
function run(command, commandArgs, cwd, log) {
  return new Promise((resolve) => {
    const child = spawn(command, commandArgs, { cwd, env: { ...process.env, FORCE_COLOR: '0' } });
    let stdout = '';
    let output = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
      output += chunk;
    });
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('error', (error) => (output += `\n${error.message}\n`));
    child.on('close', (code) => {
      if (log) writeFileSync(log, output);
      resolve({ code: code ?? 1, stdout, output });
    });
  });
}

function fail(message) {
  console.error(`consumer tests: ${message}`);
  process.exit(1);
}

function tail(text, lines = 60) {
  return text
    .trimEnd()
    .split('\n')
    .slice(-lines)
    .map((line) => `    | ${line}`)
    .join('\n');
}

// 1. Pack the library (its prepack script builds it), or take the tarball CONSUMERS_TARBALL names (e.g. an
// earlier version's, to see which fixtures it fails).
let step = Date.now();
let packInfo;
if (process.env.CONSUMERS_TARBALL) {
  const listed = await run(npm, ['pack', '--dry-run', '--json', process.env.CONSUMERS_TARBALL, ...cacheArgs], work);
  if (listed.code !== 0) fail(`cannot read ${process.env.CONSUMERS_TARBALL}`);
  packInfo = JSON.parse(listed.stdout.slice(listed.stdout.indexOf('[')))[0];
  cpSync(process.env.CONSUMERS_TARBALL, join(work, basename(process.env.CONSUMERS_TARBALL)));
  packInfo.filename = basename(process.env.CONSUMERS_TARBALL);
} else {
  const packed = await run(
    npm,
    ['pack', '--json', '--pack-destination', work, ...cacheArgs],
    library,
    join(work, 'pack.log'),
  );
  if (packed.code !== 0) {
    console.error(tail(packed.output));
    fail('npm pack failed');
  }
  packInfo = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('\n[') + 1))[0];
}
const tarball = join(work, packInfo.filename);
console.log(
  `pack     ok  ${seconds(Date.now() - step).padStart(7)}  ${packInfo.filename}: ${packInfo.entryCount} files, ${(packInfo.size / 1024).toFixed(1)} kB`,
);

// 2. Check what the tarball holds.
step = Date.now();
const problems = checkTarball(packInfo.files.map((file) => file.path));
const attw = await run(
  join(repo, 'node_modules', '.bin', 'attw'),
  [tarball, '--format', 'ascii'],
  repo,
  join(work, 'attw.log'),
);
if (attw.code !== 0) problems.push(`attw found type resolution problems:\n${attw.output}`);
if (problems.length) {
  console.log(`tarball  FAIL ${seconds(Date.now() - step).padStart(7)}`);
  for (const problem of problems) console.log(`    - ${problem}`);
} else {
  console.log(
    `tarball  ok  ${seconds(Date.now() - step).padStart(7)}  contents, package.json fields, README links, types for import and require (attw)`,
  );
}

// 3. Each fixture: a fresh copy, the tarball installed into it, its own tests.
const results = [];
const queue = [...selected];
await Promise.all(
  Array.from({ length: Math.min(jobs, queue.length) }, async () => {
    for (let name = queue.shift(); name; name = queue.shift()) results.push(await testFixture(name));
  }),
);

const failed = results.filter((result) => !result.ok);
console.log(
  `\n${results.length - failed.length} of ${results.length} fixtures passed${problems.length ? '; the tarball check failed' : ''} ` +
    `(${seconds(Date.now() - started)} in all)${keep ? `; copies kept in ${work}` : ''}`,
);
if (!keep) rmSync(work, { recursive: true, force: true });
process.exit(failed.length || problems.length ? 1 : 0);

async function testFixture(name) {
  const dir = join(work, name);
  cpSync(join(here, name), dir, {
    recursive: true,
    filter: (source) => !['node_modules', 'dist', 'package-lock.json'].includes(basename(source)),
  });
  for (const file of JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).consumerShared ?? [])
    cpSync(join(SHARED, file), join(dir, file));
  cpSync(tarball, join(dir, 'nest-prompt-orchestrator.tgz'));
  const t0 = Date.now();
  const install = await run(
    npm,
    ['install', '--prefer-offline', '--no-audit', '--no-fund', ...cacheArgs],
    dir,
    join(work, `${name}.install.log`),
  );
  const t1 = Date.now();
  const test = install.code === 0 ? await run(npm, ['test'], dir, join(work, `${name}.test.log`)) : undefined;
  const t2 = Date.now();
  const ok = install.code === 0 && test?.code === 0;
  const passed = test?.output.match(/^Tests:.*$/m)?.[0] ?? '';
  console.log(
    `${name.padEnd(24)} ${ok ? 'ok  ' : 'FAIL'}  install ${seconds(t1 - t0).padStart(7)}  test ${seconds(t2 - t1).padStart(7)}  ${passed}`,
  );
  if (!ok) console.log(tail(test ? test.output : install.output));
  return { name, ok };
}

/** What must and must not be in the tarball; returns the problems found. */
function checkTarball(files) {
  const problems = [];
  const has = new Set(files);
  for (const required of [
    'LICENSE',
    'README.md',
    'package.json',
    'dist/esm/index.js',
    'dist/esm/index.d.ts',
    'dist/cjs/index.js',
    'dist/cjs/index.d.ts',
    'dist/cjs/package.json',
  ]) {
    if (!has.has(required)) problems.push(`missing ${required}`);
  }
  for (const file of files) {
    if (!['LICENSE', 'README.md', 'package.json'].includes(file) && !file.startsWith('dist/'))
      problems.push(`unexpected file ${file}`);
    if (file.endsWith('.map')) problems.push(`source map shipped without its sources: ${file}`);
    if (/\.(c|m)?ts$/.test(file) && !/\.d\.(c|m)?ts$/.test(file)) problems.push(`TypeScript source shipped: ${file}`);
    if (/\.spec\.|\.tsbuildinfo$/.test(file)) problems.push(`test or build artefact shipped: ${file}`);
  }
  // Both builds must hold the same modules, each with its declarations.
  const modules = (format) =>
    files
      .filter((file) => file.startsWith(`dist/${format}/`) && /\.(js|d\.ts)$/.test(file))
      .map((file) => file.slice(`dist/${format}/`.length))
      .sort();
  if (JSON.stringify(modules('esm')) !== JSON.stringify(modules('cjs')))
    problems.push('dist/esm and dist/cjs hold different files');

  const manifest = JSON.parse(readFileSync(join(library, 'package.json'), 'utf8'));
  for (const field of ['repository', 'homepage', 'bugs', 'license', 'engines', 'files']) {
    if (!manifest[field]) problems.push(`package.json has no ${field}`);
  }
  if (manifest.sideEffects !== false) problems.push('package.json: sideEffects is not false');
  // Every entry point, for both module systems: the Nest module, the framework-free core, the Fastify plugin, the
  // Express middleware, the throttler storages, and the low-level call entry.
  for (const name of ['.', './core', './fastify', './express', './throttler', './low-level']) {
    const entry = manifest.exports?.[name];
    for (const condition of ['import', 'require']) {
      if (!entry?.[condition]?.types || !entry?.[condition]?.default)
        problems.push(`exports["${name}"].${condition} lacks types or default`);
    }
  }
  // An app without Nest (the core, the Fastify plugin, the Express middleware) must not be made to install it.
  for (const peer of ['@nestjs/common', '@nestjs/core']) {
    if (manifest.peerDependenciesMeta?.[peer]?.optional !== true)
      problems.push(`peerDependenciesMeta: ${peer} is not optional`);
  }
  for (const script of ['preinstall', 'install', 'postinstall']) {
    if (manifest.scripts?.[script]) problems.push(`package.json runs a ${script} script on the consumer's machine`);
  }

  const readme = readFileSync(join(library, 'README.md'), 'utf8');
  for (const [, target] of readme.matchAll(/\]\(([^)\s]+)[^)]*\)/g)) {
    if (!/^(https?:|mailto:|#)/.test(target)) problems.push(`README link is not absolute (broken on npm): ${target}`);
  }
  if (readFileSync(join(library, 'LICENSE'), 'utf8') !== readFileSync(join(repo, 'LICENSE'), 'utf8')) {
    problems.push('libs/orchestrator/LICENSE differs from the repository LICENSE');
  }
  return problems;
}
