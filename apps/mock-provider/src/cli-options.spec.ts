import { describe, expect, it } from '@jest/globals';
import { CliUsageError, parseCli, usage } from './cli-options.js';

describe('parseCli', () => {
  it('reads every flag', () => {
    const command = parseCli(
      [
        '--port',
        '18081',
        '--latency',
        '1500',
        '--jitter',
        '0',
        '--chunk-delay=5',
        '--mode',
        'slowStream',
        '--host',
        '0.0.0.0',
        '--model',
        'm1',
        '--slow-chunk-delay',
        '250',
        '--cut-after',
        '3',
        '--retry-after',
        '2',
      ],
      {},
    );
    expect(command).toEqual({
      kind: 'run',
      options: {
        port: 18081,
        latencyMs: 1500,
        latencyJitterMs: 0,
        streamChunkDelayMs: 5,
        mode: 'slowStream',
        host: '0.0.0.0',
        model: 'm1',
        modeOptions: { slowChunkDelayMs: 250, cutAfterChunks: 3, retryAfterSeconds: 2 },
      },
    });
  });

  it('falls back to environment variables, flags winning', () => {
    const command = parseCli(['--latency', '10'], {
      MOCK_PORT: '9000',
      MOCK_LATENCY_MS: '99',
      MOCK_JITTER_MS: '3',
      MOCK_CHUNK_DELAY_MS: '7',
      MOCK_MODE: 'hang',
      MOCK_HOST: '',
    });
    expect(command).toEqual({
      kind: 'run',
      options: { port: 9000, latencyMs: 10, latencyJitterMs: 3, streamChunkDelayMs: 7, mode: 'hang' },
    });
  });

  it('returns defaults when nothing is given', () => {
    expect(parseCli([], {})).toEqual({ kind: 'run', options: {} });
  });

  it('recognises --help and -h', () => {
    expect(parseCli(['--help'], {})).toEqual({ kind: 'help' });
    expect(parseCli(['-h', '--port', 'junk'], {})).toEqual({ kind: 'help' });
    expect(usage()).toContain('--chunk-delay');
    expect(usage()).toContain('MOCK_LATENCY_MS');
  });

  it.each([
    [['--bogus']],
    [['--port', '70000']],
    [['--port', '-1']],
    [['--latency', 'fast']],
    [['--latency', '-5']],
    [['--mode', 'sideways']],
    [['--cut-after', '1.5']],
    [['--port']],
    [['positional']],
  ])('rejects %j', (argv) => {
    expect(() => parseCli(argv, {})).toThrow(CliUsageError);
  });

  it('reads --require-key true|false, and refuses anything else', () => {
    expect(parseCli(['--require-key', 'true'], {})).toEqual({ kind: 'run', options: { requireKey: true } });
    expect(parseCli([], { MOCK_REQUIRE_KEY: 'false' })).toEqual({ kind: 'run', options: { requireKey: false } });
    expect(() => parseCli(['--require-key', 'yes'], {})).toThrow(/true or false/);
  });

  it('names the environment variable in errors from it', () => {
    expect(() => parseCli([], { MOCK_LATENCY_MS: 'x' })).toThrow(/MOCK_LATENCY_MS/);
  });
});
