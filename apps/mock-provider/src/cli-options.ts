import { parseArgs } from 'node:util';
import { DEFAULT_MODE_OPTIONS, DEFAULT_TUNING, MAX_DELAY_MS } from './mock-config.js';
import { isMockMode, MOCK_MODES, type MockModeOptions, type MockProviderOptions } from './mock-provider.types.js';

export class CliUsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CliUsageError';
  }
}

type ValueKind = 'port' | 'ms' | 'count' | 'mode' | 'text' | 'switch';

interface FlagSpec {
  flag: string;
  env: string;
  kind: ValueKind;
  help: string;
}

const FLAGS: readonly FlagSpec[] = [
  { flag: 'port', env: 'MOCK_PORT', kind: 'port', help: 'port to listen on; 0 picks a free one (default 0)' },
  { flag: 'host', env: 'MOCK_HOST', kind: 'text', help: 'address to bind (default 127.0.0.1)' },
  {
    flag: 'latency',
    env: 'MOCK_LATENCY_MS',
    kind: 'ms',
    help: `ms before the first byte of each answer (default ${DEFAULT_TUNING.latencyMs})`,
  },
  {
    flag: 'jitter',
    env: 'MOCK_JITTER_MS',
    kind: 'ms',
    help: `uniform extra latency 0..N ms (default ${DEFAULT_TUNING.latencyJitterMs})`,
  },
  {
    flag: 'chunk-delay',
    env: 'MOCK_CHUNK_DELAY_MS',
    kind: 'ms',
    help: `ms between streamed chunks (default ${DEFAULT_TUNING.streamChunkDelayMs})`,
  },
  {
    flag: 'capacity',
    env: 'MOCK_CAPACITY',
    kind: 'count',
    help: 'calls served at the base latency; beyond it latency grows with the calls in flight (default 0: no limit)',
  },
  { flag: 'mode', env: 'MOCK_MODE', kind: 'mode', help: `${MOCK_MODES.join(' | ')} (default ok)` },
  { flag: 'model', env: 'MOCK_MODEL', kind: 'text', help: `model name to report (default ${DEFAULT_TUNING.model})` },
  {
    flag: 'slow-chunk-delay',
    env: 'MOCK_SLOW_CHUNK_DELAY_MS',
    kind: 'ms',
    help: `chunk gap in slowStream mode (default ${DEFAULT_MODE_OPTIONS.slowChunkDelayMs})`,
  },
  {
    flag: 'cut-after',
    env: 'MOCK_CUT_AFTER_CHUNKS',
    kind: 'count',
    help: `chunks sent before the cut in cutStream, truncStream and errorStream modes (default ${DEFAULT_MODE_OPTIONS.cutAfterChunks})`,
  },
  {
    flag: 'retry-after',
    env: 'MOCK_RETRY_AFTER_S',
    kind: 'count',
    help: 'retry-after seconds on error503 answers (default none)',
  },
  {
    flag: 'fixed-answers',
    env: 'MOCK_FIXED_ANSWERS',
    kind: 'count',
    help: 'benchmarks: one prepared answer for every OpenAI model call, its request never parsed; a stream has N events (default 0: off)',
  },
  {
    flag: 'event-interval-ms',
    env: 'MOCK_EVENT_INTERVAL_MS',
    kind: 'ms',
    help: 'benchmarks, with --fixed-answers: a stream written --events-per-write events at a time, N ms apart, instead of in one write (default 0)',
  },
  {
    flag: 'events-per-write',
    env: 'MOCK_EVENTS_PER_WRITE',
    kind: 'count',
    help: 'events per write of a spaced fixed stream (see --event-interval-ms; default 1)',
  },
  {
    flag: 'require-key',
    env: 'MOCK_REQUIRE_KEY',
    kind: 'switch',
    help: 'true: model and model-list calls without a key (Bearer or x-api-key) answer 401, as the real APIs do (default false)',
  },
];

export type CliCommand = { kind: 'help' } | { kind: 'run'; options: MockProviderOptions };

export function usage(): string {
  const width = Math.max(...FLAGS.map((f) => f.flag.length)) + 10;
  const lines = FLAGS.map((f) => `  --${`${f.flag} <value>`.padEnd(width)} ${f.help} [env ${f.env}]`);
  return [
    'Usage: node dist/apps/mock-provider/src/main.js [options]',
    '',
    'Simulated OpenAI / Anthropic / llama.cpp provider for tests, demos and benchmarks.',
    'Flags override environment variables. Control API under /__mock/ (stats, calls, config, mode, reset).',
    '',
    'Options:',
    ...lines,
    `  --${'help'.padEnd(width)} print this text`,
    '',
  ].join('\n');
}

function convert(spec: FlagSpec, raw: string, source: string): number | string {
  const fail = (expected: string): never => {
    throw new CliUsageError(`invalid value for ${source}: '${raw}' (expected ${expected})`);
  };
  switch (spec.kind) {
    case 'switch':
      return raw === 'true' || raw === 'false' ? raw : fail('true or false');
    case 'text':
      return raw !== '' ? raw : fail('a non-empty string');
    case 'mode':
      return isMockMode(raw) ? raw : fail(`one of ${MOCK_MODES.join(', ')}`);
    case 'port': {
      const port = /^\d+$/.test(raw) ? Number(raw) : NaN;
      return Number.isInteger(port) && port <= 65535 ? port : fail('an integer from 0 to 65535');
    }
    case 'count':
      return /^\d+$/.test(raw) && Number.isSafeInteger(Number(raw)) ? Number(raw) : fail('a non-negative integer');
    case 'ms':
      return /^\d+(\.\d+)?$/.test(raw) && Number(raw) <= MAX_DELAY_MS
        ? Number(raw)
        : fail('a non-negative number of milliseconds');
  }
}

/** Pure: reads argv (without node and script) and the environment, throws CliUsageError on bad input. */
export function parseCli(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): CliCommand {
  let values: Record<string, string | boolean | undefined>;
  try {
    const parsed = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        help: { type: 'boolean', short: 'h' },
        ...Object.fromEntries(FLAGS.map((f) => [f.flag, { type: 'string' as const }])),
      },
    });
    values = parsed.values;
  } catch (error) {
    throw new CliUsageError(error instanceof Error ? error.message : String(error));
  }
  if (values.help === true) return { kind: 'help' };

  const read = new Map<string, number | string>();
  for (const spec of FLAGS) {
    const fromFlag = values[spec.flag];
    const fromEnv = env[spec.env];
    if (typeof fromFlag === 'string') read.set(spec.flag, convert(spec, fromFlag, `--${spec.flag}`));
    else if (fromEnv !== undefined && fromEnv !== '') read.set(spec.flag, convert(spec, fromEnv, spec.env));
  }

  const options: MockProviderOptions = {};
  const modeOptions: MockModeOptions = {};
  for (const [flag, value] of read) {
    switch (flag) {
      case 'port':
        options.port = value as number;
        break;
      case 'host':
        options.host = value as string;
        break;
      case 'latency':
        options.latencyMs = value as number;
        break;
      case 'jitter':
        options.latencyJitterMs = value as number;
        break;
      case 'chunk-delay':
        options.streamChunkDelayMs = value as number;
        break;
      case 'capacity':
        options.capacity = value as number;
        break;
      case 'mode':
        options.mode = value as MockProviderOptions['mode'];
        break;
      case 'model':
        options.model = value as string;
        break;
      case 'slow-chunk-delay':
        modeOptions.slowChunkDelayMs = value as number;
        break;
      case 'cut-after':
        modeOptions.cutAfterChunks = value as number;
        break;
      case 'retry-after':
        modeOptions.retryAfterSeconds = value as number;
        break;
      case 'fixed-answers':
        options.fixedAnswerEvents = value as number;
        break;
      case 'event-interval-ms':
        options.fixedEventIntervalMs = value as number;
        break;
      case 'events-per-write':
        options.fixedEventsPerWrite = value as number;
        break;
      case 'require-key':
        options.requireKey = value === 'true';
        break;
    }
  }
  if (Object.keys(modeOptions).length > 0) options.modeOptions = modeOptions;
  return { kind: 'run', options };
}
