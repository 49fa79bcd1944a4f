// A batch job as people run it: the official openai SDK, distinct 120-input embeddings batches of about 1 MB each,
// `parallel` at a time, in its own process. Samples the RSS of process `pid` (Linux /proc) as it goes and prints one
// JSON line: requests, answer bytes, dedup outcomes, and the RSS before and at its peak.
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const [baseURL, pid, requests, parallel] = process.argv.slice(2);
const rss = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'sk-batch-job' });
const batch = (n) => ({
  model: 'mock-model',
  dimensions: 1536,
  // Asked for explicitly, the SDK hands the base64 vectors over as they are.
  encoding_format: 'base64',
  input: Array.from({ length: 120 }, (_, i) => `document ${n}-${i}: the quick brown fox`),
});
for (let i = 0; i < 16; i++) await client.embeddings.create(batch(-1 - i)); // warm-up
const baseline = rss();
const outcome = { requests: 0, answerBytes: 0, dedup: {}, baseline, peak: baseline, wrongLength: 0 };
let next = 0;
const worker = async () => {
  while (next < Number(requests)) {
    const n = next++;
    const { data, response } = await client.embeddings.create(batch(n)).withResponse();
    if (data.data.length !== 120) outcome.wrongLength++;
    const dedup = response.headers.get('x-orchestrator-dedup');
    outcome.dedup[dedup] = (outcome.dedup[dedup] ?? 0) + 1;
    outcome.answerBytes += Number(response.headers.get('content-length') ?? 0);
    outcome.requests++;
    if (n % 25 === 0) outcome.peak = Math.max(outcome.peak, rss());
  }
};
await Promise.all(Array.from({ length: Number(parallel) }, worker));
outcome.peak = Math.max(outcome.peak, rss());
console.log(JSON.stringify(outcome));
