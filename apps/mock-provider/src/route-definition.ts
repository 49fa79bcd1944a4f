import type { ApiFamily } from './api-errors.js';
import type { Exchange } from './exchange.js';

export interface RouteDefinition {
  method: 'GET' | 'POST';
  /** The first path is the canonical one; the rest are aliases served by the same handler. */
  paths: readonly string[];
  family: ApiFamily;
  /** Whether `stream: true` in the body switches the answer to SSE (and so is recorded as a streamed call). */
  streams: boolean;
  /** Message for a 400 answer, or undefined when the body is acceptable. Only called with a parsed JSON object. */
  validate?: (body: Record<string, unknown>) => string | undefined;
  handle: (exchange: Exchange, body: Record<string, unknown>) => Promise<void> | void;
}

export function sse(payload: unknown): string {
  return `data: ${JSON.stringify(payload)}\n\n`;
}

export function namedSse(event: string, payload: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(payload)}\n\n`;
}

export function unixSeconds(): number {
  return Math.floor(Date.now() / 1000);
}
