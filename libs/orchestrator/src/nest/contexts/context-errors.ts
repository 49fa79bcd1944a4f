import type { OrchestratorError } from '../../core/errors.js';
import { loadOptional } from '../../core/optional-dependency.js';

/**
 * What a microservice, WebSocket or GraphQL caller gets for an orchestrator
 * error (breaker open, overload, queue wait, time limit, shutting down):
 * `code` is the error's code in upper case (`CIRCUIT_OPEN`, `OVERLOADED`,
 * `QUEUE_TIMEOUT`, `UPSTREAM_TIMEOUT`, `SHUTTING_DOWN`, `NO_UPSTREAM_AVAILABLE`).
 */
export interface OrchestratorErrorPayload {
  /** `'error'`, as Nest's own microservice and WebSocket errors say. */
  status: 'error';
  code: string;
  message: string;
  /** How long to wait before trying again, when waiting helps. */
  retryAfterMs?: number;
  /** Whether trying again elsewhere makes sense now (a replica shutting down). */
  retryable: boolean;
}

/** The payload of an orchestrator error as microservice and WebSocket callers get it (see `OrchestratorErrorPayload`). */
export function errorPayload(error: OrchestratorError): OrchestratorErrorPayload {
  const payload: OrchestratorErrorPayload = {
    status: 'error',
    code: error.code.toUpperCase(),
    message: error.message,
    retryable: error.retryable,
  };
  if (error.retryAfterSeconds !== undefined) payload.retryAfterMs = error.retryAfterSeconds * 1000;
  return payload;
}

/**
 * An orchestrator error as a GraphQL resolver throws it: graphql-js keeps the
 * `extensions` of the error a resolver throws, so the response carries
 * `{ message, extensions: { code: 'CIRCUIT_OPEN', retryAfterMs, retryable } }`
 * without this package importing `graphql`.
 */
export class OrchestratorGraphQLError extends Error {
  readonly extensions: { code: string; retryAfterMs?: number; retryable: boolean };

  constructor(override readonly cause: OrchestratorError) {
    super(cause.message);
    this.name = 'OrchestratorGraphQLError';
    const { code, retryAfterMs, retryable } = errorPayload(cause);
    this.extensions = retryAfterMs === undefined ? { code, retryable } : { code, retryAfterMs, retryable };
  }
}

type ExceptionClass = new (error: object) => Error;

let rpcException: Promise<ExceptionClass> | undefined;
let wsException: Promise<ExceptionClass> | undefined;

/**
 * `RpcException` / `WsException` of the app's own `@nestjs/microservices` /
 * `@nestjs/websockets` (Nest's exception filters recognise them by class),
 * loaded on first use: apps without those transports need not install them.
 */
export function transportException(kind: 'rpc' | 'ws'): Promise<ExceptionClass> {
  if (kind === 'rpc') {
    return (rpcException ??= loadOptional<{ RpcException: ExceptionClass }>(
      '@nestjs/microservices',
      'Orchestrator decorators on microservice handlers',
    ).then((m) => m.RpcException));
  }
  return (wsException ??= loadOptional<{ WsException: ExceptionClass }>(
    '@nestjs/websockets',
    'Orchestrator decorators on WebSocket gateways',
  ).then((m) => m.WsException));
}
