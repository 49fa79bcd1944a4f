import { Observable } from 'rxjs';
import { Agent, request, type Dispatcher } from 'undici';
import type { ClientApi } from '../common/apis.js';

/** The provider answered with an error status; relayed to the client after the retry policy ran. */
export class UpstreamHttpError extends Error {
  override name = 'UpstreamHttpError';
  private parsed?: { value: unknown };

  constructor(
    readonly status: number,
    /** The error body as the provider sent it (capped). */
    readonly body: Buffer,
    readonly contentType: string | undefined,
    /** The API the provider answered in: its error format. */
    readonly api: ClientApi,
    readonly retryAfter?: string,
  ) {
    super(`The provider answered ${status}.`);
  }

  /** The body parsed as JSON, or undefined when it is not JSON. */
  get json(): unknown {
    if (!this.parsed) {
      let value: unknown;
      try {
        value = JSON.parse(this.body.toString('utf8'));
      } catch {
        value = undefined;
      }
      this.parsed = { value };
    }
    return this.parsed.value;
  }

  /** The message of an OpenAI-, Anthropic- or llama.cpp-shaped error body. */
  get upstreamMessage(): string | undefined {
    return upstreamMessage(this.json);
  }
}

/** The provider's 2xx answer was not what the route expects (e.g. not JSON). */
export class UpstreamProtocolError extends Error {
  override name = 'UpstreamProtocolError';
  readonly status = 502;
}

export interface UpstreamCall {
  method: 'GET' | 'POST' | 'DELETE';
  url: string;
  headers: Record<string, string>;
  /** Bytes sent as they are (a pass-through), or an object serialised once here (a translation). */
  body?: Buffer | object;
  signal?: AbortSignal;
  /** The API of the provider's answer on this route. */
  api: ClientApi;
}

/** A 2xx answer whose headers are in; its body is read either as a stream of text or as bytes. */
export interface UpstreamAnswer {
  status: number;
  /** The provider's Content-Type, as it sent it. */
  contentType: string | undefined;
  /** True for `text/event-stream`: the answer is a stream, whatever the request said. */
  isEventStream: boolean;
  /** The body as text, as it arrives. */
  text(): Observable<string>;
  /** The whole body. */
  bytes(): Promise<Buffer>;
}

/** An error body is only relayed or read for its message: more than this is not worth holding. */
export const MAX_ERROR_BODY = 64 * 1024;

/**
 * HTTP to the provider over one keep-alive undici Agent. Every call carries
 * its own AbortSignal, so a timed-out or abandoned call really stops.
 */
export class UpstreamClient {
  private readonly agent: Agent;

  constructor(timeoutMs: number) {
    // undici's own timers are only a backstop behind the orchestrator's time limits.
    const backstop = Math.max(timeoutMs * 2, 300_000);
    this.agent = new Agent({
      keepAliveTimeout: 30_000,
      headersTimeout: backstop,
      bodyTimeout: backstop,
      connections: 1024,
    });
  }

  /**
   * Sends the call and resolves once the provider's headers are in; a status of
   * 400 or more rejects here (with its body), before anything reaches the client.
   */
  async open(call: UpstreamCall): Promise<UpstreamAnswer> {
    const response = await this.send(call);
    const type = headerOf(response, 'content-type');
    return {
      status: response.statusCode,
      contentType: type,
      isEventStream: type !== undefined && /^text\/event-stream\b/i.test(type),
      text: () => bodyText(response.body),
      bytes: async () => Buffer.from(await response.body.arrayBuffer()),
    };
  }

  /**
   * True when the URL answers within the signal's time with anything below 500. A 401 or 404 is the provider
   * serving (a pass-through gateway has no key of its own to probe with, and the real APIs refuse a keyless model
   * list); no answer, a 5xx (llama-server's 503 while loading) or a timeout is the provider down.
   */
  async probe(url: string, headers: Record<string, string>, signal: AbortSignal): Promise<boolean> {
    const response = await request(url, { method: 'GET', headers, signal, dispatcher: this.agent });
    await response.body.dump();
    return response.statusCode < 500;
  }

  /** A small JSON answer of a GET (e.g. llama-server's /props), or undefined when there is none. */
  async getJson(url: string, headers: Record<string, string>, signal: AbortSignal): Promise<unknown> {
    const response = await request(url, { method: 'GET', headers, signal, dispatcher: this.agent });
    if (response.statusCode !== 200) {
      await response.body.dump();
      return undefined;
    }
    try {
      return await response.body.json();
    } catch {
      return undefined;
    }
  }

  /** The connection pools, for calls that dispatch their own handler (the data plane's pass-through). */
  get dispatcher(): Dispatcher {
    return this.agent;
  }

  /** Aborts what is still running (the gateway drained its clients first): shutdown never waits on the provider. */
  close(): Promise<void> {
    return this.agent.destroy();
  }

  private async send(call: UpstreamCall): Promise<Dispatcher.ResponseData> {
    const body = call.body === undefined || Buffer.isBuffer(call.body) ? call.body : JSON.stringify(call.body);
    const response = await request(call.url, {
      method: call.method,
      headers: body === undefined ? call.headers : { 'content-type': 'application/json', ...call.headers },
      body,
      signal: call.signal,
      dispatcher: this.agent,
    });
    if (response.statusCode >= 400) {
      const text = await readCapped(response.body, MAX_ERROR_BODY);
      throw new UpstreamHttpError(
        response.statusCode,
        text,
        headerOf(response, 'content-type'),
        call.api,
        headerOf(response, 'retry-after'),
      );
    }
    return response;
  }
}

function headerOf(response: Dispatcher.ResponseData, name: string): string | undefined {
  const value = response.headers[name];
  return typeof value === 'string' ? value : undefined;
}

/**
 * Whether a JSON body's first key is `error`: how every provider here shapes
 * an error object. Read from the first bytes only, so answers are not parsed.
 */
export function startsWithErrorField(body: Buffer): boolean {
  return /^\s*\{\s*"error"\s*:/.test(body.subarray(0, 64).toString('latin1'));
}

/** A JSON document starts with `{` or `[` (after whitespace); anything else is not what a JSON route sends. */
export function looksLikeJson(body: Buffer): boolean {
  for (const byte of body) {
    if (byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09) continue;
    return byte === 0x7b || byte === 0x5b;
  }
  return false;
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

async function readCapped(body: Dispatcher.ResponseData['body'], max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    chunks.push(chunk as Buffer);
    size += (chunk as Buffer).length;
    if (size > max) {
      body.destroy();
      return Buffer.concat(chunks).subarray(0, max);
    }
  }
  return Buffer.concat(chunks);
}

/** The message of an OpenAI-, Anthropic- or llama.cpp-shaped error body. */
export function upstreamMessage(body: unknown): string | undefined {
  const error = (body as { error?: unknown } | undefined)?.error;
  if (typeof error === 'string') return error;
  const message = (error as { message?: unknown } | undefined)?.message;
  return typeof message === 'string' ? message : undefined;
}
