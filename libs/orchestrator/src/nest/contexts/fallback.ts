import { isOrchestratorError } from '../../core/errors.js';
import { OrchestratorConfigError } from '../../core/options.js';

/**
 * What a call answers instead of failing: a function of the cause and the
 * handler's arguments, or a value answered as it is. A function is always
 * called (to answer with a function, return it from one).
 */
export type FallbackAnswer<T = unknown> = T | ((cause: unknown, ...args: unknown[]) => T | Promise<T>);

/** A fallback as decorators store it. */
export interface FallbackSetting {
  readonly answer: (cause: unknown, args: readonly unknown[]) => unknown;
}

export function normalizeFallback(answer: FallbackAnswer, where: string): FallbackSetting {
  if (answer === undefined)
    throw new OrchestratorConfigError(`${where} needs a value or a function (cause, ...args) => value`);
  if (typeof answer === 'function') {
    const handler = answer as (cause: unknown, ...args: unknown[]) => unknown;
    return { answer: (cause, args) => handler(cause, ...args) };
  }
  return { answer: () => answer };
}

// GraphQL codes (Apollo's and the spec's usual ones) that mean the request itself is wrong.
const CALLER_CODES = new Set([
  'BAD_USER_INPUT',
  'BAD_REQUEST',
  'GRAPHQL_VALIDATION_FAILED',
  'GRAPHQL_PARSE_FAILED',
  'UNAUTHENTICATED',
  'FORBIDDEN',
]);
// Exceptions a handler throws on purpose to answer its caller (Nest's microservice and WebSocket ones).
const ANSWERING_EXCEPTIONS = new Set(['RpcException', 'WsException']);

/**
 * Whether a fallback answers this error: the orchestrator's refusals and
 * timeouts, server-side failures and unknown errors; not the caller's mistakes.
 */
export function fallbackAnswers(error: unknown): boolean {
  if (isOrchestratorError(error)) return error.code !== 'client_closed_request';
  if (typeof error !== 'object' || error === null) return true;
  const candidate = error as {
    getStatus?: () => unknown;
    status?: unknown;
    statusCode?: unknown;
    extensions?: { code?: unknown };
  };
  const status =
    typeof candidate.getStatus === 'function' ? candidate.getStatus() : (candidate.status ?? candidate.statusCode);
  if (typeof status === 'number') return status >= 500;
  if (ANSWERING_EXCEPTIONS.has(error.constructor?.name)) return false;
  const code = candidate.extensions?.code;
  return !(typeof code === 'string' && CALLER_CODES.has(code));
}
