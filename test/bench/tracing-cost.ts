import * as api from '@opentelemetry/api';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  type ReadableSpan,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base';
import { Orchestrator, RequestTracing, type RequestSpan } from 'nest-prompt-orchestrator';
import { table } from './report.js';

/**
 * What tracing costs per request, in the engine alone (no HTTP: the cost is
 * small beside a request's, so it is measured where nothing else hides it):
 * `Orchestrator.run` under a policy with dedup, a breaker and a limit, with
 * tracing off (no `tracing` option: what every app gets by default), with
 * `@opentelemetry/api` but no SDK (the no-op spans), and with the SDK
 * recording every span into a batch that an exporter drops.
 */

export type TracingVariant = 'before' | 'off' | 'api-no-sdk' | 'sdk-recording';

export interface TracingCostRow {
  variant: TracingVariant;
  /** Distinct requests: each leads its own call (server span, client span). */
  leaderUs: number;
  /** A herd of 10 identical requests: 1 leads, 9 join (9 links), per request. */
  herdUs: number;
}

export interface TracingCostResult {
  rows: TracingCostRow[];
  rounds: number;
}

const VARIANTS: TracingVariant[] = ['off', 'api-no-sdk', 'sdk-recording'];

/** The engine as an older build has it (`before`): its `Orchestrator`, to compare the default path with the code before tracing. */
type EngineModule = { Orchestrator: typeof Orchestrator };

/** An exporter that keeps nothing: what is measured is the recording and batching, not a network. */
const DROP: SpanExporter = {
  export: (_spans: ReadableSpan[], done) => done({ code: 0 }),
  shutdown: async () => undefined,
};

function setUp(variant: TracingVariant, before: EngineModule | undefined) {
  const provider =
    variant === 'sdk-recording'
      ? new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(DROP, { maxQueueSize: 65_536 })] })
      : undefined;
  const tracing =
    variant === 'off' || variant === 'before'
      ? undefined
      : new RequestTracing(api, provider ? { tracerProvider: provider } : {});
  const Engine = variant === 'before' ? before!.Orchestrator : Orchestrator;
  const orchestrator = new Engine(tracing ? { tracing } : {});
  const policy = orchestrator.policy({ dedup: true, breaker: 'llm', concurrency: 64 });
  const headers = { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' };
  const attributes = {
    'gen_ai.system': 'openai',
    'gen_ai.operation.name': 'chat',
    'gen_ai.request.model': 'gpt-bench',
  };
  let n = 0;
  const work = async () => 'answer';
  const request = async (key: string) => {
    const span: RequestSpan | undefined = tracing?.startServerSpan('POST /v1/chat/completions', headers, attributes);
    await orchestrator.run(policy, work, { key, trace: span });
    span?.end(200);
  };
  return {
    leader: () => request(`distinct ${n++}`),
    herd: () => {
      const key = `herd ${n++}`;
      return Promise.all(Array.from({ length: 10 }, () => request(key)));
    },
    close: async () => {
      await orchestrator.close();
      await provider?.shutdown();
    },
  };
}

/**
 * Mean CPU µs (user + system) per call of `fn` over at least `budgetMs`, after
 * a warm-up: CPU time, not wall time, so that other processes on a shared
 * machine change the numbers little.
 */
async function time(fn: () => Promise<unknown>, budgetMs: number, perCall = 1): Promise<number> {
  for (let i = 0; i < 200; i++) await fn();
  let iterations = 0;
  const start = performance.now();
  const cpu = process.cpuUsage();
  while (performance.now() - start < budgetMs || iterations < 20) {
    await fn();
    iterations++;
  }
  const used = process.cpuUsage(cpu);
  return (used.user + used.system) / (iterations * perCall);
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/**
 * Rounds interleave the variants, each round starting with another one (what
 * a round leaves to the garbage collector lands on the next variant), so that
 * a busy neighbour slows all of them alike; each row is the median round.
 * `beforePath`: an older build of the package's ES module entry (e.g. from
 * `git archive` of an earlier commit), measured as the `before` row.
 */
export async function runTracingCost(
  rounds = 7,
  budgetMs = 400,
  beforePath = process.env.TRACING_BENCH_BEFORE,
): Promise<TracingCostResult> {
  const before = beforePath ? ((await import(beforePath)) as EngineModule) : undefined;
  const variants: TracingVariant[] = before ? ['before', ...VARIANTS] : VARIANTS;
  const samples = new Map<TracingVariant, { leader: number[]; herd: number[] }>(
    variants.map((v) => [v, { leader: [], herd: [] }]),
  );
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < variants.length; i++) {
      const variant = variants[(round + i) % variants.length];
      const bench = setUp(variant, before);
      samples.get(variant)!.leader.push(await time(bench.leader, budgetMs));
      samples.get(variant)!.herd.push(await time(bench.herd, budgetMs, 10));
      await bench.close();
    }
  }
  return {
    rounds,
    rows: variants.map((variant) => ({
      variant,
      leaderUs: median(samples.get(variant)!.leader),
      herdUs: median(samples.get(variant)!.herd),
    })),
  };
}

export function tracingCostTable(result: TracingCostResult): string {
  const off = result.rows.find((r) => r.variant === 'off')!;
  const rows = result.rows.map((r) => [
    r.variant,
    r.leaderUs.toFixed(2),
    `+${(r.leaderUs - off.leaderUs).toFixed(2)}`,
    r.herdUs.toFixed(2),
    `+${(r.herdUs - off.herdUs).toFixed(2)}`,
  ]);
  return [
    '== tracing: per-request cost in the engine (Orchestrator.run: dedup, breaker, limit; trivial work)',
    table(['tracing', 'leader CPU us/request', 'vs off', 'herd of 10 CPU us/request', 'vs off'], rows),
    `   median of ${result.rounds} interleaved rounds; before = the engine before tracing (TRACING_BENCH_BEFORE); off = no tracing option (the default); api-no-sdk = RequestTracing without an SDK` +
      ' (no-op spans); sdk-recording = BasicTracerProvider + BatchSpanProcessor, spans dropped by the exporter.',
  ].join('\n');
}
