import { describe, expect, it } from '@jest/globals';
import { lastValueFrom, of, toArray } from 'rxjs';
import { toCallEvents } from './call.js';
import { fromRelay } from './cluster/relay-wire.js';
import { replayEntry } from './dedup/answer-window.js';
import { ChunkEvent, StreamedResponse, type CallEvent } from './events.js';

/**
 * Chunk events are made by `ChunkEvent`'s constructor wherever they are made: an object literal's allocation site
 * can be moved to old space by V8 (see `ChunkEvent`), and every chunk's Buffer made there would then wait for a full
 * collection to be freed.
 */
describe('chunk events', () => {
  const chunksOf = (events: CallEvent<unknown>[]) => events.filter((event) => event.kind === 'chunk');

  it('of a streamed answer as it is called', async () => {
    const events = await lastValueFrom(
      toCallEvents(of(new StreamedResponse(of('a', Buffer.from('b'))))).pipe(toArray()),
    );
    expect(chunksOf(events).map((event) => event instanceof ChunkEvent)).toEqual([true, true]);
    expect(chunksOf(events).map((event) => String(event.kind === 'chunk' && event.chunk))).toEqual(['a', 'b']);
  });

  it('of a streamed answer replayed from the window', () => {
    const events = replayEntry({
      kind: 'stream',
      head: { contentType: 'text/event-stream' },
      chunks: ['a', Buffer.from('b')],
    });
    expect(chunksOf(events).map((event) => event instanceof ChunkEvent)).toEqual([true, true]);
  });

  it('of a stream received from another replica or worker', () => {
    const text = fromRelay({ kind: 'chunk', chunk: 'a' });
    const bytes = fromRelay({ kind: 'chunk', chunk: Buffer.from('b').toString('base64'), base64: true });
    expect([text, bytes].map((event) => event instanceof ChunkEvent)).toEqual([true, true]);
    expect([text, bytes].map((event) => String(event.kind === 'chunk' && event.chunk))).toEqual(['a', 'b']);
  });
});
