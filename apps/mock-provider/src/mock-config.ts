import {
  isMockMode,
  MOCK_MODES,
  type MockConfig,
  type MockMode,
  type MockModeOptions,
  type MockTuning,
  type ResolvedModeOptions,
} from './mock-provider.types.js';

export const DEFAULT_MODE_OPTIONS: Readonly<ResolvedModeOptions> = Object.freeze({
  slowChunkDelayMs: 2000,
  cutAfterChunks: 2,
  retryAfterSeconds: null,
});

export const DEFAULT_TUNING: Readonly<Required<MockTuning>> = Object.freeze({
  latencyMs: 0,
  latencyJitterMs: 0,
  streamChunkDelayMs: 5,
  model: 'mock-model',
  capacity: 0,
});

const MODE_OPTION_KEYS: readonly string[] = ['slowChunkDelayMs', 'cutAfterChunks', 'retryAfterSeconds'];
const TUNING_KEYS: readonly string[] = ['latencyMs', 'latencyJitterMs', 'streamChunkDelayMs', 'model', 'capacity'];

/** Longest timer Node accepts; larger values would silently fire after 1 ms. */
export const MAX_DELAY_MS = 2_147_483_647;

function checkKeys(input: object, allowed: readonly string[], what: string): void {
  for (const key of Object.keys(input)) {
    if (!allowed.includes(key)) throw new RangeError(`unknown ${what} '${key}' (allowed: ${allowed.join(', ')})`);
  }
}

export function checkDelay(value: unknown, name: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > MAX_DELAY_MS) {
    throw new RangeError(
      `${name} must be a number of milliseconds between 0 and ${MAX_DELAY_MS}, got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

export function checkCount(value: unknown, name: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`${name} must be a non-negative integer, got ${JSON.stringify(value)}`);
  }
  return value;
}

export function checkMode(value: unknown): MockMode {
  if (!isMockMode(value)) {
    throw new RangeError(`mode must be one of ${MOCK_MODES.join(', ')}, got ${JSON.stringify(value)}`);
  }
  return value;
}

export function resolveModeOptions(options: MockModeOptions = {}): ResolvedModeOptions {
  checkKeys(options, MODE_OPTION_KEYS, 'mode option');
  const resolved: ResolvedModeOptions = { ...DEFAULT_MODE_OPTIONS };
  if (options.slowChunkDelayMs !== undefined) {
    resolved.slowChunkDelayMs = checkDelay(options.slowChunkDelayMs, 'slowChunkDelayMs');
  }
  if (options.cutAfterChunks !== undefined) {
    resolved.cutAfterChunks = checkCount(options.cutAfterChunks, 'cutAfterChunks');
  }
  if (options.retryAfterSeconds !== undefined && options.retryAfterSeconds !== null) {
    resolved.retryAfterSeconds = checkCount(options.retryAfterSeconds, 'retryAfterSeconds');
  }
  return resolved;
}

export function applyTuning(config: MockConfig, tuning: MockTuning): MockConfig {
  checkKeys(tuning, TUNING_KEYS, 'setting');
  const next: MockConfig = { ...config };
  if (tuning.latencyMs !== undefined) next.latencyMs = checkDelay(tuning.latencyMs, 'latencyMs');
  if (tuning.latencyJitterMs !== undefined) {
    next.latencyJitterMs = checkDelay(tuning.latencyJitterMs, 'latencyJitterMs');
  }
  if (tuning.streamChunkDelayMs !== undefined) {
    next.streamChunkDelayMs = checkDelay(tuning.streamChunkDelayMs, 'streamChunkDelayMs');
  }
  if (tuning.model !== undefined) {
    if (typeof tuning.model !== 'string' || tuning.model === '') {
      throw new RangeError('model must be a non-empty string');
    }
    next.model = tuning.model;
  }
  if (tuning.capacity !== undefined) next.capacity = checkCount(tuning.capacity, 'capacity');
  return next;
}
