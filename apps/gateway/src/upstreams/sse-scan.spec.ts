import { describe, expect, it } from '@jest/globals';
import { UpstreamStreamError } from '../apis/errors.js';
import type { StreamFormat } from '../apis/formats.js';
import { SseScan } from './sse-scan.js';

const openaiChunk = (content: string, usage: 'null' | 'absent' = 'absent') =>
  `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}}}]${usage === 'null' ? ',"usage":null' : ''}}\n\n`;
const USAGE_EVENT =
  'data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}\n\n';

/** Feeds text cut into pieces of `size` bytes; returns what was passed on, and the scan. */
function run(text: string, size: number, scan: SseScan): { out: string; scan: SseScan } {
  const bytes = Buffer.from(text);
  const out: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += size) out.push(...[scan.feed(bytes.subarray(at, at + size))].flat());
  const rest = scan.end();
  if (rest) out.push(rest);
  return { out: Buffer.concat(out).toString(), scan };
}

describe('SseScan', () => {
  it('passes whole chunks of plain events on as the very same Buffer', () => {
    const scan = new SseScan('openai', true, false);
    const chunk = Buffer.from(openaiChunk('hello', 'null') + openaiChunk('world', 'null'));
    expect(scan.feed(chunk)).toBe(chunk);
    expect(scan.verdict).toBeUndefined();
  });

  it('stripping usage, a chunk that finishes a line the last one cut is not copied: that line, then the rest where it lies', () => {
    const scan = new SseScan('openai', true, true);
    const first = Buffer.from(openaiChunk('one', 'null') + 'data: {"id":"c","choi');
    const second = Buffer.from(
      'ces":[{"index":0,"delta":{"content":"two"}}],"usage":null}\n\n' + openaiChunk('three', 'null'),
    );
    expect(scan.feed(first).toString()).toBe(openaiChunk('one', 'null'));
    const out = scan.feed(second);
    expect(Array.isArray(out)).toBe(true);
    const [line, rest] = out as Buffer[];
    expect(line.toString()).toBe('data: {"id":"c","choices":[{"index":0,"delta":{"content":"two"}}],"usage":null}\n');
    expect(rest.toString()).toBe('\n' + openaiChunk('three', 'null'));
    // The rest is a view of the chunk that arrived, not a copy of it.
    expect(rest.buffer).toBe(second.buffer);
    expect(rest.byteOffset).toBe(second.byteOffset + second.indexOf('\n') + 1);
  });

  it('sees the end marker, usage and nothing else, wherever the chunks are cut', () => {
    const text = openaiChunk('a é 😀', 'null') + openaiChunk('b', 'null') + USAGE_EVENT + 'data: [DONE]\n\n';
    for (const size of [1, 2, 3, 7, 16, 64, text.length]) {
      const { out, scan } = run(text, size, new SseScan('openai', true, false));
      expect(out).toBe(text);
      expect(scan.verdict).toBe('end');
      expect(scan.usage).toEqual({ input: 7, output: 5, cached: 0 });
    }
  });

  it('takes out only the usage event it was asked to, wherever the chunks are cut', () => {
    const text = openaiChunk('a', 'null') + USAGE_EVENT + 'data: [DONE]\n\n';
    for (const size of [1, 5, 13, text.length]) {
      const { out, scan } = run(text, size, new SseScan('openai', true, true));
      expect(out).toBe(openaiChunk('a', 'null') + '\ndata: [DONE]\n\n');
      expect(scan.usage?.output).toBe(5);
      expect(scan.verdict).toBe('end');
    }
  });

  it('OpenAI, events coalesced into large reads: usage, error and end are read from the last lines of each read, which alone are decoded', () => {
    const many = (from: number, count: number) =>
      Array.from({ length: count }, (_, i) => openaiChunk(`w${from + i} `, 'null')).join('');
    // The usage event closes one read, [DONE] comes in the next; stripping, the usage event's line is left out.
    const reads = [many(0, 800), many(800, 800) + USAGE_EVENT, 'data: [DONE]\n\n'].map((text) => Buffer.from(text));
    const stripped = new SseScan('openai', true, true);
    // Everything in one read, an error event last.
    const failed = new SseScan('openai', true, false);
    const failing = Buffer.from(many(0, 1600) + 'data: {"error":{"message":"boom"}}\n\n');
    const decoded: number[] = [];
    const original = Buffer.prototype.toString;
    Buffer.prototype.toString = function (
      this: Buffer,
      encoding?: BufferEncoding,
      start?: number,
      end?: number,
    ): string {
      decoded.push(Math.min(end ?? this.length, this.length) - (start ?? 0));
      return original.call(this, encoding, start, end);
    };
    let out: Buffer[];
    try {
      out = reads.map((read) => stripped.feed(read)).flat();
      failed.feed(failing);
    } finally {
      Buffer.prototype.toString = original;
    }
    expect(Buffer.concat(out).toString('latin1')).toBe(many(0, 1600) + '\ndata: [DONE]\n\n');
    expect(stripped.usage).toEqual({ input: 7, output: 5, cached: 0 });
    expect(stripped.verdict).toBe('end');
    expect(failed.verdict).toBe('error');
    expect(failed.errorEvent).toEqual({ error: { message: 'boom' } });
    expect(decoded.length).toBeGreaterThan(0);
    expect(Math.max(...decoded)).toBeLessThan(4096);
  });

  it("a stream without its end marker has no verdict; a [DONE] inside a model's text is not one", () => {
    const { scan } = run(
      openaiChunk('say data: [DONE] now') + openaiChunk('x'),
      10,
      new SseScan('openai', false, false),
    );
    expect(scan.verdict).toBeUndefined();
  });

  it('an error event is an error, with its data; a model writing "error" is not', () => {
    const text = openaiChunk('the word "error" in text') + 'data: {"error":{"message":"boom","code":500}}\n\n';
    const { scan } = run(text, 9, new SseScan('openai', false, false));
    expect(scan.verdict).toBe('error');
    expect(scan.errorEvent).toEqual({ error: { message: 'boom', code: 500 } });
    const clean = run(
      openaiChunk('the word "error" in text') + 'data: [DONE]\n\n',
      9,
      new SseScan('openai', false, false),
    ).scan;
    expect(clean.verdict).toBe('end');
  });

  it('Anthropic: message_stop ends, event: error fails, usage from message_start and message_delta', () => {
    const text =
      'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":11,"output_tokens":1}}}\n\n' +
      'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"hi"}}\n\n' +
      'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":9}}\n\n' +
      'event: message_stop\ndata: {"type":"message_stop"}\n\n';
    for (const size of [1, 11, text.length]) {
      const { scan } = run(text, size, new SseScan('anthropic', true, false));
      expect(scan.verdict).toBe('end');
      expect(scan.usage).toEqual({ input: 11, output: 9, cached: 0 });
    }
    const failed = run(
      'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"x"}}\n\n',
      4,
      new SseScan('anthropic', false, false),
    ).scan;
    expect(failed.verdict).toBe('error');
  });

  it('Responses API: response.completed ends, response.failed fails', () => {
    const done =
      'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"x"}\n\nevent: response.completed\ndata: {"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":4}}}\n\n';
    const { scan } = run(done, 6, new SseScan('responses', true, false));
    expect(scan.verdict).toBe('end');
    expect(scan.usage).toEqual({ input: 3, output: 4, cached: 0 });
    const failed = run(
      'event: response.failed\ndata: {"type":"response.failed"}\n\n',
      6,
      new SseScan('responses', false, false),
    ).scan;
    expect(failed.verdict).toBe('error');
  });

  it('llama.cpp: the stream ends when every prompt said stop, and counts tokens from the last chunk', () => {
    const chunk = (index: number, stop: boolean, extra = '') =>
      `data: {"index":${index},"content":"t","stop":${stop}${extra}}\n\n`;
    const text =
      chunk(0, false) +
      chunk(1, false) +
      chunk(0, true, ',"tokens_evaluated":4,"tokens_predicted":6') +
      chunk(1, false);
    expect(run(text, 5, new SseScan('llama', true, false)).scan.verdict).toBeUndefined();
    const ended = run(
      text + chunk(1, true, ',"tokens_evaluated":4,"tokens_predicted":2'),
      5,
      new SseScan('llama', true, false),
    ).scan;
    expect(ended.verdict).toBe('end');
    expect(ended.usage).toEqual({ input: 4, output: 6, cached: 0 });
  });

  it('a route whose stream format is not fixed is relayed, never judged', () => {
    const scan = new SseScan(false, true, false);
    const chunk = Buffer.from('data: {"error":"anything"}\n');
    expect(scan.feed(chunk)).toBe(chunk);
    expect(scan.verdict).toBeUndefined();
  });
});

describe('SseScan: whole lines for redaction', () => {
  it('holds a line cut across reads until its end, and passes it on whole', () => {
    const scan = new SseScan('openai', false, false, true);
    expect(scan.feed(Buffer.from('data: {"a":"sk-pro')).length).toBe(0);
    const out = [scan.feed(Buffer.from('j-xyz"}\n\n'))].flat().map(String).join('');
    expect(out).toBe('data: {"a":"sk-proj-xyz"}\n\n');
  });

  it('an `event: error` is an error in a chat stream too, read to the end of its data', () => {
    const scan = new SseScan('openai', false, false, true);
    scan.feed(Buffer.from('event: error\n'));
    expect(scan.verdict).toBe('error');
    expect(scan.errorRead).toBe(false);
    scan.feed(Buffer.from('data: {"message":"bad key","type":"server_error"}\n\n'));
    expect(scan.errorRead).toBe(true);
  });

  it('passes on a line too long to hold (memory stays bounded), and reads the lines after it', () => {
    const scan = new SseScan('openai', false, false, true);
    const long = 'data: {"content":"' + 'x'.repeat(300 * 1024);
    const passed = [
      scan.feed(Buffer.from(long.slice(0, 200 * 1024))),
      scan.feed(Buffer.from(long.slice(200 * 1024))),
    ].flat();
    expect(passed.reduce((sum, piece) => sum + piece.length, 0)).toBe(long.length);
    const rest = [scan.feed(Buffer.from('"}\n\ndata: [DONE]\n\n'))].flat().map(String).join('');
    expect(rest).toBe('"}\n\ndata: [DONE]\n\n');
    expect(scan.verdict).toBe('end');
  });

  it('a long line that comes in many small reads is held as copies of its own size, not as the reads, and passed on whole', () => {
    const scan = new SseScan('openai', false, false, true);
    const line = 'data: {"content":"' + 'y'.repeat(100 * 1024) + '"}\n\n';
    // Each piece a small view of a 64 KiB socket read, as undici hands them over.
    const pieces: Buffer[] = [];
    for (let at = 0; at < line.length; at += 1000) {
      const read = Buffer.alloc(64 * 1024);
      const piece = Buffer.from(line.slice(at, at + 1000));
      piece.copy(read);
      pieces.push(read.subarray(0, piece.length));
    }
    const out: Buffer[] = [];
    for (const piece of pieces.slice(0, -1)) {
      out.push(...[scan.feed(piece)].flat());
      // What the scan keeps of the line so far (its private state: one Buffer or several).
      const held = [(scan as unknown as { partial?: Buffer | Buffer[] }).partial ?? []].flat();
      expect(held.length).toBeGreaterThan(0);
      expect(held.every((kept) => kept.buffer.byteLength < 64 * 1024)).toBe(true);
    }
    expect(out.reduce((sum, piece) => sum + piece.length, 0)).toBe(0);
    out.push(...[scan.feed(pieces[pieces.length - 1])].flat());
    expect(Buffer.concat(out).toString()).toBe(line);
  });
});

/** Feeds the chunks as they are; what came through, and how the stream ended (see `SseScan.failure`). */
function ended(chunks: string[], format: StreamFormat): { out: string; error?: UpstreamStreamError } {
  const scan = new SseScan(format, false, false);
  const out = chunks.map((chunk) => [scan.feed(Buffer.from(chunk))].flat()).flat();
  const rest = scan.end();
  if (rest) out.push(rest);
  return { out: Buffer.concat(out).toString(), error: scan.failure(true) };
}

const event = (name: string, data: object) => `event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`;

describe('SseScan: how a stream ends', () => {
  it('a Responses API stream ends with response.completed (or response.incomplete); no [DONE] follows', () => {
    const head = [event('response.created', {}), event('response.output_text.delta', { delta: 'hi' })];
    expect(ended([...head, event('response.completed', {})], 'responses').error).toBeUndefined();
    expect(ended([...head, event('response.incomplete', {})], 'responses').error).toBeUndefined();
    const cut = ended(head, 'responses');
    expect(cut.error).toBeInstanceOf(UpstreamStreamError);
    expect(cut.error!.delivered).toBe(false);
    const failed = ended([...head, event('response.failed', {})], 'responses');
    expect(failed.error!.delivered).toBe(true);
  });

  it('passes the bytes through unchanged, and keeps the error event it saw', () => {
    const chunks = [
      'data: {"index":0,"content":"a","stop":false}\n\n',
      'data: {"error":{"code":400,"message":"too long","type":"exceed_context_size_error"}}\n\n',
    ];
    const { out, error } = ended(chunks, 'llama');
    expect(out).toBe(chunks.join(''));
    expect(error).toBeInstanceOf(UpstreamStreamError);
    expect(error!.delivered).toBe(true);
    expect(error!.event).toEqual({ error: { code: 400, message: 'too long', type: 'exceed_context_size_error' } });
  });
});

/** What a scan keeps of the line under way: the line's pieces while it is held, or the two ends of a long one. */
function heldBytes(scan: SseScan): number {
  const state = scan as unknown as { partial?: Buffer[]; long?: { headBytes: number; tailBytes: number } };
  const partial = (state.partial ?? []).reduce((sum, piece) => sum + piece.length, 0);
  return partial + (state.long ? state.long.headBytes + state.long.tailBytes : 0);
}

/** Feeds `text` in 64 KiB reads; the most the scan kept at once, and what it passed on. */
function fedInReads(text: string, scan: SseScan): { most: number; out: string } {
  const bytes = Buffer.from(text);
  let most = 0;
  const out: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += 64 * 1024) {
    out.push(...[scan.feed(bytes.subarray(at, at + 64 * 1024))].flat());
    most = Math.max(most, heldBytes(scan));
  }
  const rest = scan.end();
  if (rest) out.push(rest);
  return { most, out: Buffer.concat(out).toString() };
}

describe('SseScan: events longer than a line it holds', () => {
  const MiB = 1024 * 1024;
  // Escapes of every length where the long text is cut, and text that looks like JSON.
  const text = (bytes: number) => 'é "quoted" \\ back\\slash \u2028 {"usage":{"fake":1}} \n'.repeat(bytes / 50);
  const usage = '"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}';

  it('an OpenAI event of 4 MB with its usage at the end: passed on as it came, usage read, at most ~400 KiB kept', () => {
    for (const whole of [false, true]) {
      const line = `data: {"id":"c","choices":[{"index":0,"delta":{"content":${JSON.stringify(text(4 * MiB))}}}],${usage}}\n\n`;
      const scan = new SseScan('openai', true, false, whole);
      const { most, out } = fedInReads(line + 'data: [DONE]\n\n', scan);
      expect(out).toBe(line + 'data: [DONE]\n\n');
      expect(scan.usage).toEqual({ input: 7, output: 5, cached: 0 });
      expect(scan.verdict).toBe('end');
      expect(most).toBeLessThan(400 * 1024);
    }
  });

  it('the kept ends do not grow with the event: 16 MB keeps what 1 MB does', () => {
    const kept = [1, 16].map((mb) => {
      const line = `data: {"choices":[{"delta":{"content":"${'x'.repeat(mb * MiB)}"}}]}\n\n`;
      return fedInReads(line, new SseScan('openai', true, false)).most;
    });
    expect(kept[1]).toBe(kept[0]);
  });

  it('a Responses API response.completed carrying 2 MB of output: the stream ends, and its usage is read', () => {
    const completed = JSON.stringify({
      type: 'response.completed',
      response: {
        id: 'r',
        output: [{ type: 'message', content: [{ type: 'output_text', text: text(2 * MiB) }] }],
        usage: { input_tokens: 3, output_tokens: 4 },
      },
    });
    const scan = new SseScan('responses', true, false);
    fedInReads(`event: response.completed\ndata: ${completed}\n\n`, scan);
    expect(scan.verdict).toBe('end');
    expect(scan.usage).toEqual({ input: 3, output: 4, cached: 0 });
  });

  it('llama.cpp: a last chunk of 1 MB still says stop and its token counts', () => {
    const chunk = `data: {"index":0,"content":${JSON.stringify(text(MiB))},"stop":true,"tokens_evaluated":4,"tokens_predicted":6}\n\n`;
    const scan = new SseScan('llama', true, false);
    fedInReads(chunk, scan);
    expect(scan.verdict).toBe('end');
    expect(scan.usage).toEqual({ input: 4, output: 6, cached: 0 });
  });

  it('an error event longer than a line it holds is still an error, read to its end', () => {
    const scan = new SseScan('openai', false, false);
    fedInReads(`data: {"error":{"message":${JSON.stringify(text(MiB))},"code":500}}\n\n`, scan);
    expect(scan.verdict).toBe('error');
    expect(scan.errorRead).toBe(true);
    expect(scan.errorEvent).toMatchObject({ error: { code: 500 } });
  });

  it('a stream that ends inside a long event is read by its ends too, and judged unfinished', () => {
    const scan = new SseScan('openai', true, false);
    fedInReads(`data: {"choices":[{"delta":{"content":"${'y'.repeat(MiB)}"}}],${usage}}`, scan);
    expect(scan.usage).toEqual({ input: 7, output: 5, cached: 0 });
    expect(scan.failure(true)?.message).toMatch(/before its end marker/);
  });
});
