import type { IncomingMessage, ServerResponse } from 'node:http';

const STREAM_MARKER = Buffer.from('"stream":true');

/**
 * One prepared answer for every OpenAI-route model call, for benchmarks of what sits in front of the provider:
 * the request is read as bytes and never parsed, the answer is written from a Buffer made once. A provider that
 * costs less per request than the proxy it serves is what lets a benchmark measure the proxy instead of the
 * provider. The answer is a chat completion, or, when the request asks to stream, a stream of `events` chunks and
 * `[DONE]` in one write (as a fast provider's back-to-back events arrive coalesced).
 */
export class FixedAnswers {
  private readonly json: Buffer;
  private readonly stream: Buffer;

  constructor(events: number, model: string) {
    const created = Math.floor(Date.now() / 1000);
    this.json = Buffer.from(
      JSON.stringify({
        id: 'chatcmpl-mock-fixed',
        object: 'chat.completion',
        created,
        model,
        system_fingerprint: 'fp_mock',
        choices: [{ index: 0, message: { role: 'assistant', content: 'A fixed answer.', refusal: null }, logprobs: null, finish_reason: 'stop' }],
        usage: { prompt_tokens: 10, completion_tokens: 3, total_tokens: 13 },
      }),
    );
    const chunk = (delta: object, finish: string | null) =>
      `data: ${JSON.stringify({ id: 'chatcmpl-mock-fixed', object: 'chat.completion.chunk', created, model, system_fingerprint: 'fp_mock', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
    let text = chunk({ role: 'assistant', content: '' }, null);
    for (let i = 0; i < events; i++) text += chunk({ content: `w${i} ` }, null);
    text += chunk({}, 'stop') + 'data: [DONE]\n\n';
    this.stream = Buffer.from(text);
  }

  /** Whether the request body asks for a stream (a byte search: the body is not parsed). */
  static streams(body: Buffer): boolean {
    return body.includes(STREAM_MARKER);
  }

  write(res: ServerResponse, stream: boolean): number {
    const body = stream ? this.stream : this.json;
    res.writeHead(200, {
      'content-type': stream ? 'text/event-stream; charset=utf-8' : 'application/json; charset=utf-8',
      'content-length': String(body.length),
    });
    res.end(body);
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
