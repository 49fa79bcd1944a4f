import { parseArgs } from 'node:util';
import { Pool } from 'undici';

/*
 * Times GET <url>/health every --every ms for --for ms from a process of its own (the load generator's event loop,
 * busy with a herd, would delay the probe itself), then prints the slowest and the median round trip as JSON.
 */
const { values } = parseArgs({
  options: {
    url: { type: 'string' },
    every: { type: 'string', default: '5' },
    for: { type: 'string', default: '3000' },
  },
});
if (!values.url) throw new Error('--url is required');
const pool = new Pool(values.url, { connections: 1 });
const every = Number(values.every);
const until = performance.now() + Number(values.for);
const times: number[] = [];
while (performance.now() < until) {
  const t = performance.now();
  const res = await pool.request({ path: '/health', method: 'GET', headersTimeout: 30_000, bodyTimeout: 30_000 });
  await res.body.arrayBuffer();
  times.push(performance.now() - t);
  await new Promise((resolve) => setTimeout(resolve, every));
}
await pool.close();
times.sort((a, b) => a - b);
console.log(
  JSON.stringify({ count: times.length, maxMs: times.at(-1) ?? 0, p50Ms: times[Math.floor(times.length / 2)] ?? 0 }),
);
