/**
 * An error the gateway itself answers with, before it is shaped into the
 * client API's error format by the exception filter (which alone renders it).
 * It never reaches the provider, so it never counts against the breaker.
 */
export class ApiError extends Error {
  override name = 'ApiError';
  /** Seconds to wait before trying again (`Retry-After`). */
  retryAfter?: string;
  /** Whether the client should try again (`x-should-retry: true`, e.g. after a rate limit); default false. */
  retryable?: boolean;

  constructor(
    readonly status: number,
    message: string,
    readonly code: string | null = null,
    readonly param: string | null = null,
    /** OpenAI error `type`; the filter derives one from the status when absent. */
    readonly type?: string,
  ) {
    super(message);
  }
}

/** A 400 that names the field at fault. */
export function invalidRequest(param: string | null, message: string): ApiError {
  return new ApiError(400, message, null, param, 'invalid_request_error');
}

/** A route the configured provider cannot serve: 501, as llama.cpp answers for disabled endpoints. */
export function notSupported(message: string): ApiError {
  return new ApiError(501, message, 'not_supported', null, 'not_supported_error');
}

/** A request without one of the gateway's keys, when it checks keys (gateway keys or virtual keys). */
export function keyRequired(): ApiError {
  return new ApiError(
    401,
    'This gateway needs an API key: send one of its keys as "Authorization: Bearer <key>" or "x-api-key".',
    'invalid_api_key',
    null,
    'authentication_error',
  );
}
