// Loaded with `node --import` into a process under test: records what wakes its event loop from JavaScript (each
// setTimeout / setInterval callback as it runs) and every event-loop-delay monitor (a libuv timer of its own while
// enabled), with where each was made, and writes them as JSON to $WAKEUPS_FILE when the process exits.
import { writeFileSync } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import perfHooks from 'node:perf_hooks';

const file = process.env.WAKEUPS_FILE;
const fired = [];
const monitors = [];

const where = () =>
  (new Error().stack ?? '')
    .split('\n')
    .slice(3, 7)
    .map((line) => line.trim())
    .join(' < ');

for (const name of ['setTimeout', 'setInterval']) {
  const original = globalThis[name];
  globalThis[name] = function (callback, ...rest) {
    if (typeof callback !== 'function') return original.call(this, callback, ...rest);
    const made = `${name} ${where()}`;
    return original.call(
      this,
      function (...args) {
        fired.push({ at: Date.now(), made });
        return callback.apply(this, args);
      },
      ...rest,
    );
  };
}

const monitor = perfHooks.monitorEventLoopDelay;
perfHooks.monitorEventLoopDelay = function (options) {
  const histogram = monitor.call(this, options);
  const record = { made: where(), enabled: [] };
  monitors.push(record);
  const enable = histogram.enable.bind(histogram);
  const disable = histogram.disable.bind(histogram);
  histogram.enable = () => {
    const changed = enable();
    if (changed) record.enabled.push([Date.now(), undefined]);
    return changed;
  };
  histogram.disable = () => {
    const changed = disable();
    if (changed) record.enabled[record.enabled.length - 1][1] = Date.now();
    return changed;
  };
  return histogram;
};
// `import { monitorEventLoopDelay } from 'node:perf_hooks'` sees the wrapper too.
syncBuiltinESMExports();

process.on('exit', () => {
  if (!file) return;
  const now = Date.now();
  const closed = monitors.map(({ made, enabled }) => ({
    made,
    enabled: enabled.map(([from, to]) => [from, to ?? now]),
  }));
  writeFileSync(file, JSON.stringify({ fired, monitors: closed }));
});
