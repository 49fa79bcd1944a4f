import { monitorEventLoopDelay } from 'node:perf_hooks';

/**
 * Preloaded into a process the soak benchmark measures (`node --import`): once a second, one stdout line with the
 * event-loop delay of that second (p50, p99, max, in ms) and the process's RSS in MiB.
 */
const histogram = monitorEventLoopDelay({ resolution: 10 });
histogram.enable();
setInterval(() => {
  const ms = (ns: number) => (ns / 1e6).toFixed(1);
  process.stdout.write(
    `loop-delay p50=${ms(histogram.percentile(50))} p99=${ms(histogram.percentile(99))} max=${ms(histogram.max)} rss=${Math.round(process.memoryUsage.rss() / 1048576)}\n`,
  );
  histogram.reset();
}, 1_000).unref();
