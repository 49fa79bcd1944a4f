import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { from, map, type Observable } from 'rxjs';
import { toCallEvents, type CallWork } from '../call.js';
import type { DedupRequest } from '../dedup/dedup.options.js';
import { isOrchestratorError } from '../errors.js';
import { isRawResponse, type CallEvent, type StreamHead } from '../events.js';
import type { CallRequest, Orchestrator } from '../orchestrator.js';
import {
  DEDUP_HEADER,
  headersSetSince,
  unwrapAnswer,
  withHandlerHeaders,
  type HeaderValues,
} from './answer-headers.js';
import { reuseOf } from './cache-control.js';
import { errorBody, errorHeaders, type ErrorShape } from './errors.js';
import { NodeResponseSink } from './node-response-sink.js';
import type { HttpRoute } from './route.js';

/** One request and its response, as a server framework's adapter hands them over. */
export interface Exchange {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: unknown;
  /** The framework's request object (given to `key`, `store` and `tenant` functions as `request.request`). */
  request: object;
  /** The Node response: watched for the client leaving. */
  raw: ServerResponse;
  setHeader(name: string, value: string): void;
  getHeaders(): HeaderValues;
  /** Sends a value the framework serialises (JSON for objects), with this status. */
  send(value: unknown, status?: number): void;
  /** Sends a stream of text chunks. */
  stream(body: Readable, contentType: string): void;
}

/** Runs the handler of one request under its route's policy and sends the answer (or the error) through `exchange`. */
export async function serve(
  orchestrator: Orchestrator,
  route: HttpRoute,
  exchange: Exchange,
  handler: (signal: AbortSignal) => unknown,
  errorShape: ErrorShape,
): Promise<void> {
  try {
    const policy = route.policyFor(exchange.method);
    if (!policy) return sendValue(exchange, await handler(new AbortController().signal));
    const described: DedupRequest = {
      method: exchange.method,
      url: exchange.url,
      headers: exchange.headers,
      body: exchange.body,
      request: exchange.request,
    };
    const tenant = orchestrator.tenantOf(described);
    const call: CallRequest = { tenant };
    const dedup = policy.dedup;
    if (dedup) {
      call.key = orchestrator.requestKey(policy, described, tenant);
      call.reuse = reuseOf(
        dedup.honorCacheControl ? exchange.headers['cache-control'] : undefined,
        dedup.store?.(described) ?? true,
      );
    }
    const work: CallWork<unknown> = (signal) => {
      // Headers the handler sets while it runs go with the answer to every joined and replayed caller.
      const before = { ...exchange.getHeaders() };
      const answer = from(Promise.resolve().then(() => handler(signal)));
      return toCallEvents(
        answer.pipe(map((value) => withHandlerHeaders(value, headersSetSince(before, exchange.getHeaders())))),
      );
    };
    const started = orchestrator.startLocal(policy, call, work) ?? (await orchestrator.start(policy, call, work));
    if (started.outcome) exchange.setHeader(DEDUP_HEADER, started.outcome);
    if (started.ageSeconds !== undefined) exchange.setHeader('age', String(started.ageSeconds));
    await deliver(started.events, exchange);
  } catch (error) {
    if (!isOrchestratorError(error)) throw error;
    if (error.code === 'client_closed_request') return;
    if (exchange.raw.headersSent) {
      exchange.raw.destroy();
      return;
    }
    for (const [name, value] of Object.entries(errorHeaders(error))) exchange.setHeader(name, value);
    exchange.send(errorBody(error, errorShape), error.status);
  }
}

function sendValue(exchange: Exchange, answer: unknown): void {
  const { value, headers } = unwrapAnswer(answer);
  for (const [name, text] of Object.entries(headers ?? {})) exchange.setHeader(name, text);
  if (!isRawResponse(value)) return exchange.send(value);
  for (const [name, text] of Object.entries({ ...value.headers, 'content-type': value.contentType }))
    exchange.setHeader(name, text);
  exchange.send(value.body, value.status);
}

/**
 * Sends a call's events: a value as soon as it is there; a stream once its
 * first chunk is (an earlier failure is still an ordinary error answer).
 * Resolves when the answer is handed over; rejects with an error to answer.
 */
function deliver(events: Observable<CallEvent<unknown>>, exchange: Exchange): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    new ExchangeSink(exchange, resolve, reject).listen(events);
  });
}

/** Answers through a server framework's `Exchange`, settling `serve`'s promise once the answer is handed over. */
class ExchangeSink extends NodeResponseSink<unknown> {
  constructor(
    private readonly exchange: Exchange,
    private readonly resolve: () => void,
    private readonly reject: (error: unknown) => void,
  ) {
    super(exchange.raw);
  }

  protected answer(value: unknown): void {
    this.stopWatching();
    try {
      sendValue(this.exchange, value);
      this.resolve();
    } catch (error) {
      this.reject(error);
    }
  }

  protected sendStream(body: Readable, head: StreamHead, headers: Record<string, string>): void {
    for (const [name, value] of Object.entries(headers)) this.exchange.setHeader(name, value);
    this.exchange.stream(body, head.contentType);
    this.resolve();
  }

  protected fail(error: unknown): void {
    this.stopWatching();
    this.reject(error);
  }

  protected override completedEmpty(): void {
    this.stopWatching();
    this.resolve();
  }
}
