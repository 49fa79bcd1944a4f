import { Catch, HttpException, Logger, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { ClientClosedError, isOrchestratorError, isTransientFailure } from 'nest-prompt-orchestrator';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { UpstreamHttpError, upstreamMessage } from '../upstream/upstream-client.js';

interface ErrorInfo {
  status: number;
  message: string;
  type?: string;
  param: string | null;
  code: string | null;
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

// Provider messages sometimes quote a (masked) key: such fragments never reach a client or a log.
const KEY_LIKE = /\b(sk|pk|rk|key|tok|sess)-[\w*.-]{4,}/gi;

/**
 * Every error the gateway answers with, in the client's API shape (OpenAI, or
 * Anthropic on /v1/messages), with `x-should-retry: false`: the gateway has
 * already applied its own retry policy, so retries happen at one layer only.
 * No stack trace, no credential, no internal detail reaches the client.
 */
@Catch()
export class GatewayExceptionFilter implements ExceptionFilter {
  private readonly logger = new Logger('Gateway');

  constructor(private readonly adapterHost: HttpAdapterHost) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const request = http.getRequest<IncomingMessage & { raw?: IncomingMessage }>();
    const response = http.getResponse<ServerResponse | { raw: ServerResponse }>();
    const raw = 'raw' in response ? response.raw : response;
    if (exception instanceof HttpException && exception.cause instanceof ClientClosedError) return;
    if (raw.headersSent) {
      if (!raw.writableEnded) raw.destroy();
      return;
    }
    const info = describe(exception, request);
    if (info.status >= 500 && !(exception instanceof HttpException)) {
      const name = (exception as Error | undefined)?.name ?? 'Error';
      const requestId = raw.getHeader('x-request-id');
      this.logger.warn(`request ${String(requestId)} failed with ${info.status} (${name}: ${redact(info.message)})`);
    }
    const adapter = this.adapterHost.httpAdapter;
    const anthropic = (request.url ?? '').startsWith('/v1/messages');
    adapter.setHeader(response, 'x-should-retry', 'false');
    if (info.retryAfter) adapter.setHeader(response, 'retry-after', info.retryAfter);
    const message = redact(info.message);
    const body = anthropic
      ? {
          type: 'error',
          error: { type: ANTHROPIC_TYPE[info.status] ?? (info.status >= 500 ? 'api_error' : 'invalid_request_error'), message },
          request_id: raw.getHeader('x-request-id') ?? null,
        }
      : {
          error: {
            message,
            type: info.type ?? OPENAI_TYPE[info.status] ?? (info.status >= 500 ? 'server_error' : 'invalid_request_error'),
            param: info.param,
            code: info.code,
          },
        };
    adapter.reply(response, body, info.status);
  }
}

function describe(exception: unknown, request: IncomingMessage): ErrorInfo {
  if (exception instanceof UpstreamHttpError) {
    const error = (exception.body as { error?: Record<string, unknown> } | undefined)?.error;
    return {
      status: exception.status,
      message: upstreamMessage(exception.body) ?? `The provider answered ${exception.status}.`,
      type: typeof error?.type === 'string' ? error.type : undefined,
      param: typeof error?.param === 'string' ? error.param : null,
      code: typeof error?.code === 'string' ? error.code : null,
      retryAfter: exception.retryAfter,
    };
  }
  if (exception instanceof HttpException) {
    const status = exception.getStatus();
    const body = exception.getResponse();
    const error = (body as { error?: Record<string, unknown> }).error;
    if (error && typeof error.message === 'string') {
      const retryAfter = isOrchestratorError(exception.cause) ? exception.cause.retryAfterSeconds : undefined;
      return {
        status,
        message: error.message,
        type: typeof error.type === 'string' ? error.type : undefined,
        param: typeof error.param === 'string' ? error.param : null,
        code: typeof error.code === 'string' ? error.code : null,
        retryAfter: retryAfter === undefined ? undefined : String(retryAfter),
      };
    }
    if (status === 404) {
      const url = (request.url ?? '').split('?')[0].slice(0, 200);
      return { status, message: `Invalid URL (${request.method} ${url}).`, param: null, code: 'unknown_url' };
    }
    return fromFrameworkError(exception.cause ?? exception, status, exception.message);
  }
  const status = (exception as { statusCode?: unknown; status?: unknown } | undefined)?.statusCode ??
    (exception as { status?: unknown } | undefined)?.status;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    return fromFrameworkError(exception, status, (exception as Error).message);
  }
  // A provider that reset, refused or dropped the connection (after the gateway's own retry): its failure, not ours.
  if (isTransientFailure(exception)) {
    return { status: 502, message: 'The provider closed the connection or could not be reached.', param: null, code: 'upstream_connection_error' };
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
    return { status: 415, message: 'Content-Type must be application/json.', param: null, code: 'unsupported_media_type' };
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
    return { status: 415, message: 'The request body encoding is not supported.', param: null, code: 'unsupported_encoding' };
  }
  return { status, message: status < 500 ? fallback.slice(0, 300) : 'The gateway failed to handle this request.', param: null, code: null };
}

function redact(message: string): string {
  return message.replace(KEY_LIKE, '[redacted]');
}
