/**
 * The body of a 429 in the OpenAI error format (`rate_limit_exceeded`), for
 * `ThrottlerModule.forRoot({ errorMessage })` or an exception filter: the
 * official SDKs read it, and retry after the `Retry-After` the throttler sets.
 */
export function rateLimitErrorBody(message = 'Rate limit reached; retry after the time in the Retry-After header.'): {
  error: { message: string; type: 'rate_limit_error'; param: null; code: 'rate_limit_exceeded' };
} {
  return { error: { message, type: 'rate_limit_error', param: null, code: 'rate_limit_exceeded' } };
}
