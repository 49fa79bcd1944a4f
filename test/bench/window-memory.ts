import 'reflect-metadata';
import { parseArgs } from 'node:util';
import { OrchestratorService } from 'nest-prompt-orchestrator';
import { lowLevelCalls } from 'nest-prompt-orchestrator/low-level';

/**
 * Pushes N distinct requests through the dedup pipeline in-process (OrchestratorService.run, the engine
 * behind the route decorators) with the default answer window (10 000 entries, 5 min), sampling the
 * resident memory every K requests. Prints one JSON object on stdout. Run with --expose-gc so each sample
 * is taken after a full collection (what the process really holds, not garbage not yet collected).
 */
export interface WindowMemorySample {
  requests: number;
  rssMb: number;
  heapUsedMb: number;
  elapsedMs: number;
}

export interface WindowMemoryReport {
  count: number;
  every: number;
  concurrency: number;
  windowEntries: number;
  answerBytes: number;
  baseline: WindowMemorySample;
  samples: WindowMemorySample[];
  outcomes: Record<'miss' | 'joined' | 'cached', number>;
  gcExposed: boolean;
}

const MB = 1024 * 1024;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      count: { type: 'string', default: '1000000' },
      every: { type: 'string', default: '50000' },
      concurrency: { type: 'string', default: '500' },
    },
  });
  const count = Number(values.count);
  const every = Number(values.every);
  const concurrency = Number(values.concurrency);
  const gc = (globalThis as { gc?: () => void }).gc;
  const started = performance.now();
  const sample = (requests: number): WindowMemorySample => {
    gc?.();
    const usage = process.memoryUsage();
    return {
      requests,
      rssMb: Math.round((usage.rss / MB) * 10) / 10,
      heapUsedMb: Math.round((usage.heapUsed / MB) * 10) / 10,
      elapsedMs: Math.round(performance.now() - started),
    };
  };

  // Defaults everywhere: the window keeps at most 10 000 answers for 5 minutes.
  const orchestrator = new OrchestratorService({});
  const keys = lowLevelCalls(orchestrator);
  const answerFor = (i: number) => ({
    id: `chatcmpl-mem-${i}`,
    object: 'chat.completion',
    created: 1_700_000_000,
    model: 'mock-model',
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: `Echo: memory prompt number ${i}, answered with a sentence of ordinary length.`,
        },
        finish_reason: 'stop',
      },
    ],
    usage: { prompt_tokens: 12, completion_tokens: 14, total_tokens: 26 },
  });
  const answerBytes = JSON.stringify(answerFor(0)).length;
  const baseline = sample(0);
  const samples: WindowMemorySample[] = [];

  let next = 0;
  const worker = async () => {
    while (next < count) {
      const i = next++;
      const key = keys.dedupKey({
        method: 'POST',
        url: '/v1/chat/completions',
        body: { model: 'mock-model', messages: [{ role: 'user', content: `Memory prompt #${i}` }] },
        credential: 'Bearer sk-bench-0000',
      });
      await orchestrator.run({ key, dedup: true }, async () => answerFor(i));
      if ((i + 1) % every === 0) samples.push(sample(i + 1));
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const report: WindowMemoryReport = {
    count,
    every,
    concurrency,
    windowEntries: 10_000,
    answerBytes,
    baseline,
    samples: samples.sort((a, b) => a.requests - b.requests),
    outcomes: orchestrator.health().dedup,
    gcExposed: gc !== undefined,
  };
  process.stdout.write(`${JSON.stringify(report)}\n`);
  await orchestrator.close();
}

main().catch((error: unknown) => {
  process.stderr.write(`window-memory: ${(error as Error)?.stack ?? String(error)}\n`);
  process.exitCode = 1;
});
