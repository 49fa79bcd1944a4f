import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import { Body, Controller, HttpCode, HttpException, Post } from '@nestjs/common';
import { Dedup, OrchestratorModule, OrchestratorService, StreamedResponse } from 'nest-prompt-orchestrator';
import { Observable, Subject, defer } from 'rxjs';
import { PLATFORMS, postJson, startApp, waitFor, type RunningApp } from '../support/platforms.js';

/**
 * Stands in for a streaming upstream: counts handler calls and subscriptions to
 * its chunk stream, and lets the test drive every chunk through a Subject.
 */
class FakeStreamingUpstream {
  calls = 0;
  /** How many times a chunk stream was actually produced (subscribed). */
  produced = 0;
  /** One Subject per produced stream, in order. */
  streams: Subject<string>[] = [];

  chunks$(): Observable<string> {
    return defer(() => {
      this.produced++;
      const subject = new Subject<string>();
      this.streams.push(subject);
      return subject;
    });
  }
}
const upstream = new FakeStreamingUpstream();

const formatError = (error: unknown) =>
  `event: error\ndata: ${JSON.stringify({ error: { message: (error as Error)?.message ?? String(error) } })}\n\n`;

@Controller('stream')
class StreamController {
  @Post()
  @HttpCode(200)
  // A POST: its window is asked for (its length comes from the module).
  @Dedup({ cacheAnswers: true })
  stream(@Body() _body: Record<string, unknown>) {
    upstream.calls++;
    return new StreamedResponse(upstream.chunks$(), { contentType: 'text/event-stream; charset=utf-8' }, formatError);
  }
}

const sse = (n: number) => `data: {"n":${n}}\n\n`;
const CHUNKS = Array.from({ length: 8 }, (_, i) => sse(i + 1));

/** A streamed response read as it arrives: `text` grows with every chunk the client receives. */
interface ClientStream {
  status: number;
  headers: Headers;
  text: string;
  /** Resolves with the whole body once the server ends the response (rejects if it is cut). */
  done: Promise<string>;
}

async function openStream(url: string, body: unknown, signal?: AbortSignal): Promise<ClientStream> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify(body),
    signal,
  });
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  const stream: ClientStream = {
    status: response.status,
    headers: response.headers,
    text: '',
    done: undefined as never,
  };
  stream.done = (async () => {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      stream.text += decoder.decode(value, { stream: true });
    }
    stream.text += decoder.decode();
    return stream.text;
  })();
  return stream;
}

describe.each(PLATFORMS)('streams on %s', (platform) => {
  let running: RunningApp;
  let orchestrator: OrchestratorService;

  beforeEach(async () => {
    upstream.calls = 0;
    upstream.produced = 0;
    upstream.streams = [];
    running = await startApp(platform, {
      imports: [OrchestratorModule.forRoot({ dedup: { windowMs: 60_000 } })],
      controllers: [StreamController],
    });
    orchestrator = running.app.get(OrchestratorService);
  });
  afterEach(async () => {
    for (const stream of upstream.streams) stream.complete();
    await running.close();
  });

  it('produces the upstream stream once for 50 concurrent identical requests, and every client gets every chunk in order', async () => {
    const clients = Array.from({ length: 50 }, () => openStream(`${running.url}/stream`, { q: 'herd' }));
    await waitFor(() => orchestrator.health().dedup.joined === 49, 10_000, '49 joined');
    await waitFor(() => upstream.streams.length === 1 && upstream.streams[0].observed, 10_000, 'the upstream stream');
    const [source] = upstream.streams;
    for (const chunk of CHUNKS) source.next(chunk);
    source.complete();

    const streams = await Promise.all(clients);
    const bodies = await Promise.all(streams.map((s) => s.done));
    expect(upstream.calls).toBe(1);
    expect(upstream.produced).toBe(1);
    expect(streams.map((s) => s.status)).toEqual(Array(50).fill(200));
    for (const s of streams) expect(s.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const outcomes = streams.map((s) => s.headers.get('x-orchestrator-dedup'));
    expect(outcomes.filter((o) => o === 'miss')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'joined')).toHaveLength(49);
    for (const body of bodies) expect(body).toBe(CHUNKS.join(''));
  });

  it('gives a client joining halfway every chunk from the first, then the live tail; afterwards replays it from the window', async () => {
    const firstClient = openStream(`${running.url}/stream`, { q: 'late joiner' });
    await waitFor(() => upstream.streams.length === 1 && upstream.streams[0].observed, 10_000, 'the upstream stream');
    const [source] = upstream.streams;
    const early = CHUNKS.slice(0, 3);
    const tail = CHUNKS.slice(3);
    for (const chunk of early) source.next(chunk);
    const first = await firstClient;
    await waitFor(() => first.text === early.join(''), 10_000, 'the first client to receive the early chunks');

    // Joins after three chunks were emitted (and delivered): it must still get them, before any new one exists.
    let opened: ClientStream | undefined;
    void openStream(`${running.url}/stream`, { q: 'late joiner' }).then((stream) => (opened = stream));
    await waitFor(() => opened?.text === early.join(''), 10_000, 'the late client to receive the replayed chunks');
    const late = opened!;
    expect(late.status).toBe(200);
    expect(late.headers.get('x-orchestrator-dedup')).toBe('joined');

    // The live tail: each new chunk reaches both clients while the stream is still open.
    for (const [i, chunk] of tail.entries()) {
      source.next(chunk);
      const sofar = [...early, ...tail.slice(0, i + 1)].join('');
      await waitFor(() => late.text === sofar && first.text === sofar, 10_000, `live chunk ${i + 4}`);
    }
    source.complete();
    expect(await first.done).toBe(CHUNKS.join(''));
    expect(await late.done).toBe(CHUNKS.join(''));
    expect(upstream.produced).toBe(1);

    await waitFor(() => orchestrator.health().inFlight === 0, 10_000, 'the flight to end');
    const replay = await openStream(`${running.url}/stream`, { q: 'late joiner' });
    expect(replay.status).toBe(200);
    expect(replay.headers.get('x-orchestrator-dedup')).toBe('cached');
    expect(replay.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(await replay.done).toBe(CHUNKS.join(''));
    expect(upstream.calls).toBe(1);
    expect(upstream.produced).toBe(1);
  });

  it('ends a stream that fails after its first chunk with the formatError chunk, and keeps nothing in the window', async () => {
    const client = openStream(`${running.url}/stream`, { q: 'breaks midway' });
    await waitFor(() => upstream.streams.length === 1 && upstream.streams[0].observed, 10_000, 'the upstream stream');
    const [source] = upstream.streams;
    source.next(CHUNKS[0]);
    source.next(CHUNKS[1]);
    const stream = await client;
    expect(stream.status).toBe(200);
    await waitFor(() => stream.text === CHUNKS[0] + CHUNKS[1], 10_000, 'the first chunks');
    source.error(new Error('upstream connection reset'));

    const body = await stream.done;
    expect(body).toBe(CHUNKS[0] + CHUNKS[1] + formatError(new Error('upstream connection reset')));
    expect(body.endsWith('event: error\ndata: {"error":{"message":"upstream connection reset"}}\n\n')).toBe(true);

    // A failed stream is not kept: the next identical request calls the upstream again.
    await waitFor(() => orchestrator.health().inFlight === 0, 10_000, 'the failed flight to be forgotten');
    const retry = openStream(`${running.url}/stream`, { q: 'breaks midway' });
    await waitFor(() => upstream.streams.length === 2 && upstream.streams[1].observed, 10_000, 'a new upstream stream');
    upstream.streams[1].next(CHUNKS[0]);
    upstream.streams[1].complete();
    const again = await retry;
    expect(again.headers.get('x-orchestrator-dedup')).toBe('miss');
    expect(await again.done).toBe(CHUNKS[0]);
    expect(upstream.calls).toBe(2);
  });

  it('answers a stream that fails before its first chunk with an ordinary JSON error and a non-200 status', async () => {
    const pending = postJson(`${running.url}/stream`, { q: 'fails at once' });
    await waitFor(() => upstream.streams.length === 1 && upstream.streams[0].observed, 10_000, 'the upstream stream');
    upstream.streams[0].error(new HttpException('upstream unavailable', 502));

    const answer = await pending;
    expect(answer.status).toBe(502);
    expect(answer.headers.get('content-type')).toMatch(/^application\/json/);
    expect(answer.json).toMatchObject({ statusCode: 502, message: 'upstream unavailable' });
    expect(answer.text).not.toContain('data:');
  });
});
