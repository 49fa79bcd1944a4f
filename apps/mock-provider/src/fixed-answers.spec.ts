import { afterEach, describe, expect, it } from '@jest/globals';
import { parseCli } from './cli-options.js';
import { startMockProvider } from './mock-provider.js';
import type { MockProvider } from './mock-provider.types.js';

const STREAM_BODY = JSON.stringify({ model: 'gpt-test', stream: true, messages: [{ role: 'user', content: 'hi' }] });

/** The body's pieces as they were read, and the response's headers. */
async function streamOf(provider: MockProvider): Promise<{ pieces: string[]; headers: Headers }> {
  const response = await fetch(`${provider.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: STREAM_BODY,
  });
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  const pieces: string[] = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { pieces, headers: response.headers };
    pieces.push(decoder.decode(value, { stream: true }));
  }
}

describe('fixed answers, spaced', () => {
  const started: MockProvider[] = [];
  afterEach(async () => {
    await Promise.all(started.splice(0).map((provider) => provider.close()));
  });

  it('reads --event-interval-ms and --events-per-write', () => {
    const command = parseCli(['--fixed-answers', '20', '--event-interval-ms', '2.5', '--events-per-write', '3'], {});
    expect(command).toEqual({
      kind: 'run',
      options: { fixedAnswerEvents: 20, fixedEventIntervalMs: 2.5, fixedEventsPerWrite: 3 },
    });
  });

  it('sends the same stream as one write does, in pieces of whole events, without a length', async () => {
    const whole = await startMockProvider({ fixedAnswerEvents: 20 });
    started.push(whole);
    const spaced = await startMockProvider({ fixedAnswerEvents: 20, fixedEventIntervalMs: 5, fixedEventsPerWrite: 4 });
    started.push(spaced);
    const one = await streamOf(whole);
    const many = await streamOf(spaced);
    // Same events but for the `created` time each provider stamped when it started.
    const events = (text: string) => text.replace(/"created":\d+/g, '"created":0');
    expect(events(many.pieces.join(''))).toBe(events(one.pieces.join('')));
    expect(one.headers.get('content-length')).not.toBeNull();
    expect(many.headers.get('content-length')).toBeNull();
    // 23 events (role, 20 words, stop, [DONE]) 4 a write, 5 ms apart: 6 writes, read as more than one piece, each
    // ending at an event's end.
    expect(many.pieces.length).toBeGreaterThan(1);
    for (const piece of many.pieces) expect(piece.endsWith('\n\n')).toBe(true);
  });
});
