#!/usr/bin/env node
// What the tests need besides Node and node_modules, checked (and, where it can be, installed) before `npm test`:
//   - `redis-server` on PATH: every test that uses Redis starts its own (test/support/redis-server.ts); `redis-cli`
//     and `openssl` for the Redis topology suites (a cluster joined with redis-cli, TLS certificates made with openssl);
//   - Debian's Chromium at /usr/bin/chromium: the two browser suites drive it (never a browser a tool downloads);
//   - `promtool` on PATH (Debian package prometheus): the metrics suite checks the gateway's exposition with it.

// All present: exits 0 at once, without calling apt. Something missing, as root with apt-get: `apt-get update` once,
// then `apt-get install -y` of what is missing. Otherwise: ONE line on stderr naming what is missing and how to get
// it, exit status 1.
//
// For checking this script itself: TEST_PREREQUISITES_PRETEND_MISSING=redis-server,chromium treats those as missing
// on the first look (what an install would then find is looked at for real), and --no-install (or
// TEST_PREREQUISITES_NO_INSTALL=1) never installs.
import { spawnSync } from 'node:child_process';
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';

const CHROMIUM = '/usr/bin/chromium';
const REQUIREMENTS = [
  { name: 'redis-server', debianPackage: 'redis-server', where: 'on PATH', found: () => onPath('redis-server') },
  // The Redis topology suites join a cluster with redis-cli and make TLS certificates with openssl.
  { name: 'redis-cli', debianPackage: 'redis-tools', where: 'on PATH', found: () => onPath('redis-cli') },
  { name: 'openssl', debianPackage: 'openssl', where: 'on PATH', found: () => onPath('openssl') },
  { name: 'chromium', debianPackage: 'chromium', where: `at ${CHROMIUM}`, found: () => executable(CHROMIUM) },
  { name: 'promtool', debianPackage: 'prometheus', where: 'on PATH', found: () => onPath('promtool') },
];

const pretendMissing = new Set(
  (process.env.TEST_PREREQUISITES_PRETEND_MISSING ?? '')
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean),
);
const noInstall = process.argv.includes('--no-install') || process.env.TEST_PREREQUISITES_NO_INSTALL === '1';

function executable(path) {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

function onPath(command) {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => dir !== '' && executable(join(dir, command)));
}

/** e.g. `redis-server (on PATH) and chromium (at /usr/bin/chromium) missing: on Debian, as root: apt-get install -y redis-server chromium` */
function describeMissing(missing) {
  const names = missing.map((r) => `${r.name} (${r.where})`).join(' and ');
  const packages = missing.map((r) => r.debianPackage).join(' ');
  return `${names} missing: on Debian, as root: apt-get install -y ${packages}`;
}

function fail(line) {
  process.stderr.write(`test prerequisites: ${line}\n`);
  process.exit(1);
}

const missing = REQUIREMENTS.filter((r) => pretendMissing.has(r.name) || !r.found());
if (missing.length === 0) process.exit(0);

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
const canInstall = !noInstall && isRoot && onPath('apt-get');
if (!canInstall) {
  const why = noInstall ? 'installing is turned off' : !isRoot ? 'not root' : 'no apt-get';
  fail(`${describeMissing(missing)}, then npm test again (not installed here: ${why})`);
}

const packages = missing.map((r) => r.debianPackage);
process.stderr.write(`test prerequisites: installing ${packages.join(' ')} with apt-get (missing)\n`);
const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
// apt's and dpkg's hundreds of lines are kept back, and shown (their end) only if a step fails.
const apt = (args) => {
  const run = spawnSync('apt-get', args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  if (run.status !== 0) {
    const output = `${run.stdout ?? ''}${run.stderr ?? ''}${run.error ? String(run.error) : ''}`.trimEnd().split('\n');
    process.stderr.write(`${output.slice(-30).join('\n')}\n`);
    fail(`apt-get ${args[0]} failed (status ${run.status ?? run.signal}); ${describeMissing(missing)}`);
  }
};
apt(['update', '-qq']);
apt(['install', '-y', '-qq', ...packages]);

const stillMissing = REQUIREMENTS.filter((r) => !r.found());
if (stillMissing.length > 0) fail(`installed ${packages.join(' ')}, yet ${describeMissing(stillMissing)}`);
process.stderr.write(`test prerequisites: installed ${packages.join(' ')}\n`);
