import { isOrchestratorError } from '../errors.js';

// Node and undici codes for an upstream that could not be reached or dropped the connection.
const CONNECTION_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CLOSED',
]);

function statusOf(error: object): number | undefined {
  const candidate = error as { status?: unknown; statusCode?: unknown; getStatus?: () => unknown };
  const status =
    typeof candidate.getStatus === 'function' ? candidate.getStatus() : (candidate.status ?? candidate.statusCode);
  return typeof status === 'number' ? status : undefined;
}

/**
 * The default failure test of a breaker: upstream timeouts, 5xx answers (but 501) and
 * connection errors count; the caller's own 4xx, refusals, overload answers
 * and a caller hanging up do not. An error with no status and no known code
 * (an exception from the upstream client) counts, since the call did not succeed.
 */
export function isUpstreamFailure(error: unknown): boolean {
  if (isOrchestratorError(error)) return error.code === 'upstream_timeout';
  if (typeof error !== 'object' || error === null) return true;
  const status = statusOf(error);
  // 501 says a feature is missing, not that the upstream is failing.
  if (status !== undefined) return status >= 500 && status !== 501;
  return isConnectionError(error) || (error as { name?: unknown }).name !== 'AbortError';
}

/**
 * Failures worth one more try: 502/503/504 and connection errors. Not
 * timeouts (the caller has already waited the limit) and not other 5xx.
 */
export function isTransientFailure(error: unknown): boolean {
  if (typeof error !== 'object' || error === null || isOrchestratorError(error)) return false;
  const status = statusOf(error);
  if (status !== undefined) return status === 502 || status === 503 || status === 504;
  return isConnectionError(error);
}

/**
 * The upstream saying it has too much to do: 429 or 503. What an adaptive
 * limit shrinks on. Not other failures (a 500 says nothing of load), nor
 * timeouts: one tenant's own long generations time out too, and would shrink
 * everybody's limit (rising latency is seen in the latency samples anyway).
 */
export function isOverloadSignal(error: unknown): boolean {
  if (typeof error !== 'object' || error === null || isOrchestratorError(error)) return false;
  const status = statusOf(error);
  return status === 429 || status === 503;
}

function isConnectionError(error: object): boolean {
  let cause: unknown = error;
  for (let depth = 0; depth < 4 && typeof cause === 'object' && cause !== null; depth++) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === 'string' && CONNECTION_ERROR_CODES.has(code)) return true;
    cause = (cause as { cause?: unknown }).cause;
  }
  return false;
}
