/** Failure modes the mock can be switched into at run time. */
export const MOCK_MODES = [
  'ok',
  'error503',
  'hang',
  'reset',
  'slowStream',
  'cutStream',
  'truncStream',
  'errorStream',
  'error200',
  'error429',
] as const;

export type MockMode = (typeof MOCK_MODES)[number];

export function isMockMode(value: unknown): value is MockMode {
  return typeof value === 'string' && (MOCK_MODES as readonly string[]).includes(value);
}

/**
 * Per-mode knobs. Each `setMode` call starts again from the defaults, so a knob never leaks into a later mode switch.
 */
export interface MockModeOptions {
  /** Gap between streamed chunks in `slowStream` mode. Default 2000. */
  slowChunkDelayMs?: number;
  /** Chunks (SSE events) sent in `cutStream` mode before the socket is destroyed. Default 2. */
  cutAfterChunks?: number;
  /** Adds a `retry-after` header (seconds) to `error503` answers. Default: no header. */
  retryAfterSeconds?: number | null;
}

export interface ResolvedModeOptions {
  slowChunkDelayMs: number;
  cutAfterChunks: number;
  retryAfterSeconds: number | null;
}

/** Settings that can change while the server runs (`configure`, `POST /__mock/config`). */
export interface MockTuning {
  /** Delay before the first byte of every model/utility response. Default 0. */
  latencyMs?: number;
  /** Uniform extra delay in [0, latencyJitterMs) added to `latencyMs`. Default 0. */
  latencyJitterMs?: number;
  /** Gap between streamed chunks in the ok-like modes. Default 5. */
  streamChunkDelayMs?: number;
  /** Model name reported where the request names none (and always on llama.cpp native routes). Default 'mock-model'. */
  model?: string;
  /**
   * Calls the simulated provider serves at its base latency; beyond this many at once, each new call's latency is
   * the latency times (calls in flight / capacity), as a server sharing `capacity` workers would be. 0: no limit.
   * Default 0.
   */
  capacity?: number;
}

export interface MockProviderOptions extends MockTuning {
  /** 0 picks an ephemeral port. Default 0. */
  port?: number;
  /** Default '127.0.0.1'. */
  host?: string;
  /** Default 'ok'. */
  mode?: MockMode;
  modeOptions?: MockModeOptions;
  /** Request bodies above this answer 413. Default 8 MiB. */
  maxBodyBytes?: number;
  /** Only the newest calls are kept, so a long benchmark cannot grow memory without bound. Default 100000. */
  callLogLimit?: number;
  /**
   * Benchmarks of a proxy: every OpenAI-route model call in `ok` mode gets one prepared answer (a chat completion,
   * or a stream of this many events when the request asks to stream), its body never parsed; calls are still
   * counted and logged. Off (0) by default.
   */
  fixedAnswerEvents?: number;
  /**
   * With `fixedAnswerEvents`: a stream's events are written `fixedEventsPerWrite` at a time, this many ms apart, as
   * a provider generating them sends them, instead of in one write. 0 (default): one write.
   */
  fixedEventIntervalMs?: number;
  /** Events per write of a spaced fixed stream (see `fixedEventIntervalMs`). Default 1. */
  fixedEventsPerWrite?: number;
  /**
   * As the real APIs: every model and model-list call needs a key (`Authorization: Bearer sk-...` or `x-api-key`),
   * else 401; a key not starting with `sk-` is refused with an error that quotes it, as OpenAI's does. The mode
   * still decides first (an outage answers 503 with or without a key). Off by default.
   */
  requireKey?: boolean;
}

export interface MockConfig {
  mode: MockMode;
  modeOptions: ResolvedModeOptions;
  latencyMs: number;
  latencyJitterMs: number;
  streamChunkDelayMs: number;
  model: string;
  capacity: number;
}

/**
 * What the mock did with a request. `client_closed` means the client went away before the answer was complete;
 * a hung request keeps `hang` whether the client gave up or the mock dropped it.
 */
export type MockOutcome = 'ok' | 'error503' | 'error429' | 'hang' | 'reset' | 'cut' | 'bad_request' | 'client_closed';

export interface MockCall {
  /** 1-based, restarts at 1 after `reset()`. Answer ids carry it (`chatcmpl-mock-17`, `msg_mock_17`, ...). */
  seq: number;
  /** The request path without query string, exactly as sent (aliases are not folded together). */
  route: string;
  method: string;
  /** Mode in force when the request arrived; it decides the request's fate even if the mode changes meanwhile. */
  mode: MockMode;
  stream: boolean;
  /** Epoch milliseconds (fractional) when the request headers arrived. */
  receivedAt: number;
  finishedAt?: number;
  status?: number;
  outcome: MockOutcome;
  /** `model` field of the request body, when it had one. */
  model?: string;
  /** First 12 hex chars of sha256 of the credential (Authorization without its `Bearer ` prefix, else x-api-key). */
  authHash?: string;
  /** Request headers that change an answer or its billing, and the trace context, as received (never credentials): see `RECORDED_HEADERS`. */
  headers?: Record<string, string>;
}

export interface MockStats {
  /** Model and utility requests; health checks, control requests and unknown routes are not included. */
  total: number;
  byRoute: Record<string, number>;
  byMode: Record<string, number>;
  healthChecks: number;
  /** Hung connections destroyed because the mode was switched away from `hang`. */
  droppedHungConnections: number;
  /** Requests (health checks included) whose answer is not finished yet, hung ones included. */
  inFlight: number;
  /** Requests to unknown routes (answered 404, not in the call log). */
  notFound: number;
}

export interface MockProvider {
  /** e.g. `http://127.0.0.1:41234`, no trailing slash. */
  readonly url: string;
  readonly port: number;
  stats(): MockStats;
  /** Copies of the logged calls, oldest first; with `sinceSeq`, only calls with a larger seq. */
  calls(sinceSeq?: number): MockCall[];
  /** Clears counters and the call log; live connections (hung ones too) are left alone. */
  reset(): void;
  /** Returns how many hung connections were dropped by this switch. Throws RangeError on bad input. */
  setMode(mode: MockMode, options?: MockModeOptions): number;
  /** Throws RangeError on bad input. */
  configure(tuning: MockTuning): void;
  config(): MockConfig;
  /** Resolves with the stats once `predicate` holds; rejects after `timeoutMs` (default 5000). */
  waitFor(predicate: (stats: MockStats) => boolean, timeoutMs?: number): Promise<MockStats>;
  /** Destroys every socket, hung ones included, then stops listening. Safe to call twice. */
  close(): Promise<void>;
}
