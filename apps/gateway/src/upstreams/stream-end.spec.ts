import { describe, expect, it } from '@jest/globals';
import { from } from 'rxjs';
import { UpstreamStreamError, checkStreamEnd, type StreamFormat } from './stream-end.js';

/** The chunks that came through, and how the stream ended. */
async function run(chunks: string[], format: StreamFormat): Promise<{ out: string; error?: UpstreamStreamError }> {
  const out: string[] = [];
  return new Promise((resolve) => {
    checkStreamEnd(from(chunks), format).subscribe({
      next: (chunk) => out.push(chunk),
      error: (error: unknown) => resolve({ out: out.join(''), error: error as UpstreamStreamError }),
      complete: () => resolve({ out: out.join('') }),
    });
  });
}

const event = (name: string, data: object) => `event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`;

describe('checkStreamEnd', () => {
  it('a Responses API stream ends with response.completed (or response.incomplete); no [DONE] follows', async () => {
    const head = [event('response.created', {}), event('response.output_text.delta', { delta: 'hi' })];
    expect((await run([...head, event('response.completed', {})], 'responses')).error).toBeUndefined();
    expect((await run([...head, event('response.incomplete', {})], 'responses')).error).toBeUndefined();
    const cut = await run(head, 'responses');
    expect(cut.error).toBeInstanceOf(UpstreamStreamError);
    expect(cut.error!.delivered).toBe(false);
    const failed = await run([...head, event('response.failed', {})], 'responses');
    expect(failed.error!.delivered).toBe(true);
  });

  it('passes the bytes through unchanged, and keeps the error event it saw', async () => {
    const chunks = [
      'data: {"index":0,"content":"a","stop":false}\n\n',
      'data: {"error":{"code":400,"message":"too long","type":"exceed_context_size_error"}}\n\n',
    ];
    const { out, error } = await run(chunks, 'llama');
    expect(out).toBe(chunks.join(''));
    expect(error).toBeInstanceOf(UpstreamStreamError);
    expect(error!.delivered).toBe(true);
    expect(error!.event).toEqual({ error: { code: 400, message: 'too long', type: 'exceed_context_size_error' } });
  });
});
