import { describe, expect, it } from '@jest/globals';
import { Keyv } from 'keyv';
import { OrchestratorConfigError } from './options.js';
import { validateOrchestratorOptions as validateModuleOptions } from './orchestrator.js';
import { normalizeOrchestrate, type OrchestrateOptions } from './policy.js';

/** The OrchestratorConfigError thrown by `fn`; fails the test if none (or another error) is thrown. */
function configErrorOf(fn: () => unknown): OrchestratorConfigError {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(OrchestratorConfigError);
  return caught as OrchestratorConfigError;
}

describe('validateModuleOptions', () => {
  it('accepts no options, and sound ones', () => {
    expect(validateModuleOptions(undefined)).toEqual({});
    expect(validateModuleOptions({})).toEqual({});
    const options = {
      dedup: {
        windowMs: 1_000,
        cacheAnswers: false,
        maxEntries: 10,
        maxEntryBytes: 100,
        cancelWhenAbandoned: true,
        key: () => 'k',
      },
      breaker: {
        name: 'llm',
        failureThreshold: 3,
        openMs: 500,
        maxOpenMultiplier: 8,
        failureRate: { thresholdPercent: 50 },
        healthProbe: async () => true,
      },
      concurrency: { limit: 4, queueSize: 0, maxWaitMs: 100, retryAfterSeconds: 2 },
      timeout: { ms: 5_000, firstChunkMs: 1_000, idleMs: 2_000 },
      retry: { retries: 0, baseDelayMs: 10, maxDelayMs: 100 },
      breakers: { openai: { openMs: 1_000 } },
      limits: { openai: { limit: 2 } },
      windowStores: [new Keyv()],
    };
    expect(validateModuleOptions(options)).toBe(options);
  });

  it.each<[string, unknown, string]>([
    // negative limits
    ['a negative concurrency limit', { concurrency: { limit: -1 } }, 'concurrency.limit'],
    ['a zero concurrency limit', { concurrency: { limit: 0 } }, 'concurrency.limit'],
    ['a negative queue size', { concurrency: { queueSize: -5 } }, 'concurrency.queueSize'],
    ['a negative max wait', { concurrency: { maxWaitMs: -1 } }, 'concurrency.maxWaitMs'],
    ['a negative named limit', { limits: { openai: { limit: -2 } } }, 'limits.openai.limit'],
    ['a negative failure threshold', { breaker: { failureThreshold: -1 } }, 'breaker.failureThreshold'],
    ['a negative open period', { breaker: { openMs: -100 } }, 'breaker.openMs'],
    ['a negative named open period', { breakers: { openai: { openMs: -1 } } }, 'breakers.openai.openMs'],
    ['a negative timeout', { timeout: { ms: -1 } }, 'timeout.ms'],
    ['a negative idle timeout', { timeout: { ms: 1_000, idleMs: -1 } }, 'timeout.idleMs'],
    ['negative retries', { retry: { retries: -1 } }, 'retry.retries'],
    ['a negative maxEntries', { dedup: { maxEntries: -10 } }, 'dedup.maxEntries'],
    [
      'a failure rate above 100',
      { breaker: { failureRate: { thresholdPercent: 150 } } },
      'breaker.failureRate.thresholdPercent',
    ],
    // zero window
    ['a zero window', { dedup: { windowMs: 0 } }, 'dedup.windowMs'],
    ['a negative window', { dedup: { windowMs: -300_000 } }, 'dedup.windowMs'],
    ['a NaN window', { dedup: { windowMs: Number.NaN } }, 'dedup.windowMs'],
    ['an infinite window', { dedup: { windowMs: Number.POSITIVE_INFINITY } }, 'dedup.windowMs'],
    // unknown option names
    ['an unknown top-level option', { dedupe: {} }, 'dedupe'],
    ['an unknown dedup option', { dedup: { windowMS: 1_000 } }, 'dedup.windowMS'],
    ['an unknown breaker option', { breaker: { maxFailures: 3 } }, 'breaker.maxFailures'],
    ['an unknown concurrency option', { concurrency: { max: 3 } }, 'concurrency.max'],
    ['an unknown timeout option', { timeout: { ms: 1, totalMs: 2 } }, 'timeout.totalMs'],
    ['an unknown named breaker option', { breakers: { openai: { resetTimeout: 1 } } }, 'breakers.openai.resetTimeout'],
    ['an unknown named limit option', { limits: { openai: { capacity: 1 } } }, 'limits.openai.capacity'],
    [
      'an unknown failure-rate option',
      { breaker: { failureRate: { thresholdPercent: 50, buckets: 10 } } },
      'breaker.failureRate.buckets',
    ],
    // wrong types
    ['a string limit', { concurrency: { limit: '16' } }, 'concurrency.limit'],
    ['a fractional limit', { concurrency: { limit: 1.5 } }, 'concurrency.limit'],
    ['a string window', { dedup: { windowMs: '300s' } }, 'dedup.windowMs'],
    ['a string boolean', { dedup: { cacheAnswers: 'yes' } }, 'dedup.cacheAnswers'],
    ['a key that is not a function', { dedup: { key: 'x-request-id' } }, 'dedup.key'],
    ['a health probe that is a URL', { breaker: { healthProbe: 'http://localhost/health' } }, 'breaker.healthProbe'],
    ['an empty breaker name', { breaker: { name: '' } }, 'breaker.name'],
    ['a failure rate that is a number', { breaker: { failureRate: 50 } }, 'breaker.failureRate'],
    ['a timeout that is a number', { timeout: 5_000 }, 'timeout'],
    ['a timeout without ms', { timeout: { idleMs: 5_000 } }, 'timeout.ms'],
    ['dedup as true', { dedup: true }, 'dedup'],
    ['concurrency as an array', { concurrency: [16] }, 'concurrency'],
    ['a shouldRetry that is not a function', { retry: { shouldRetry: true } }, 'retry.shouldRetry'],
    ['breakers as a number', { breakers: 5 }, 'breakers'],
    ['breakers as a string', { breakers: 'openai' }, 'breakers'],
    ['limits as an array', { limits: [{ limit: 1 }] }, 'limits'],
    ['a named breaker that is not an object', { breakers: { openai: 'fast' } }, 'breakers.openai'],
    ['windowStores that is not an array', { windowStores: {} }, 'windowStores'],
    ['windowStores holding a URL', { windowStores: ['redis://localhost:6379'] }, 'windowStores'],
  ])('rejects %s, naming the option', (_name, options, path) => {
    const error = configErrorOf(() => validateModuleOptions(options));
    expect(error.message).toContain(path);
    expect(error.name).toBe('OrchestratorConfigError');
  });

  it('says when a number came as a string (as environment values do)', () => {
    const error = configErrorOf(() => validateModuleOptions({ timeout: { ms: '30000' } }));
    expect(error.message).toContain('timeout.ms must be a positive number, got "30000"');
    expect(error.message).toContain('Number()');
    expect(configErrorOf(() => validateModuleOptions({ timeout: { ms: 'soon' } })).message).not.toContain('Number()');
  });

  it('rejects options that are not an object', () => {
    expect(configErrorOf(() => validateModuleOptions('dedup')).message).toContain('options');
    expect(configErrorOf(() => validateModuleOptions([])).message).toContain('options');
    expect(configErrorOf(() => validateModuleOptions(42)).message).toContain('options');
  });
});

describe('normalizeOrchestrate', () => {
  const WHERE = '@Orchestrate() on ChatController.create';

  it('normalises the short forms', () => {
    expect(
      normalizeOrchestrate({ dedup: true, breaker: 'openai', concurrency: 8, timeout: 30_000, retry: 2 }, WHERE),
    ).toEqual({
      dedup: {},
      breaker: { name: 'openai' },
      concurrency: { limit: 8 },
      timeout: { ms: 30_000 },
      retry: { retries: 2 },
    });
    expect(normalizeOrchestrate({ dedup: false }, WHERE).dedup).toBe(false);
    expect(normalizeOrchestrate({}, WHERE).dedup).toBeUndefined();
  });

  it.each<[string, unknown, string]>([
    ['a negative concurrency limit', { concurrency: -1 }, 'concurrency.limit'],
    ['a zero concurrency limit', { concurrency: 0 }, 'concurrency.limit'],
    ['a negative limit in options', { concurrency: { limit: -4 } }, 'concurrency.limit'],
    ['a negative timeout', { timeout: -5 }, 'timeout.ms'],
    ['a zero timeout', { timeout: 0 }, 'timeout.ms'],
    ['a NaN timeout', { timeout: Number.NaN }, 'timeout.ms'],
    ['negative retries', { retry: -1 }, 'retry.retries'],
    ['a zero window', { dedup: { windowMs: 0 } }, 'dedup.windowMs'],
    ['a negative window', { dedup: { windowMs: -1 } }, 'dedup.windowMs'],
    ['an unknown capability', { cache: true }, 'cache'],
    ['an unknown dedup option', { dedup: { ttl: 1_000 } }, 'dedup.ttl'],
    ['an unknown breaker option', { breaker: { threshold: 5 } }, 'breaker.threshold'],
    ['an unknown timeout option', { timeout: { ms: 10, connectMs: 5 } }, 'timeout.connectMs'],
    ['a string limit', { concurrency: '8' }, 'concurrency'],
    ['a numeric breaker', { breaker: 5 }, 'breaker'],
    ['an empty breaker name', { breaker: '' }, 'breaker.name'],
    ['a string timeout', { timeout: '30s' }, 'timeout'],
    ['a string dedup', { dedup: 'on' }, 'dedup'],
    ['a wrong-typed dedup field', { dedup: { cancelWhenAbandoned: 1 } }, 'dedup.cancelWhenAbandoned'],
    ['a fractional limit', { concurrency: 2.5 }, 'concurrency.limit'],
  ])('rejects %s, naming the option', (_name, options, path) => {
    const error = configErrorOf(() => normalizeOrchestrate(options as OrchestrateOptions, WHERE));
    expect(error.message).toContain(path);
    expect(error.message).toContain(WHERE);
  });

  it('rejects options that are not an object', () => {
    const error = configErrorOf(() => normalizeOrchestrate(null as unknown as OrchestrateOptions, WHERE));
    expect(error.message).toContain(WHERE);
  });
});
