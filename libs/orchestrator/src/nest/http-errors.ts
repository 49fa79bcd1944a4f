import { HttpException } from '@nestjs/common';
import type { OrchestratorError } from '../core/errors.js';

/** The OpenAI error body: what the official SDKs parse into their error classes. */
export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export function openAIErrorBody(error: OrchestratorError): OpenAIErrorBody {
  return { error: { message: error.message, type: error.type, param: null, code: error.code } };
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

/** The default answer to an orchestrator error: its status, an OpenAI-shaped body, the error as `cause`. */
export function orchestratorHttpException(error: OrchestratorError): HttpException {
  return new HttpException(openAIErrorBody(error), error.status, { cause: error });
}
