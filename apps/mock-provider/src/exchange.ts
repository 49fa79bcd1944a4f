import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as delay } from 'node:timers/promises';
import { errorBody, familyHeaders, STATUS_BY_KIND, type ApiFamily, type ErrorKind } from './api-errors.js';
import { nowMs } from './call-recorder.js';
import type { MockCall, MockConfig, MockOutcome } from './mock-provider.types.js';

/** Thrown out of a handler when the client has gone; the dispatcher swallows it. */
/** Events written back to back before a long stream gives the event loop a turn. */
const YIELD_EVERY = 64;

export class ExchangeAborted extends Error {
  constructor() {
    super('client went away');
    this.name = 'ExchangeAborted';
  }
}

/**
 * One counted request from arrival to its last byte. Every wait goes through `wait()`, whose timer is cleared when
 * the connection closes, so a client that leaves mid-latency or mid-stream leaves nothing behind that writes to a
 * dead socket.
 */
export class Exchange {
  private readonly controller = new AbortController();
  private done = false;
  /** Set once the response head is out; llama.cpp timings are measured from here. */
  firstByteAt: number | undefined;

  constructor(
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    readonly call: MockCall,
    /** Configuration as it was when the request arrived. */
    readonly config: MockConfig,
    readonly family: ApiFamily,
    private readonly onFinish: (exchange: Exchange) => void,
  ) {
    // Writes are guarded by `aborted`; this only keeps a late socket error from becoming an uncaught exception.
    res.on('error', () => undefined);
    // 'finish' (last byte handed to the OS) comes before the client can read the answer, so the call log is
    // complete by the time a test has its response.
    res.on('finish', () => this.finish());
    res.on('close', () => {
      this.controller.abort();
      if (this.done) return;
      if (res.writableFinished || call.outcome === 'hang') this.finish();
      else this.finish('client_closed');
    });
  }

  get aborted(): boolean {
    return this.controller.signal.aborted;
  }

  get seq(): number {
    return this.call.seq;
  }

  /** Model name to report on OpenAI and Anthropic routes: the one asked for, else the configured one. */
  get requestedModel(): string {
    return this.call.model ?? this.config.model;
  }

  async wait(ms: number): Promise<void> {
    if (this.aborted) throw new ExchangeAborted();
    // A zero wait skips the timer entirely: benchmarks with no latency should pay nothing for it.
    if (ms <= 0) return;
    try {
      await delay(ms, undefined, { signal: this.controller.signal });
    } catch {
      throw new ExchangeAborted();
    }
  }

  latencyMs(): number {
    const { latencyMs, latencyJitterMs } = this.config;
    return latencyMs + (latencyJitterMs > 0 ? Math.random() * latencyJitterMs : 0);
  }

  setOutcome(outcome: MockOutcome): void {
    this.call.outcome = outcome;
  }

  sendJson(status: number, payload: unknown, headers: Record<string, string> = {}): void {
    if (this.aborted || this.res.headersSent) return;
    const body = JSON.stringify(payload);
    this.writeHead(status, {
      ...headers,
      'content-type': 'application/json; charset=utf-8',
      'content-length': String(Buffer.byteLength(body)),
    });
    this.res.end(body);
  }

  sendError(kind: ErrorKind, message: string, headers: Record<string, string> = {}): void {
    if (kind === 'invalid_request' || kind === 'too_large') this.setOutcome('bad_request');
    this.sendJson(STATUS_BY_KIND[kind], errorBody(this.family, kind, message, this.seq), headers);
  }

  /**
   * Writes SSE events spaced by the configured chunk gap (the first goes out at once: latency was already paid).
   * After `cutAfterChunks` events: cutStream destroys the socket; truncStream ends the response cleanly, without
   * the stream's end marker; errorStream sends an error event in the API's own format, then ends cleanly. Events are
   * produced lazily so a final event can report timings measured at the moment it is sent.
   */
  async sendStream(events: Iterable<string>): Promise<void> {
    const { mode, modeOptions, streamChunkDelayMs } = this.config;
    const gap = mode === 'slowStream' ? modeOptions.slowChunkDelayMs : streamChunkDelayMs;
    const stopsEarly = mode === 'cutStream' || mode === 'truncStream' || mode === 'errorStream';
    const cutAfter = stopsEarly ? modeOptions.cutAfterChunks : Infinity;
    if (this.aborted) throw new ExchangeAborted();
    this.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
    });
    let sent = 0;
    for (const event of events) {
      if (sent >= cutAfter) return this.stopEarly();
      if (sent > 0) await this.wait(gap);
      // Back to back, a long stream still lets other requests have the event loop now and then, as a real server's
      // many connections would.
      if (gap <= 0 && sent > 0 && sent % YIELD_EVERY === 0) await new Promise((resolve) => setImmediate(resolve));
      if (this.aborted) throw new ExchangeAborted();
      // A reader that is behind holds the stream back, as a real server's blocking send would.
      if (!this.res.write(event)) await this.drained();
      sent++;
    }
    // The last event was also the stop point: the client must still see the stream break, not end cleanly.
    if (sent >= cutAfter) return this.stopEarly();
    this.res.end();
  }

  private drained(): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.res.removeListener('drain', done);
        this.res.removeListener('close', done);
        resolve();
      };
      this.res.once('drain', done);
      this.res.once('close', done);
    });
  }

  private stopEarly(): void {
    if (this.config.mode === 'cutStream') return this.cut();
    this.setOutcome('cut');
    this.finish();
    if (this.config.mode === 'errorStream') {
      const error = errorBody(
        this.family,
        'internal',
        'The mock provider failed mid-stream (errorStream mode).',
        this.seq,
      );
      this.res.write(
        this.family === 'anthropic'
          ? `event: error\ndata: ${JSON.stringify(error)}\n\n`
          : `data: ${JSON.stringify(error)}\n\n`,
      );
    }
    this.res.end();
  }

  /** Ends the connection with no (further) answer. `reset` sends a TCP RST; the others close normally. */
  hangUp(outcome: 'reset' | 'hang'): void {
    this.setOutcome(outcome);
    this.finish();
    const socket = this.req.socket;
    if (outcome === 'reset') socket.resetAndDestroy();
    else socket.destroy();
  }

  /** Idempotent; `outcome` overrides the recorded one. */
  finish(outcome?: MockOutcome): void {
    if (this.done) return;
    this.done = true;
    if (outcome !== undefined) this.call.outcome = outcome;
    this.onFinish(this);
  }

  private cut(): void {
    this.setOutcome('cut');
    this.finish();
    // Headers may still be queued when nothing was written yet (cutAfterChunks 0).
    this.res.flushHeaders();
    // destroySoon flushes what was written before closing, so the client really receives the promised chunks;
    // the missing chunked-encoding terminator is what makes the stream read as broken.
    this.req.socket.destroySoon();
  }

  private writeHead(status: number, headers: Record<string, string>): void {
    this.call.status = status;
    this.firstByteAt = nowMs();
    this.res.writeHead(status, { ...familyHeaders(this.family, this.seq), ...headers });
  }
}
