import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import {
  ConfigError,
  defaultMaxConnections,
  helpText,
  parseGatewayConfig,
} from '../../apps/gateway/src/config/gateway-config.js';
import { startMockProvider, type MockProvider } from '../../apps/mock-provider/src/index.js';
import { serverOptions } from '../../apps/gateway/src/http/http-server.js';
import { GATEWAY_MAIN, ROOT, ensureBuilt } from '../support/gateway-process.js';
import { ownChild } from '../support/children.js';

/**
 * The gateway's command line: the parser directly for most cases, and the
 * built bundle (`node dist/gateway/main.js`, as `npm start`) for what only a real
 * process shows: --help output, exit code 2 with a message on bad input, and
 * a real start.
 */

const MAIN = GATEWAY_MAIN;

const FLAGS = [
  '--provider',
  '--upstream',
  '--host',
  '--port',
  '--platform',
  '--workers',
  '--concurrency',
  '--tenant-concurrency',
  '--no-fair-queue',
  '--queue-size',
  '--queue-timeout',
  '--timeout',
  '--dedup-window',
  '--no-dedup',
  '--no-window-for-sampled',
  '--breaker-failures',
  '--breaker-open',
  '--probe-interval',
  '--retries',
  '--max-body',
  '--request-timeout',
  '--max-connections',
  '--max-connections-per-address',
  '--body-timeout',
  '--keep-alive-timeout',
  '--shutdown-grace',
  '--window-max-bytes',
  '--redis',
  '--redis-prefix',
  '--redis-timeout',
  '--gateway-keys',
  '--keys-file',
  '--requests-per-minute',
  '--tokens-per-minute',
  '--rate-window',
  '--prices',
  '--max-spend',
  '--spend-file',
  '--no-stream-usage',
  '--request-log',
  '--request-log-max-bytes',
  '--request-log-files',
  '--metrics-path',
  '--no-metrics',
  '--metrics-tenants',
  '--log-level',
  '--log-format',
  '--no-request-log',
  '--log-prompts',
  '--status-path',
  '--no-status-page',
  '--ready-requires-store',
  '--help',
];

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function runGateway(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [MAIN, ...args],
      { cwd: ROOT, env: { PATH: process.env.PATH, ...env }, timeout: 20_000 },
      (error, stdout, stderr) => {
        const code = error ? ((error as { code?: unknown }).code as number | null) : 0;
        resolve({ code: typeof code === 'number' ? code : null, stdout, stderr });
      },
    );
    ownChild(child, 'gateway (CLI run)');
  });
}

function configError(argv: string[], env: NodeJS.ProcessEnv = {}): ConfigError {
  try {
    parseGatewayConfig(argv, env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error(`expected ${argv.join(' ')} to be refused`);
}

describe('parseGatewayConfig', () => {
  it('takes several upstreams: --upstream repeated, or a comma list in the environment', () => {
    const flags = parseGatewayConfig(
      ['--provider', 'llama', '--upstream', 'http://127.0.0.1:8080/', '--upstream', 'http://127.0.0.1:8081'],
      {},
    );
    expect(flags).toMatchObject({
      upstream: 'http://127.0.0.1:8080',
      upstreams: ['http://127.0.0.1:8080', 'http://127.0.0.1:8081'],
    });
    const env = parseGatewayConfig(['--provider', 'llama'], { LLAMA_CPP_URL: 'http://a:1, http://b:2' });
    expect(env?.upstreams).toEqual(['http://a:1', 'http://b:2']);
    expect(() => parseGatewayConfig(['--upstream', 'http://a:1', '--upstream', 'http://a:1/'], {})).toThrow(
      /same URL twice/,
    );
  });

  it('has working defaults', () => {
    expect(parseGatewayConfig([], {})).toEqual({
      provider: 'openai',
      upstream: 'https://api.openai.com/v1',
      upstreams: ['https://api.openai.com/v1'],
      host: '127.0.0.1',
      port: 18080,
      platform: 'fastify',
      trustProxy: false,
      workers: 1,
      concurrency: 512,
      adaptiveConcurrency: true,
      keepAbandoned: false,
      healthIntervalMs: 1_000,
      holdUnavailableMs: 5_000,
      tenantConcurrency: undefined,
      fairQueue: true,
      queueSize: 1000,
      queueTimeoutMs: 60_000,
      timeoutMs: 60_000,
      dedup: true,
      dedupWindowMs: 300_000,
      windowForSampled: true,
      breakerFailures: 5,
      breakerOpenMs: 30_000,
      probeIntervalMs: 500,
      retries: 1,
      maxBodyBytes: 10 * 1024 * 1024,
      requestTimeoutMs: 30_000,
      maxConnections: defaultMaxConnections(),
      maxConnectionsPerAddress: Math.floor(defaultMaxConnections() / 2),
      loopbackLimited: false,
      bodyTimeoutMs: 10_000,
      shutdownGraceMs: 30_000,
      keepAliveTimeoutMs: 65_000,
      windowMaxBytes: 256 * 1024 * 1024,
      inFlightMaxBytes: 4 * 1024 * 1024,
      redisUrl: undefined,
      redisTimeoutMs: 500,
      redisPrefix: 'npo',
      limitsWithoutRedis: 'share',
      gatewayKeys: [],
      providerKey: undefined,
      budgets: {
        rateWindowMs: 60_000,
        streamUsage: true,
        requestLogMaxBytes: 50 * 1024 * 1024,
        requestLogFiles: 5,
        reserveOutputTokens: 4096,
      },
      observability: {
        metricsPath: '/orchestrator/metrics',
        metricsTenants: false,
        logLevel: 'info',
        logFormat: process.stdout.isTTY ? 'pretty' : 'json',
        requestLog: true,
        logPrompts: false,
        statusPath: '/orchestrator',
        statusPublic: false,
        readyRequiresStore: false,
        serviceName: 'nest-prompt-orchestrator-gateway',
      },
    });
  });

  it('reads --max-connections-per-address (half the table by default, loopback bound only when given) and --body-timeout', () => {
    expect(parseGatewayConfig(['--max-connections', '200'], {})).toMatchObject({
      maxConnectionsPerAddress: 100,
      loopbackLimited: false,
      bodyTimeoutMs: 10_000,
    });
    expect(
      parseGatewayConfig([], { ORCHESTRATOR_MAX_CONNECTIONS_PER_ADDRESS: '7', ORCHESTRATOR_BODY_TIMEOUT_SECS: '0.5' }),
    ).toMatchObject({
      maxConnectionsPerAddress: 7,
      loopbackLimited: true,
      bodyTimeoutMs: 500,
    });
    expect(parseGatewayConfig(['--max-connections-per-address', '0', '--body-timeout', '0'], {})).toMatchObject({
      maxConnectionsPerAddress: 0,
      bodyTimeoutMs: 0,
    });
    expect(() => parseGatewayConfig(['--max-connections-per-address', '1.5'], {})).toThrow(/whole number/);
    expect(() => parseGatewayConfig(['--body-timeout=-1'], {})).toThrow(/--body-timeout must be at least 0/);
  });

  it('reads --hold-unavailable (seconds, 0 refusing at once) and its variable, and refuses a negative one', () => {
    expect(parseGatewayConfig(['--hold-unavailable', '0'], {})?.holdUnavailableMs).toBe(0);
    expect(parseGatewayConfig(['--hold-unavailable', '2.5'], {})?.holdUnavailableMs).toBe(2_500);
    expect(parseGatewayConfig([], { ORCHESTRATOR_HOLD_UNAVAILABLE_SECS: '12' })?.holdUnavailableMs).toBe(12_000);
    expect(() => parseGatewayConfig(['--hold-unavailable=-1'], {})).toThrow(/--hold-unavailable must be at least 0/);
  });

  it("keeps idle client connections open for --keep-alive-timeout (65 s by default, not Node's 5 s)", () => {
    const defaults = parseGatewayConfig([], {})!;
    expect(serverOptions(defaults).keepAliveTimeout).toBe(65_000);
    expect(serverOptions(parseGatewayConfig(['--keep-alive-timeout', '10'], {})!).keepAliveTimeout).toBe(10_000);
    expect(
      serverOptions(parseGatewayConfig([], { ORCHESTRATOR_KEEP_ALIVE_TIMEOUT_SECS: '90' })!).keepAliveTimeout,
    ).toBe(90_000);
    expect(() => parseGatewayConfig(['--keep-alive-timeout', 'soon'], {})).toThrow(ConfigError);
  });

  it('reads the observability flags and their variables', () => {
    const config = parseGatewayConfig(
      [
        '--metrics-path',
        '/internal/metrics',
        '--metrics-tenants',
        '--log-level',
        'warn',
        '--no-request-log',
        '--log-prompts',
        '--no-status-page',
      ],
      { ORCHESTRATOR_LOG_FORMAT: 'pretty', ORCHESTRATOR_READY_REQUIRES_STORE: '1' },
    );
    expect(config?.observability).toEqual({
      metricsPath: '/internal/metrics',
      metricsTenants: true,
      logLevel: 'warn',
      logFormat: 'pretty',
      requestLog: false,
      logPrompts: true,
      statusPath: undefined,
      statusPublic: false,
      readyRequiresStore: true,
      serviceName: 'nest-prompt-orchestrator-gateway',
    });
    expect(parseGatewayConfig(['--no-metrics', '--status-path', '/ops/status'], {})?.observability).toMatchObject({
      metricsPath: undefined,
      statusPath: '/ops/status',
    });
  });

  it('turns tracing on with --otlp-endpoint or the standard OTEL_* variables, off by default', () => {
    const traces = (argv: string[], env: NodeJS.ProcessEnv) =>
      parseGatewayConfig(argv, env)?.observability.otlpTracesUrl;
    expect(traces([], {})).toBeUndefined();
    expect(traces(['--otlp-endpoint', 'http://127.0.0.1:4318'], {})).toBe('http://127.0.0.1:4318/v1/traces');
    expect(traces(['--otlp-endpoint', 'http://127.0.0.1:4318/v1/traces'], {})).toBe('http://127.0.0.1:4318/v1/traces');
    expect(traces([], { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toBe(
      'http://collector:4318/v1/traces',
    );
    expect(
      traces([], {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://tempo:4318/otlp',
      }),
    ).toBe('http://tempo:4318/otlp');
    expect(
      traces(['--otlp-endpoint', 'http://a:4318'], { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://b:4318/x' }),
    ).toBe('http://a:4318/v1/traces');
    expect(traces(['--otlp-endpoint', 'http://a:4318'], { OTEL_SDK_DISABLED: 'true' })).toBeUndefined();
    expect(traces([], { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_TRACES_EXPORTER: 'none' })).toBeUndefined();
    expect(parseGatewayConfig([], { OTEL_SERVICE_NAME: 'edge' })?.observability.serviceName).toBe('edge');
    expect(() => parseGatewayConfig(['--otlp-endpoint', 'grpc://a:4317'], {})).toThrow(
      /--otlp-endpoint must be an http\(s\) URL/,
    );
  });

  it('reads the budget flags, and refuses bad ones naming the problem', () => {
    const config = parseGatewayConfig(
      [
        '--requests-per-minute',
        '60',
        '--tokens-per-minute',
        '1000',
        '--rate-window',
        '10',
        '--max-spend',
        '$25/day',
        '--no-stream-usage',
        '--request-log',
        '/tmp/r.jsonl',
      ],
      { ORCHESTRATOR_KEYS: '{"sk-cli-test-key": {"name": "cli"}}' },
    )!;
    expect(config.budgets).toMatchObject({
      requestsPerWindow: 60,
      tokensPerWindow: 1000,
      rateWindowMs: 10_000,
      maxSpend: { usd: 25, period: 'day' },
      streamUsage: false,
      requestLog: '/tmp/r.jsonl',
      keysJson: '{"sk-cli-test-key": {"name": "cli"}}',
    });
    expect(configError(['--max-spend', '25']).message).toContain('--max-spend must look like 50/day or 1000/month');
    expect(configError(['--requests-per-minute', '0']).message).toContain(
      '--requests-per-minute must be a whole number',
    );
    expect(configError(['--rate-window', '-1']).message).toContain('--rate-window');
    expect(configError(['--keys-file', '/nonexistent/keys.json']).message).toBe(
      '--keys-file: /nonexistent/keys.json: cannot be read (ENOENT)',
    );
    expect(configError([], { ORCHESTRATOR_KEYS: '{"short": {"name": "x"}}' }).message).toBe(
      'ORCHESTRATOR_KEYS: entry 1: a key must be at least 8 characters',
    );
    expect(configError(['--prices', '/nonexistent/prices.json']).message).toContain('cannot be read (ENOENT)');
  });

  it('reads flags, then the environment; a flag beats its variable', () => {
    const config = parseGatewayConfig(
      ['--provider', 'llama', '--port', '9000', '--timeout', '1.5', '--no-dedup', '--gateway-keys', 'k1, k2,'],
      {
        LLAMA_CPP_URL: 'http://10.0.0.2:8080/',
        ORCHESTRATOR_PORT: '1234',
        ORCHESTRATOR_DEDUP_SECS: '7',
        LLAMA_API_KEY: 'lk',
      },
    )!;
    expect(config).toMatchObject({
      provider: 'llama',
      upstream: 'http://10.0.0.2:8080',
      port: 9000,
      timeoutMs: 1500,
      dedup: false,
      dedupWindowMs: 7000,
      gatewayKeys: ['k1', 'k2'],
      providerKey: 'lk',
    });
    expect(
      parseGatewayConfig(['--provider', 'anthropic'], { ANTHROPIC_API_KEY: 'ak', OPENAI_API_KEY: 'ok' }),
    ).toMatchObject({
      upstream: 'https://api.anthropic.com',
      providerKey: 'ak',
    });
    expect(
      parseGatewayConfig([], { ORCHESTRATOR_NO_DEDUP: 'true', OPENAI_BASE_URL: 'http://vllm:8000/v1' }),
    ).toMatchObject({
      dedup: false,
      upstream: 'http://vllm:8000/v1',
    });
    expect(parseGatewayConfig(['--redis', 'redis://127.0.0.1:6379'], {})?.redisUrl).toBe('redis://127.0.0.1:6379');
  });

  it('returns undefined for --help, and the help text names every flag', () => {
    expect(parseGatewayConfig(['--help'], {})).toBeUndefined();
    const help = helpText();
    for (const flag of FLAGS) expect(help).toContain(flag);
  });

  it.each([
    [['--bogus'], /--bogus/],
    [['--port', 'abc'], /--port/],
    [['--port', '70000'], /--port/],
    [['--port', '1.5'], /--port/],
    [['--timeout', '-1'], /--timeout/],
    [['--timeout=-1'], /--timeout must be at least/],
    [['--timeout', '0'], /--timeout/],
    [['--provider', 'nope'], /--provider must be openai, llama or anthropic, got "nope"/],
    [['--platform', 'koa'], /--platform/],
    [['--concurrency', '0'], /--concurrency/],
    [['--upstream', 'not a url'], /--upstream/],
    [['--upstream', 'ftp://x'], /--upstream/],
    [['--redis', 'http://127.0.0.1:6379'], /--redis/],
    [['--max-body', '10'], /--max-body/],
    [['--retries', 'many'], /--retries/],
    [['stray-positional'], /stray-positional|positional/i],
    [['--log-level', 'loud'], /--log-level must be/],
    [['--log-format', 'xml'], /--log-format must be json or pretty/],
    [['--metrics-path', 'metrics'], /--metrics-path must look like/],
    [['--metrics-path', '/v1/metrics'], /--metrics-path must not be under \/v1/],
    [['--status-path', '/a b'], /--status-path must look like/],
    [['--metrics-path', '/orchestrator/events'], /is a route of the status page/],
  ])('refuses %j with a message naming the problem', (argv, message) => {
    expect(configError(argv).message).toMatch(message);
  });

  it('refuses bad environment values, naming the flag they stand for', () => {
    expect(configError([], { ORCHESTRATOR_PORT: 'abc' }).message).toMatch(/--port/);
    expect(configError([], { ORCHESTRATOR_PROVIDER: 'nope' }).message).toMatch(/--provider/);
    expect(configError([], { ORCHESTRATOR_TIMEOUT_SECS: '-5' }).message).toMatch(/--timeout/);
  });
});

describe('the gateway binary', () => {
  beforeAll(ensureBuilt, 180_000);

  it('--help prints every flag and exits 0', async () => {
    const run = await runGateway(['--help']);
    expect(run.code).toBe(0);
    expect(run.stdout.trim()).toBe(helpText());
    for (const flag of FLAGS) expect(run.stdout).toContain(flag);
    expect(run.stderr).toBe('');
  });

  it.each([
    [['--bogus'], '--bogus'],
    [['--port', 'abc'], '--port'],
    [['--timeout', '-1'], '--timeout'],
    [['--timeout=-1'], '--timeout'],
    [['--provider', 'nope'], '--provider'],
  ])('%j exits with code 2 and a message naming %s, without a stack trace', async (args, flag) => {
    const run = await runGateway(args);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain(flag);
    expect(run.stderr).toMatch(/^gateway: /);
    expect(run.stderr).not.toMatch(/\n\s+at /);
    expect(run.stdout).toBe('');
  });

  it('a bad environment value stops start-up the same way', async () => {
    const run = await runGateway([], { ORCHESTRATOR_PORT: 'abc' });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('--port');
  });

  describe('a real start', () => {
    let provider: MockProvider;
    let child: ChildProcess | undefined;
    beforeAll(async () => {
      provider = await startMockProvider({ latencyMs: 5 });
    });
    afterAll(async () => {
      if (child && child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child!.once('exit', resolve));
        child.kill('SIGKILL');
        await exited;
      }
      await provider.close();
    });

    it('listens where it says it does, serves the SDK routes, never logs the provider key, and stops on SIGTERM', async () => {
      child = ownChild(
        spawn(process.execPath, [MAIN, '--port', '0', '--provider', 'llama', '--upstream', provider.url], {
          cwd: ROOT,
          env: { PATH: process.env.PATH, LLAMA_API_KEY: 'sk-secret-provider-key' },
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
        'gateway',
      );
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (b: Buffer) => (stdout += b.toString()));
      child.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
      const exited = new Promise<number | null>((resolve) => child!.once('exit', (code) => resolve(code)));

      // Generous: a Nest app booting on a saturated machine takes many seconds.
      const deadline = Date.now() + 60_000;
      let url: string | undefined;
      while (!url) {
        if (Date.now() > deadline || child.exitCode !== null)
          throw new Error(`gateway did not start:\n${stdout}\n${stderr}`);
        url = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout)?.[1];
        await new Promise((resolve) => setTimeout(resolve, 20)); // polling interval
      }
      expect(url).not.toMatch(/:0$/);
      const health = await fetch(`${url}/health`);
      expect(health.status).toBe(200);
      expect(await health.json()).toMatchObject({ status: 'ok', upstream: { provider: 'llama', breaker: 'closed' } });
      const completion = await fetch(`${url}/completion`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: 'from the binary' }),
      });
      expect(await completion.json()).toMatchObject({ content: 'Echo: from the binary', stop: true });

      child.kill('SIGTERM');
      const code = await exited;
      expect(code === 0 || code === null).toBe(true);
      expect(stdout + stderr).not.toContain('sk-secret-provider-key');
    }, 120_000);
  });
});
