import type { IncomingMessage } from 'node:http';

const REQUEST_CONTEXT = Symbol('gateway.request-context');

/** Per-request facts the gateway keeps: its id and the moments that make up `Server-Timing`. */
export interface RequestContext {
  id: string;
  /** performance.now() at arrival. */
  startedAt: number;
  /** When this request's own upstream call started (absent if it joined another or was answered from the window). */
  upstreamStartedAt?: number;
  /** When the provider's response headers arrived. */
  upstreamAnsweredAt?: number;
}

type WithContext = IncomingMessage & { [REQUEST_CONTEXT]?: RequestContext; raw?: WithContext };

export function attachContext(request: IncomingMessage, context: RequestContext): void {
  (request as WithContext)[REQUEST_CONTEXT] = context;
}

/** The context of a Node request, or of the Node request under a Fastify one. */
export function contextOf(request: unknown): RequestContext {
  const r = request as WithContext;
  const context = r[REQUEST_CONTEXT] ?? r.raw?.[REQUEST_CONTEXT];
  if (!context) throw new Error('request context missing: RequestContextMiddleware did not run');
  return context;
}

/** `Server-Timing`: time queued (dedup, breaker check, concurrency slot), time upstream, and total. */
export function serverTiming(context: RequestContext, now: number): string {
  const ms = (n: number) => n.toFixed(1);
  const parts: string[] = [];
  if (context.upstreamStartedAt !== undefined) {
    parts.push(`queue;dur=${ms(context.upstreamStartedAt - context.startedAt)}`);
    parts.push(`upstream;dur=${ms((context.upstreamAnsweredAt ?? now) - context.upstreamStartedAt)}`);
  }
  parts.push(`total;dur=${ms(now - context.startedAt)}`);
  return parts.join(', ');
}
