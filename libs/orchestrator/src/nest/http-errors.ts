import { HttpException } from '@nestjs/common';
import type { OrchestratorError } from '../core/errors.js';
import { errorBody, type ErrorShape } from '../core/http/errors.js';

export { errorHeaders } from '../core/http/errors.js';

/**
 * The default answer to an orchestrator error: its status, a body in the shape
 * asked for (Nest's `{ statusCode, message, error, code }` by default, or
 * OpenAI's), and the error as `cause`.
 */
export function orchestratorHttpException(error: OrchestratorError, shape: ErrorShape = 'nest'): HttpException {
  return new HttpException(errorBody(error, shape), error.status, { cause: error });
}
