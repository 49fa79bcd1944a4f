import { Observable } from 'rxjs';
import { Agent, request, type Dispatcher } from 'undici';

/** The provider answered with an error status; relayed to the client (reshaped) after the retry policy ran. */
export class UpstreamHttpError extends Error {
  override name = 'UpstreamHttpError';
  constructor(
    readonly status: number,
    /** Parsed error body, if it was JSON. */
    readonly body: unknown,
    readonly retryAfter?: string,
  ) {
    super(upstreamMessage(body) ?? `The provider answered ${status}.`);
  }
}

export interface UpstreamCall {
  method: 'GET' | 'POST';
  url: string;
  headers: Record<string, string>;
  body?: unknown;
  signal?: AbortSignal;
}

// An error body is only read to relay its message: more than this is not worth holding.
const MAX_ERROR_BODY = 64 * 1024;

/**
 * HTTP to the provider over one keep-alive undici Agent. Every call carries
 * its own AbortSignal, so a timed-out or abandoned call really stops.
 */
export class UpstreamClient {
  private readonly agent: Agent;

  constructor(timeoutMs: number) {
    // undici's own timers are only a backstop behind the orchestrator's time limits.
    const backstop = Math.max(timeoutMs * 2, 300_000);
    this.agent = new Agent({ keepAliveTimeout: 30_000, headersTimeout: backstop, bodyTimeout: backstop, connections: 1024 });
  }

  /** A plain JSON answer. */
  async json(call: UpstreamCall): Promise<unknown> {
    const response = await this.send(call);
    const text = await response.body.text();
    try {
      return JSON.parse(text);
    } catch {
      throw new UpstreamHttpError(502, { error: { message: 'The provider sent a body that is not JSON.' } });
    }
  }

  /**
   * A streamed answer: resolves once the provider's headers are in (a non-2xx
   * status rejects here, before anything reaches the client), then yields the
   * body as text, as it arrives.
   */
  async stream(call: UpstreamCall): Promise<Observable<string>> {
    const response = await this.send(call);
    return bodyText(response.body);
  }

  /** True when the URL answers 2xx within the signal's time. */
  async probe(url: string, headers: Record<string, string>, signal: AbortSignal): Promise<boolean> {
    const response = await request(url, { method: 'GET', headers, signal, dispatcher: this.agent });
    await response.body.dump();
    return response.statusCode >= 200 && response.statusCode < 300;
  }

  close(): Promise<void> {
    return this.agent.close();
  }

  private async send(call: UpstreamCall): Promise<Dispatcher.ResponseData> {
    const response = await request(call.url, {
      method: call.method,
      headers: call.body === undefined ? call.headers : { 'content-type': 'application/json', ...call.headers },
      body: call.body === undefined ? undefined : JSON.stringify(call.body),
      signal: call.signal,
      dispatcher: this.agent,
    });
    if (response.statusCode >= 400) {
      const text = await readCapped(response.body, MAX_ERROR_BODY);
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        body = undefined;
      }
      const retryAfter = response.headers['retry-after'];
      throw new UpstreamHttpError(response.statusCode, body, typeof retryAfter === 'string' ? retryAfter : undefined);
    }
    return response;
  }
}

function bodyText(body: Dispatcher.ResponseData['body']): Observable<string> {
  return new Observable<string>((subscriber) => {
    const decoder = new TextDecoder();
    body.on('data', (bytes: Buffer) => {
      const text = decoder.decode(bytes, { stream: true });
      if (text) subscriber.next(text);
    });
    body.once('end', () => {
      const rest = decoder.decode();
      if (rest) subscriber.next(rest);
      subscriber.complete();
    });
    body.once('error', (error) => subscriber.error(error));
    return () => {
      if (!body.destroyed) body.destroy();
    };
  });
}

async function readCapped(body: Dispatcher.ResponseData['body'], max: number): Promise<string> {
  let text = '';
  for await (const chunk of body) {
    text += (chunk as Buffer).toString('utf8');
    if (text.length > max) {
      body.destroy();
      return text.slice(0, max);
    }
  }
  return text;
}

/** The message of an OpenAI-, Anthropic- or llama.cpp-shaped error body. */
export function upstreamMessage(body: unknown): string | undefined {
  const error = (body as { error?: unknown } | undefined)?.error;
  if (typeof error === 'string') return error;
  const message = (error as { message?: unknown } | undefined)?.message;
  return typeof message === 'string' ? message : undefined;
}
