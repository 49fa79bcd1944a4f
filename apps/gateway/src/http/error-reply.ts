import { FlightOutgrownError, isOrchestratorError, isTransientFailure } from 'nest-prompt-orchestrator/core';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ROUTES, routeAt, type ClientApi } from '../providers/provider.js';
import type { GatewayConfig } from '../config/gateway-config.js';
import { UpstreamHttpError, UpstreamProtocolError, upstreamMessage } from '../apis/errors.js';
import { ApiError } from '../common/api-error.js';
import { redactor } from '../common/redaction.js';
import type { RequestContext } from '../observability/request-context.js';

/** An error as the gateway answers it, before it is written in the client's API format. */
interface ErrorInfo {
  status: number;
  message: string;
  type?: string;
  param: string | null;
  code: string | number | null;
  retryAfter?: string;
}

const OPENAI_TYPE: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'invalid_request_error',
  413: 'invalid_request_error',
  415: 'invalid_request_error',
  429: 'rate_limit_error',
};
// llama.cpp's own types, by status (its server's `format_error_response`).
const LLAMA_TYPE: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'invalid_request_error',
  415: 'invalid_request_error',
  429: 'unavailable_error',
  501: 'not_supported_error',
  503: 'unavailable_error',
};
const ANTHROPIC_TYPE: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  415: 'invalid_request_error',
  429: 'rate_limit_error',
  503: 'overloaded_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};

/** An error as it is sent: status, headers and body, in the client's API. */
export interface ErrorReply {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** What rendering an error needs to know of its request. */
export interface ErrorTarget {
  /** The API the client speaks on the route: the format of the error. */
  api: ClientApi;
  requestId?: string;
  /** The key the request presented (removed from anything quoted back). */
  presented?: string;
  /** For a 404: the path that matched nothing. */
  method?: string;
  url?: string;
  /** Where the error's code is recorded for the request line and the status page. */
  context?: RequestContext;
}

const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * Every error the gateway answers with, rendered here and only here (the
 * exception filter for the control routes, the data plane for proxied ones),
 * in the API the client speaks on the route (OpenAI, Anthropic, or llama.cpp's
 * own routes), with `x-should-retry: false`: the gateway has already applied
 * its own retry policy, so retries happen at one layer only. A provider error
 * in the client's own API is relayed as the provider sent it. No stack trace,
 * no credential, no internal detail reaches the client.
 */
export function errorReply(exception: unknown, target: ErrorTarget, logger: { warn(line: string): void }): ErrorReply {
  const { api, context } = target;
  // Provider messages quote keys (the one sent, masked or whole): none reaches a client or a log.
  const presented = [target.presented];
  // Retries happen at one layer: here. Only a replica shutting down (retry elsewhere) and a rate limit, the
  // provider's or the gateway's own (back off as it says), are left to the client to retry.
  const retryable = isOrchestratorError(exception)
    ? exception.retryable
    : exception instanceof ApiError
      ? exception.retryable === true
      : (exception instanceof UpstreamHttpError && exception.status === 429) ||
        exception instanceof FlightOutgrownError;
  const headers: Record<string, string> = { 'x-should-retry': String(retryable) };

  if (context) {
    context.errorCode = exception instanceof UpstreamHttpError ? upstreamErrorCode(exception.status) : undefined;
    // The root cause, for the request's log line: what the provider said, without the keys it may quote.
    if (exception instanceof UpstreamHttpError)
      context.upstreamErrorBody = upstreamErrorText(exception.body, presented);
  }
  if (exception instanceof UpstreamHttpError && exception.api === api && exception.json !== undefined) {
    // The provider already answered in the client's own format: its status and bytes, unchanged.
    if (exception.retryAfter) headers['retry-after'] = exception.retryAfter;
    headers['content-type'] = exception.contentType ?? 'application/json';
    // Decoded to look: a key written with JSON escapes is the key again once the client parses the body.
    return { status: exception.status, headers, body: redactor.jsonBytes(exception.body, presented) };
  }

  const info = describe(exception, target);
  if (context && !context.errorCode) context.errorCode = String(info.code ?? info.type ?? info.status);
  // A refusal (circuit_open, overloaded, ...) is the request line's error code and a metric, not a line of its own.
  if (
    info.status >= 500 &&
    !(exception instanceof ApiError) &&
    !isFrameworkHttpError(exception) &&
    !isOrchestratorError(exception)
  ) {
    const name = (exception as Error | undefined)?.name ?? 'Error';
    logger.warn(
      `request ${String(target.requestId)} failed with ${info.status} (${name}: ${redactor.text(info.message, presented)})`,
    );
  }
  if (info.retryAfter) headers['retry-after'] = info.retryAfter;
  // Nothing more is wanted from this client on this connection: a failed key, a body too large, a replica leaving.
  if (info.status === 401 || info.status === 413 || info.code === 'shutting_down') headers.connection = 'close';
  headers['content-type'] = JSON_TYPE;
  const body = errorBody(api, { ...info, message: redactor.text(info.message, presented) }, target.requestId);
  return { status: info.status, headers, body: Buffer.from(JSON.stringify(body)) };
}

/**
 * How the log, the metrics and the status page name a provider's error: `upstream_rejected` when it refused the
 * request (4xx: the request's own fault, or its key's), `upstream_error` when it failed (5xx). What the client is
 * sent does not change.
 */
export function upstreamErrorCode(status: number): 'upstream_rejected' | 'upstream_error' {
  return status >= 400 && status < 500 ? 'upstream_rejected' : 'upstream_error';
}

/** A provider's error body kept for the log: redacted, one line, at most this many characters. */
export const MAX_UPSTREAM_ERROR_CHARS = 1024;

function upstreamErrorText(body: Buffer, presented: Array<string | undefined>): string {
  const text = redactor.text(body.toString('utf8'), presented).replace(/\s+/g, ' ').trim();
  return text.length > MAX_UPSTREAM_ERROR_CHARS ? `${text.slice(0, MAX_UPSTREAM_ERROR_CHARS)}…` : text;
}

/** How much of a too-large body is read and dropped before the 413 is sent. */
export function drainBound(maxBodyBytes: number): number {
  return Math.max(4 * maxBodyBytes, 16 * 1024 * 1024);
}

/** Reads and drops what is left of a request body, until its end, `maxBytes`, or 10 s. */
export function drainRequest(request: IncomingMessage, maxBytes: number): Promise<void> {
  return new Promise<void>((resolve) => {
    let received = 0;
    const done = () => {
      clearTimeout(timer);
      request.removeListener('data', onData);
      request.removeListener('end', done);
      request.removeListener('close', done);
      request.removeListener('error', done);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received > maxBytes) done();
    };
    const timer = setTimeout(done, 10_000);
    request.on('data', onData);
    request.once('end', done);
    request.once('close', done);
    request.once('error', done);
    request.resume();
  });
}

/**
 * The error body in the client's API: Anthropic's on Anthropic routes, llama.cpp's on llama.cpp's own routes
 * (`code` is the HTTP status, no `param`), OpenAI's elsewhere.
 */
function errorBody(api: ClientApi, info: ErrorInfo, requestId: string | undefined): object {
  const message = info.message;
  if (api === 'anthropic') {
    const type = ANTHROPIC_TYPE[info.status] ?? (info.status >= 500 ? 'api_error' : 'invalid_request_error');
    return { type: 'error', error: { type, message }, request_id: requestId ?? null };
  }
  if (api === 'llama') {
    const type = LLAMA_TYPE[info.status] ?? (info.status >= 500 ? 'server_error' : 'invalid_request_error');
    return { error: { code: info.status, message, type } };
  }
  const type = info.type ?? OPENAI_TYPE[info.status] ?? (info.status >= 500 ? 'server_error' : 'invalid_request_error');
  return { error: { message, type, param: info.param, code: info.code } };
}

function describe(exception: unknown, request: Pick<ErrorTarget, 'method' | 'url'>): ErrorInfo {
  if (exception instanceof ApiError) {
    return {
      status: exception.status,
      message: exception.message,
      type: exception.type,
      param: exception.param,
      code: exception.code,
      retryAfter: exception.retryAfter,
    };
  }
  if (isOrchestratorError(exception)) {
    const retryAfter = exception.retryAfterSeconds;
    return {
      status: exception.status,
      message: exception.message,
      type: exception.type,
      param: null,
      code: exception.code,
      retryAfter: retryAfter === undefined ? undefined : String(retryAfter),
    };
  }
  if (exception instanceof UpstreamHttpError) {
    const error = (exception.json as { error?: Record<string, unknown> } | undefined)?.error;
    return {
      status: exception.status,
      message: upstreamMessage(exception.json) ?? `The provider answered ${exception.status}.`,
      type: typeof error?.type === 'string' ? error.type : undefined,
      param: typeof error?.param === 'string' ? error.param : null,
      code: typeof error?.code === 'string' ? error.code : null,
      retryAfter: exception.retryAfter,
    };
  }
  if (exception instanceof UpstreamProtocolError) {
    return { status: 502, message: exception.message, param: null, code: null };
  }
  // A stream this request joined too late (its start no longer kept, here or in Redis): the answer is likely in the
  // window by the time the client tries again.
  if (exception instanceof FlightOutgrownError) {
    return {
      status: 503,
      message: exception.message,
      type: 'server_error',
      param: null,
      code: 'stream_not_joinable',
      retryAfter: '1',
    };
  }
  if (isFrameworkHttpError(exception)) {
    const status = exception.getStatus();
    if (status === 404) {
      const url = (request.url ?? '').split('?')[0].slice(0, 200);
      return { status, message: `Invalid URL (${request.method} ${url}).`, param: null, code: 'unknown_url' };
    }
    return fromFrameworkError(exception.cause ?? exception, status, exception.message);
  }
  const status =
    (exception as { statusCode?: unknown; status?: unknown } | undefined)?.statusCode ??
    (exception as { status?: unknown } | undefined)?.status;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    return fromFrameworkError(exception, status, (exception as Error).message);
  }
  // A provider that reset, refused or dropped the connection (after the gateway's own retry): its failure, not ours.
  if (isTransientFailure(exception)) {
    return {
      status: 502,
      message: 'The provider closed the connection or could not be reached.',
      param: null,
      code: 'upstream_connection_error',
    };
  }
  return { status: 500, message: 'The gateway failed to handle this request.', param: null, code: 'internal_error' };
}

/** Body-parser (Express) and content-type-parser (Fastify) errors, named plainly. */
function fromFrameworkError(error: unknown, status: number, fallback: string): ErrorInfo {
  const e = error as { type?: string; code?: string; name?: string; limit?: number };
  if (status === 413 || e.type === 'entity.too.large' || e.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return {
      status: 413,
      message: `The request body is larger than this gateway accepts${e.limit ? ` (${e.limit} bytes)` : ''}.`,
      param: null,
      code: 'request_too_large',
    };
  }
  if (status === 415 || e.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
    return {
      status: 415,
      message: 'Content-Type must be application/json.',
      param: null,
      code: 'unsupported_media_type',
    };
  }
  if (
    e.type === 'entity.parse.failed' ||
    e.name === 'SyntaxError' ||
    e.code === 'FST_ERR_CTP_INVALID_JSON_BODY' ||
    e.code === 'FST_ERR_CTP_EMPTY_JSON_BODY'
  ) {
    return { status: 400, message: 'The request body is not valid JSON.', param: null, code: 'invalid_json' };
  }
  if (e.type === 'encoding.unsupported' || e.type === 'charset.unsupported') {
    return {
      status: 415,
      message: 'The request body encoding is not supported.',
      param: null,
      code: 'unsupported_encoding',
    };
  }
  return {
    status,
    message: status < 500 ? fallback.slice(0, 300) : 'The gateway failed to handle this request.',
    param: null,
    code: null,
  };
}

/** The API of a request no route serves (a 404): llama.cpp's in front of a llama.cpp server, else OpenAI's. */
export function unroutedApi(config: GatewayConfig): ClientApi {
  return config.provider === 'llama' ? 'llama' : 'openai';
}

/** `errorReply`'s logger for answers made outside any request the gateway serves: none is worth a line of its own. */
export const UNLOGGED = { warn: (): void => undefined };

/** The API a request speaks by its path alone (before any route ran): its route's, else the unrouted one. */
export function apiOfUrl(config: GatewayConfig, url: string | undefined): ClientApi {
  const route = routeAt(url ?? '/');
  return route ? ROUTES[route].api : unroutedApi(config);
}

/**
 * Answers `error` in `api` on a response the gateway refuses before (or without) any route (a host it does not serve,
 * a client too slow to send its request, the control routes failing to start), and closes the connection after it.
 */
export function answerAndClose(response: ServerResponse, error: ApiError, api: ClientApi): void {
  const reply = errorReply(error, { api }, UNLOGGED);
  response.writeHead(reply.status, {
    ...reply.headers,
    connection: 'close',
    'content-length': String(reply.body.length),
  });
  response.end(reply.body);
}

/** Nest's `HttpException` (a control route's refusal), told by its shape: the data plane answers without loading Nest. */
interface FrameworkHttpError extends Error {
  getStatus(): number;
  getResponse(): unknown;
}

function isFrameworkHttpError(exception: unknown): exception is FrameworkHttpError {
  return (
    exception instanceof Error &&
    typeof (exception as Partial<FrameworkHttpError>).getStatus === 'function' &&
    typeof (exception as Partial<FrameworkHttpError>).getResponse === 'function'
  );
}
