import { STATUS_CODES } from 'node:http';
import type { OrchestratorError, OrchestratorErrorCode } from '../errors.js';

/**
 * How the orchestrator's own errors are answered over HTTP: `nest` (Nest's
 * `{ statusCode, message, error }`, plus the error's `code`), or `openai`
 * (`{ error: { message, type, param, code } }`, what the official OpenAI SDKs
 * parse). Default `nest`.
 */
export type ErrorShape = 'nest' | 'openai';

/** Nest's own error body (as `HttpException` answers), with the orchestrator's stable `code`. */
export interface NestErrorBody {
  statusCode: number;
  message: string;
  /** The status's reason phrase, e.g. `Service Unavailable`. */
  error: string;
  code: OrchestratorErrorCode;
}

/** The OpenAI error body: what the official SDKs parse into their error classes. */
export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export type ErrorBody = NestErrorBody | OpenAIErrorBody;

export function openAIErrorBody(error: OrchestratorError): OpenAIErrorBody {
  return { error: { message: error.message, type: error.type, param: null, code: error.code } };
}

/** The body of an orchestrator error in the shape asked for. */
export function errorBody(error: OrchestratorError, shape: ErrorShape = 'nest'): ErrorBody {
  if (shape === 'openai') return openAIErrorBody(error);
  // 499 has no reason phrase in Node's table (nginx's code for a client that hung up).
  const reason = STATUS_CODES[error.status] ?? (error.status === 499 ? 'Client Closed Request' : 'Error');
  return { statusCode: error.status, message: error.message, error: reason, code: error.code };
}

/**
 * Headers of an error the orchestrator produced. `x-should-retry: false` tells
 * the official SDKs not to retry on their own (retries belong to one layer),
 * except for a server shutting down (`true`); `Retry-After` says when trying
 * again makes sense.
 */
export function errorHeaders(error: OrchestratorError): Record<string, string> {
  const headers: Record<string, string> = { 'x-should-retry': String(error.retryable) };
  // A replica going away: the retry should open a new connection (to another replica), not reuse this one.
  if (error.code === 'shutting_down') headers.connection = 'close';
  if (error.retryAfterSeconds !== undefined) headers['retry-after'] = String(error.retryAfterSeconds);
  return headers;
}

export const ERROR_SHAPES: readonly ErrorShape[] = ['nest', 'openai'];
