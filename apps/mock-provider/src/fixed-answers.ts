import type { IncomingMessage, ServerResponse } from 'node:http';

const STREAM_MARKER = Buffer.from('"stream":true');

/** How a fixed stream is written: all at once (`intervalMs` 0), or `eventsPerWrite` events every `intervalMs`. */
export interface FixedSpacing {
  intervalMs: number;
  eventsPerWrite: number;
}

/**
 * One prepared answer for every OpenAI-route model call, for benchmarks of what sits in front of the provider:
 * the request is read as bytes and never parsed, the answer is written from a Buffer made once. A provider that
 * costs less per request than the proxy it serves is what lets a benchmark measure the proxy instead of the
 * provider. The answer is a chat completion, or, when the request asks to stream, a stream of `events` chunks and
 * `[DONE]` in one write (as a fast provider's back-to-back events arrive coalesced), or, spaced, a few events per
 * write some ms apart, as a provider sends the events it is generating: each write a view of the prepared stream.
 */
export class FixedAnswers {
  /** The chat completion every non-streaming request is answered with. */
  readonly json: Buffer;
  private readonly stream: Buffer;
  /** The stream cut at event boundaries, `eventsPerWrite` events a piece (spaced streams only). */
  private readonly pieces: Buffer[] = [];

  constructor(
    events: number,
    model: string,
    private readonly spacing: FixedSpacing = { intervalMs: 0, eventsPerWrite: 1 },
  ) {
    const created = Math.floor(Date.now() / 1000);
    this.json = Buffer.from(
      JSON.stringify({
        id: 'chatcmpl-mock-fixed',
        object: 'chat.completion',
        created,
        model,
        system_fingerprint: 'fp_mock',
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: 'A fixed answer.', refusal: null },
            logprobs: null,
            finish_reason: 'stop',
          },
        ],
        usage: { prompt_tokens: 10, completion_tokens: 3, total_tokens: 13 },
      }),
    );
    const chunk = (delta: object, finish: string | null) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-mock-fixed', object: 'chat.completion.chunk', created, model, system_fingerprint: 'fp_mock', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
    const all = [chunk({ role: 'assistant', content: '' }, null)];
    for (let i = 0; i < events; i++) all.push(chunk({ content: `w${i} ` }, null));
    all.push(chunk({}, 'stop'), 'data: [DONE]\n\n');
    this.stream = Buffer.from(all.join(''));
    if (spacing.intervalMs > 0) {
      for (let at = 0, i = 0; i < all.length; i += spacing.eventsPerWrite) {
        const length = Buffer.byteLength(all.slice(i, i + spacing.eventsPerWrite).join(''));
        this.pieces.push(this.stream.subarray(at, at + length));
        at += length;
      }
    }
  }

  /** Whether the request body asks for a stream (a byte search: the body is not parsed). */
  static streams(body: Buffer): boolean {
    return body.includes(STREAM_MARKER);
  }

  write(res: ServerResponse, stream: boolean): number {
    if (stream && this.pieces.length > 0) return this.writeSpaced(res);
    const body = stream ? this.stream : this.json;
    res.writeHead(200, {
      'content-type': stream ? 'text/event-stream; charset=utf-8' : 'application/json; charset=utf-8',
      'content-length': String(body.length),
    });
    res.end(body);
    return 200;
  }

  /** The stream piece by piece, `intervalMs` apart (chunked: no length up front, as a generating provider sends it). */
  private writeSpaced(res: ServerResponse): number {
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
    const pieces = this.pieces;
    let next = 0;
    const send = (): void => {
      if (res.destroyed) return;
      const piece = pieces[next++];
      if (next === pieces.length) return void res.end(piece);
      // A reader that is behind holds the stream back, as a real server's blocking send would.
      if (!res.write(piece)) return void res.once('drain', schedule);
      schedule();
    };
    // One timer per stream, set again after each write.
    const schedule = (): void => {
      timer ??= setTimeout(send, this.spacing.intervalMs);
      timer.refresh();
    };
    let timer: ReturnType<typeof setTimeout> | undefined;
    res.once('close', () => clearTimeout(timer));
    send();
    return 200;
  }
}

/** The request body's bytes (up to `maxBytes`; past that, undefined once the client is done sending). */
export function readBytes(req: IncomingMessage, maxBytes: number): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= maxBytes) parts.push(chunk);
    });
    req.once('end', () => resolve(size > maxBytes ? undefined : parts.length === 1 ? parts[0] : Buffer.concat(parts)));
    req.once('error', () => resolve(undefined));
  });
}
