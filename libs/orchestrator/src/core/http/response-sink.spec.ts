import { describe, expect, it } from '@jest/globals';
import { concat, from, of, throwError, type Observable } from 'rxjs';
import { ChunkEvent, type CallEvent, type Chunk } from '../events.js';
import { ResponseSink, type StreamHeadEvent } from './response-sink.js';

/** Writes nothing: records which hook was called, with what. */
class RecordingSink extends ResponseSink<string> {
  readonly calls: string[] = [];

  protected answer(value: string): void {
    this.calls.push(`answer ${value}`);
  }
  protected openStream(head: StreamHeadEvent<string>): void {
    this.calls.push(`open ${head.head.contentType}`);
  }
  protected writeChunk(chunk: Chunk): void {
    this.calls.push(`chunk ${chunk.toString()}`);
  }
  protected endStream(): void {
    this.calls.push('end');
  }
  protected fail(error: unknown): void {
    this.calls.push(`fail ${(error as Error).message}`);
  }
  protected breakStream(error: unknown, lastEvent: string | undefined): void {
    this.calls.push(`break ${(error as Error).message} ${JSON.stringify(lastEvent)}`);
  }
  protected override headArrived(head: StreamHeadEvent<string>): void {
    this.calls.push(`head ${head.head.contentType}`);
  }
  protected override completedEmpty(): void {
    this.calls.push('empty');
  }
}

function record(events: Observable<CallEvent<string>>): string[] {
  const sink = new RecordingSink();
  events.subscribe(sink);
  return sink.calls;
}

const head = (formatError?: (error: unknown) => string): CallEvent<string> => ({
  kind: 'head',
  head: { contentType: 'text/event-stream' },
  formatError,
});
const chunk = (text: string): CallEvent<string> => new ChunkEvent(Buffer.from(text));
const sseError = (error: unknown) => `event: error\ndata: ${(error as Error).message}\n\n`;

describe('ResponseSink', () => {
  it('answers a whole value as soon as it is there', () => {
    const sink = new RecordingSink();
    sink.next({ kind: 'value', value: 'hello' });
    expect(sink.calls).toEqual(['answer hello']);
    sink.complete();
    expect(sink.calls).toEqual(['answer hello']);
  });

  it('starts a stream with its first chunk, not with its head', () => {
    const sink = new RecordingSink();
    sink.next(head());
    expect(sink.calls).toEqual(['head text/event-stream']);
    sink.next(chunk('a'));
    sink.next(chunk('b'));
    sink.complete();
    expect(sink.calls).toEqual(['head text/event-stream', 'open text/event-stream', 'chunk a', 'chunk b', 'end']);
  });

  it('answers a stream that ends before its first chunk with an empty stream', () => {
    expect(record(of(head()))).toEqual(['head text/event-stream', 'open text/event-stream', 'end']);
  });

  it('fails with an ordinary error answer when the call fails before anything was sent', () => {
    expect(record(throwError(() => new Error('down')))).toEqual(['fail down']);
  });

  it('fails with an ordinary error answer when a stream fails before its first chunk', () => {
    expect(
      record(
        concat(
          of(head(sseError)),
          throwError(() => new Error('down')),
        ),
      ),
    ).toEqual(['head text/event-stream', 'fail down']);
  });

  it("ends a stream that breaks after it started with its format's error event", () => {
    expect(
      record(
        concat(
          from([head(sseError), chunk('a')]),
          throwError(() => new Error('lost')),
        ),
      ),
    ).toEqual([
      'head text/event-stream',
      'open text/event-stream',
      'chunk a',
      `break lost ${JSON.stringify('event: error\ndata: lost\n\n')}`,
    ]);
  });

  it('ends a stream whose format ends silently with an empty last event', () => {
    expect(
      record(
        concat(
          from([head(() => ''), chunk('a')]),
          throwError(() => new Error('lost')),
        ),
      ),
    ).toEqual(['head text/event-stream', 'open text/event-stream', 'chunk a', 'break lost ""']);
  });

  it('cuts a stream that breaks after it started when its format has no error event', () => {
    expect(
      record(
        concat(
          from([head(), chunk('a')]),
          throwError(() => new Error('lost')),
        ),
      ),
    ).toEqual(['head text/event-stream', 'open text/event-stream', 'chunk a', 'break lost undefined']);
  });

  it('says so when a call completes with neither a value nor a stream', () => {
    expect(record(of<CallEvent<string>>())).toEqual(['empty']);
  });

  it('writes no chunk that has no stream to go to', () => {
    expect(record(from([chunk('a')]))).toEqual(['empty']);
  });
});
