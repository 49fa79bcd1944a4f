import { describe, expect, it } from '@jest/globals';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

// The package's public surface, as its declarations give it to users (members marked `@internal` are stripped from
// them). A name added here is a promise kept under semver; what only an embedder that starts calls itself needs (the
// gateway) goes to the low-level entry, `./low-level.ts`, kept small (see docs/low-level-api.md).
const src = dirname(fileURLToPath(import.meta.url));
const ENTRIES = {
  '.': 'index.ts',
  './core': 'core/index.ts',
  './fastify': 'fastify/index.ts',
  './express': 'express/index.ts',
  './throttler': 'throttler/index.ts',
  './low-level': 'low-level.ts',
} as const;

const program = ts.createProgram(
  Object.values(ENTRIES).map((file) => join(src, file)),
  {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    experimentalDecorators: true,
    strict: true,
    skipLibCheck: true,
    noEmit: true,
  },
);
const checker = program.getTypeChecker();

function exportsOf(file: string): ts.Symbol[] {
  const module = checker.getSymbolAtLocation(program.getSourceFile(join(src, file))!)!;
  return checker.getExportsOfModule(module);
}

/** The members of an exported class a user sees: public, not `@internal`. */
function publicMembers(entry: string, name: string): string[] {
  let symbol = exportsOf(entry).find((s) => s.name === name)!;
  if (symbol.flags & ts.SymbolFlags.Alias) symbol = checker.getAliasedSymbol(symbol);
  const declaration = symbol.declarations!.find(ts.isClassDeclaration)!;
  return declaration.members
    .filter((member) => member.name !== undefined && !ts.isPrivateIdentifier(member.name))
    .filter(
      (member) => !(ts.getCombinedModifierFlags(member) & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)),
    )
    .filter((member) => !ts.getJSDocTags(member).some((tag) => tag.tagName.text === 'internal'))
    .map((member) => member.name!.getText())
    .filter((name, index, all) => all.indexOf(name) === index)
    .sort();
}

const CORE = [
  'AdaptiveLimit',
  'AdaptiveLimitOptions',
  'BatchedHistogram',
  'BreakerCoordinator',
  'BreakerOptions',
  'BreakerSnapshot',
  'BreakerState',
  'BucketTally',
  'CircuitOpenError',
  'ClientClosedError',
  'Clock',
  'ConcurrencyOptions',
  'DEFAULT_ERROR_CODEC',
  'DedupOptions',
  'DedupOutcome',
  'DedupRequest',
  'ErrorBody',
  'ErrorCodec',
  'ErrorShape',
  'FailureRateOptions',
  'FlightCoordinator',
  'FlightOutgrownError',
  'FlightSnapshot',
  'HoldOutcome',
  'LimiterSnapshot',
  'MetricsRegistry',
  'NestErrorBody',
  'NoUpstreamAvailableError',
  'OpenAIErrorBody',
  'OrchestrateOptions',
  'Orchestrator',
  'OrchestratorConfigError',
  'OrchestratorError',
  'OrchestratorErrorCode',
  'OrchestratorHealth',
  'OrchestratorHooks',
  'OrchestratorMetrics',
  'OrchestratorMetricsOptions',
  'OrchestratorObserver',
  'OrchestratorOptions',
  'OverloadedError',
  'QueueTimeoutError',
  'RawResponse',
  'RedisCommands',
  'RedisCoordinator',
  'RedisCoordinatorOptions',
  'RedisSubscriber',
  'RefusalReason',
  'RemoteCallError',
  'RequestOutcome',
  'RequestSpan',
  'RequestTracing',
  'RequestTracingOptions',
  'RetryOptions',
  'RoutePolicy',
  'RunCall',
  'RunOptions',
  'SharedBreakerState',
  'ShuttingDownError',
  'SpanAttributeValue',
  'SpanAttributes',
  'StreamHead',
  'StreamedResponse',
  'StructuredLogger',
  'TRACE_ATTRIBUTES',
  'TalliedCounter',
  'Tally',
  'TimeoutOptions',
  'TraceHeaders',
  'Upstream',
  'UpstreamHealth',
  'UpstreamHold',
  'UpstreamMemberOptions',
  'UpstreamPool',
  'UpstreamPoolOptions',
  'UpstreamRegistry',
  'UpstreamResult',
  'UpstreamSnapshot',
  'UpstreamSpan',
  'UpstreamTimeoutError',
  'attachRequestSpan',
  'defaultShouldFailover',
  'errorBody',
  'errorHeaders',
  'isOrchestratorError',
  'isTransientFailure',
  'isUpstreamFailure',
  'logOrchestratorEvents',
  'parseTraceParent',
];
const NEST = [
  'CallSignal',
  'CallTimeout',
  'CircuitBreaker',
  'Concurrency',
  'Dedup',
  'Fallback',
  'FallbackAnswer',
  'HealthIndicatorResult',
  'HealthReport',
  'Orchestrate',
  'OrchestrateDecoratorOptions',
  'OrchestratorErrorPayload',
  'OrchestratorGraphQLError',
  'OrchestratorHealthOptions',
  'OrchestratorInterceptor',
  'OrchestratorModule',
  'OrchestratorModuleExtras',
  'OrchestratorModuleOptions',
  'OrchestratorObservabilityModule',
  'OrchestratorObservabilityOptions',
  'OrchestratorService',
  'ReadinessOptions',
  'Retry',
  'Timeout',
  'callSignalOf',
  'callUpstreamOf',
  'currentCallSignal',
  'livenessReport',
  'orchestratorErrorPayload',
  'orchestratorHttpException',
  'readinessReport',
];

// The low-level entry (at most 15 names): the call entry below `run()`, what calls are built with, the response sink,
// and the relay of coordinated calls, listed apart until its API settles.
const LOW_LEVEL = [
  'ByteKeeper',
  'CallEvent',
  'CallWork',
  'ChunkEvent',
  'FlowControl',
  'KeyTable',
  'LowLevelCalls',
  'ResponseSink',
  'SlotList',
  'StartedCall',
  'StreamHeadEvent',
  'lowLevelCalls',
];
const WIRE = ['RelayCoordinator', 'ipcRelay'];

describe('the public API', () => {
  it.each([
    ['.', [...CORE, ...NEST]],
    ['./core', CORE],
    [
      './fastify',
      [
        'FastifyOrchestratorOptions',
        'Orchestrator',
        'RawResponse',
        'StreamedResponse',
        'callSignalOf',
        'orchestratorOf',
        'orchestratorPlugin',
      ],
    ],
    [
      './express',
      [
        'ExpressMiddleware',
        'ExpressOrchestratorOptions',
        'ExpressRequestLike',
        'ExpressResponseLike',
        'Orchestrate',
        'OrchestratedHandler',
        'Orchestrator',
        'RawResponse',
        'StreamedResponse',
        'orchestrated',
      ],
    ],
    [
      './throttler',
      [
        'CountersUnavailableError',
        'MemoryWindowCounters',
        'RedisThrottlerStorage',
        'RedisThrottlerStorageOptions',
        'ThrottlerRedisClient',
        'WindowCount',
        'WindowCounters',
        'rateLimitErrorBody',
      ],
    ],
  ] as const)('%s exports what users need and nothing of the gateway', (entry, expected) => {
    const names = exportsOf(ENTRIES[entry])
      .map((s) => s.name)
      .sort();
    expect(names).toEqual([...expected].sort());
    for (const leaked of [
      'dedupKey',
      'hashIdentity',
      'openAIErrorBody',
      'startLocalCall',
      'startCall',
      'toWire',
      'lowLevelCalls',
      'KeyTable',
    ]) {
      expect(names).not.toContain(leaked);
    }
  });

  it('./low-level exports the call entry below run() and nothing else', () => {
    const names = exportsOf(ENTRIES['./low-level'])
      .map((s) => s.name)
      .sort();
    expect(names).toEqual([...LOW_LEVEL, ...WIRE].sort());
    expect(LOW_LEVEL.length + WIRE.length).toBeLessThanOrEqual(15);
  });

  it('LowLevelCalls holds the call entry points and the helpers calls are built with', () => {
    const members = (name: string) => {
      let symbol = exportsOf(ENTRIES['./low-level']).find((s) => s.name === name)!;
      if (symbol.flags & ts.SymbolFlags.Alias) symbol = checker.getAliasedSymbol(symbol);
      return checker
        .getDeclaredTypeOfSymbol(symbol)
        .getProperties()
        .map((p) => p.name)
        .sort();
    };
    expect(members('LowLevelCalls')).toEqual(
      [
        'answerLocal',
        'dedupKey',
        'hashIdentity',
        'keepWindowBytes',
        'keyHead',
        'noteClientGone',
        'peekLocal',
        'repeatedBodies',
        'reuseOf',
        'start',
        'startLocal',
        'toCallEvents',
        'withFallbacks',
      ].sort(),
    );
  });

  it('Orchestrator shows users its engine, not the entry points the adapters and the gateway use', () => {
    expect(publicMembers('core/index.ts', 'Orchestrator')).toEqual(
      [
        'breakerState',
        'close',
        'drain',
        'flightsInFlight',
        'health',
        'isClosing',
        'observe',
        'outcomes',
        'policy',
        'run',
        'tracing',
        'upstreams',
      ].sort(),
    );
  });
});
