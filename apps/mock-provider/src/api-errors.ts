/** Which provider's conventions a route follows: error body shape and request-id header. */
export type ApiFamily = 'openai' | 'anthropic' | 'llama';

export type ErrorKind = 'invalid_request' | 'unauthorized' | 'too_large' | 'unavailable' | 'internal' | 'rate_limited';

export const STATUS_BY_KIND: Readonly<Record<ErrorKind, number>> = {
  invalid_request: 400,
  unauthorized: 401,
  too_large: 413,
  unavailable: 503,
  rate_limited: 429,
  internal: 500,
};

const OPENAI_TYPES: Readonly<Record<ErrorKind, { type: string; code: string | null }>> = {
  invalid_request: { type: 'invalid_request_error', code: null },
  unauthorized: { type: 'invalid_request_error', code: 'invalid_api_key' },
  too_large: { type: 'invalid_request_error', code: 'request_too_large' },
  unavailable: { type: 'server_error', code: 'service_unavailable' },
  rate_limited: { type: 'rate_limit_error', code: 'rate_limit_exceeded' },
  internal: { type: 'server_error', code: null },
};

const ANTHROPIC_TYPES: Readonly<Record<ErrorKind, string>> = {
  invalid_request: 'invalid_request_error',
  unauthorized: 'authentication_error',
  too_large: 'request_too_large',
  // Real overload is 529 overloaded_error; the mock stays on 503 so every family fails with the same status.
  unavailable: 'api_error',
  rate_limited: 'rate_limit_error',
  internal: 'api_error',
};

const LLAMA_TYPES: Readonly<Record<ErrorKind, string>> = {
  invalid_request: 'invalid_request_error',
  unauthorized: 'authentication_error',
  too_large: 'invalid_request_error',
  unavailable: 'unavailable_error',
  rate_limited: 'rate_limit_error',
  internal: 'server_error',
};

export function requestId(seq: number): string {
  return `req_mock_${seq}`;
}

export function errorBody(family: ApiFamily, kind: ErrorKind, message: string, seq?: number): object {
  switch (family) {
    case 'openai': {
      const { type, code } = OPENAI_TYPES[kind];
      return { error: { message, type, param: null, code } };
    }
    case 'anthropic':
      return {
        type: 'error',
        error: { type: ANTHROPIC_TYPES[kind], message },
        request_id: seq === undefined ? null : requestId(seq),
      };
    case 'llama':
      return { error: { code: STATUS_BY_KIND[kind], message, type: LLAMA_TYPES[kind] } };
  }
}

/** Headers each family puts on every answer, so gateways can be tested for passing them through. */
export function familyHeaders(family: ApiFamily, seq: number): Record<string, string> {
  switch (family) {
    case 'openai':
      return { 'x-request-id': requestId(seq) };
    case 'anthropic':
      return { 'request-id': requestId(seq) };
    case 'llama':
      return {};
  }
}

export const NOT_FOUND_BODY = { error: { code: 404, message: 'File Not Found', type: 'not_found_error' } };
