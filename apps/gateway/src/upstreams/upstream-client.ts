import { Agent, request, type Dispatcher } from 'undici';

/**
 * HTTP to the provider over one keep-alive undici Agent: the connection pools
 * every call goes through (see `UpstreamExchange`), and the small GETs of the
 * health probe and identity checks. Every call can be aborted, so a timed-out
 * or abandoned call really stops.
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

  /** The connection pools, for calls that dispatch their own handler (`UpstreamExchange`). */
  get dispatcher(): Dispatcher {
    return this.agent;
  }

  /** Aborts what is still running (the gateway drained its clients first): shutdown never waits on the provider. */
  close(): Promise<void> {
    return this.agent.destroy();
  }
}
