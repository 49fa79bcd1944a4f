import OpenAI, { APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai';

/** Milliseconds since a scenario started, on the monotonic clock; `epochAt(0)` maps it to wall time. */
export class ScenarioClock {
  private readonly origin = performance.now();
  /** Wall-clock epoch ms of the scenario start (to place the provider's call log on the same axis). */
  readonly epochStart = performance.timeOrigin + this.origin;

  now(): number {
    return performance.now() - this.origin;
  }

  fromEpoch(epochMs: number): number {
    return epochMs - this.epochStart;
  }

  /** Resolves at `atMs` on this clock (at once if that moment has passed). */
  until(atMs: number): Promise<void> {
    const wait = atMs - this.now();
    return wait > 0 ? new Promise((resolve) => setTimeout(resolve, wait)) : Promise.resolve();
  }
}

/** One HTTP attempt the SDK made for a request (it retries on its own). */
export interface AttemptRecord {
  start: number;
  /** When the response headers arrived, or the attempt failed. */
  end: number;
  /** 0 when no response came (connection error, abort). */
  status: number;
  /** `error.code` of an error body. */
  code?: string;
  /** `x-orchestrator-dedup` */
  dedup?: string;
  /** `x-should-retry` */
  shouldRetry?: string;
  retryAfter?: string;
  /** Transport failure, when there was no response. */
  failure?: string;
}

export type Outcome = 'ok' | 'joined' | 'cached' | 'refused' | 'timeout' | 'error';

export const OUTCOMES: readonly Outcome[] = ['ok', 'joined', 'cached', 'refused', 'timeout', 'error'];

/** What one client request (with all its SDK attempts) did, in ms from the scenario start. */
export interface RequestRecord {
  id: number;
  prompt: string;
  start: number;
  end: number;
  outcome: Outcome;
  /** Final HTTP status; 0 when the SDK gave up without a response. */
  status: number;
  /** `code` of the final error (e.g. circuit_open, upstream_timeout), or the SDK error class name. */
  errorCode?: string;
  /** `x-orchestrator-dedup` of the final response. */
  dedup?: string;
  /** HTTP attempts the SDK made (1 = no retry). */
  attempts: number;
  attemptLog: AttemptRecord[];
}

export const BENCH_API_KEY = 'sk-bench-0000';
export const BENCH_MODEL = 'mock-model';

/**
 * One chat completion through the official openai SDK with its defaults untouched (timeout 10 min, 2 retries);
 * only `baseURL`, `apiKey` and a counting `fetch` (a thin wrapper of globalThis.fetch) are given, so every
 * attempt the SDK makes, retries included, is seen and timed. The client is built up front (`prepare`), so
 * a burst measures requests, not client construction.
 */
export function prepareSdkChat(
  baseURL: string,
  id: number,
  prompt: string,
): { send(clock: ScenarioClock, signal?: AbortSignal): Promise<RequestRecord> } {
  const attemptLog: AttemptRecord[] = [];
  let clock = new ScenarioClock();
  const countingFetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const attempt: AttemptRecord = { start: clock.now(), end: Number.NaN, status: 0 };
    attemptLog.push(attempt);
    try {
      const response = await globalThis.fetch(input, init);
      attempt.end = clock.now();
      attempt.status = response.status;
      attempt.dedup = response.headers.get('x-orchestrator-dedup') ?? undefined;
      attempt.shouldRetry = response.headers.get('x-should-retry') ?? undefined;
      attempt.retryAfter = response.headers.get('retry-after') ?? undefined;
      if (response.status >= 400) {
        const body = (await response
          .clone()
          .json()
          .catch(() => undefined)) as { error?: { code?: unknown } } | undefined;
        const code = body?.error?.code;
        if (typeof code === 'string') attempt.code = code;
      }
      return response;
    } catch (error) {
      attempt.end = clock.now();
      attempt.failure = describeFailure(error);
      throw error;
    }
  };
  const client = new OpenAI({ baseURL, apiKey: BENCH_API_KEY, fetch: countingFetch });

  const send = async (scenarioClock: ScenarioClock, signal?: AbortSignal): Promise<RequestRecord> => {
    clock = scenarioClock;
    const start = clock.now();
    const finish = (fields: Pick<RequestRecord, 'outcome' | 'status' | 'errorCode' | 'dedup'>): RequestRecord => ({
      id,
      prompt,
      start,
      end: clock.now(),
      ...fields,
      attempts: attemptLog.length,
      attemptLog,
    });
    try {
      await client.chat.completions.create(
        { model: BENCH_MODEL, messages: [{ role: 'user', content: prompt }] },
        signal ? { signal } : undefined,
      );
      const dedup = attemptLog.at(-1)?.dedup;
      const outcome: Outcome = dedup === 'joined' ? 'joined' : dedup === 'cached' ? 'cached' : 'ok';
      return finish({ outcome, status: 200, dedup });
    } catch (error) {
      if (error instanceof APIError && error.status !== undefined) {
        const code = typeof error.code === 'string' ? error.code : undefined;
        const outcome: Outcome =
          error.status === 503 && code === 'circuit_open'
            ? 'refused'
            : error.status === 504 || code === 'upstream_timeout'
              ? 'timeout'
              : 'error';
        return finish({ outcome, status: error.status, errorCode: code, dedup: attemptLog.at(-1)?.dedup });
      }
      const name =
        error instanceof APIConnectionTimeoutError
          ? 'sdk_timeout'
          : error instanceof APIUserAbortError
            ? 'aborted_by_harness'
            : error instanceof APIError
              ? 'connection_error'
              : describeFailure(error);
      return finish({ outcome: name === 'sdk_timeout' ? 'timeout' : 'error', status: 0, errorCode: name });
    }
  };
  return { send };
}

/** Builds the client and sends at once. */
export function sdkChat(
  baseURL: string,
  id: number,
  prompt: string,
  clock: ScenarioClock,
  signal?: AbortSignal,
): Promise<RequestRecord> {
  return prepareSdkChat(baseURL, id, prompt).send(clock, signal);
}

function describeFailure(error: unknown): string {
  const cause = (error as { cause?: { code?: unknown; message?: unknown } } | undefined)?.cause;
  if (typeof cause?.code === 'string') return cause.code;
  if (typeof cause?.message === 'string') return cause.message;
  return (error as Error | undefined)?.name ?? String(error);
}
