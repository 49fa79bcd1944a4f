import type { IncomingMessage } from 'node:http';
import type { CallerInfo } from '../gateway.service.js';
import { contextOf } from '../http/request-context.js';
import { clientKey } from '../http/request-context.middleware.js';

/** What the service needs to know about the request it serves. */
export function callerOf(request: IncomingMessage, signal: AbortSignal | undefined): CallerInfo {
  return { context: contextOf(request), signal, clientKey: clientKey(request.headers), headers: request.headers };
}
