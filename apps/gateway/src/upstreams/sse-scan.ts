import { UpstreamStreamError } from '../apis/errors.js';
import { API_FORMATS, ERROR_MARKERS, type ApiFormat, type StreamFormat } from '../apis/formats.js';
import { isUsageChunk, mergeUsage, usageOfEvent } from '../apis/usage.js';
import type { Usage } from '../budgets/prices.js';
import { ownBytes } from '../common/buffers.js';

/**
 * Reads a relayed SSE stream as bytes, on its way to the clients: whether it
 * ended with its API's end marker, whether the provider sent an error event in
 * it, and the usage it reports, as the API's table says them (`API_FORMATS`).
 * Almost every chunk of a long stream holds none
 * of these: it is recognised as such by one search and passed on as the very
 * Buffer that arrived, never decoded, split or re-encoded. Only a line that
 * holds a marker is decoded, and only its JSON is parsed.
 *
 * An OpenAI stream says all of it at its end: the usage event comes right
 * before `[DONE]` (`include_usage`; providers that report usage in their last
 * content chunk do so there too), and an error event is the last thing a
 * provider sends. So of each chunk only its last lines are searched (about a
 * kilobyte, whatever the chunk's size): a coalesced read of hundreds of events
 * costs what one event does. Searching every byte made as many bytes of
 * short-lived strings and was the most expensive step of the gateway's own on
 * a stream's path (docs/benchmarks/2026-12-03-figures-behind-the-code.md).
 *
 * With `stripUsage`, the usage-only event that the gateway asked for on the
 * client's behalf (`stream_options.include_usage`) is taken out, so the client
 * sees the stream it asked for; then lines are passed on whole (a line split
 * across chunks waits for its end).
 */
export class SseScan {
  /** `end` once the end marker passed; `error` once an error event did. */
  verdict: 'end' | 'error' | undefined;
  /** The error event has been read to its end (its data, or the blank line after it): the stream may be cut there. */
  errorRead = false;
  /** The error event's data, parsed. */
  errorEvent: unknown;
  usage: Usage | undefined;
  /** A line not yet ended: its pieces so far (joined once it ends, not once per chunk) and their length. */
  private partial: Buffer[] | undefined;
  private partialBytes = 0;
  private eventName: string | undefined;
  /** The format's table (undefined: a format the route does not fix, only relayed). */
  private readonly api: ApiFormat | undefined;
  /** What may hold something to read: any marker of the format, an error, a usage object (see `markedFrom`). */
  private readonly markers: RegExp | undefined;
  /** The format's markers a data line may hold (its end and error types), searched before parsing the line. */
  private readonly dataMarkers: readonly Buffer[];
  // llama.cpp's native streams: each prompt (`index`) ends with `"stop":true`.
  private readonly unfinished = new Set<number>();
  private llamaStopped = false;
  /** Lines are passed on whole (a line cut across chunks waits for its end): stripping, or redacting line by line. */
  private readonly whole: boolean;
  /** A line too long to hold (see `MAX_HELD_LINE`), passed on as it comes: its two ends, to read it by at its end. */
  private long: LongLine | undefined;

  constructor(
    /** How the stream ends (`false`: a format the route does not fix, only relayed). */
    private readonly format: StreamFormat | false,
    private readonly readUsage: boolean,
    private readonly stripUsage: boolean,
    /** Pass on whole lines only, so that a key is never cut across two of the pieces passed on (see `Redactor`). */
    wholeLines = false,
  ) {
    this.whole = stripUsage || wholeLines;
    this.api = format === false ? undefined : API_FORMATS[format];
    this.markers = format === false ? undefined : MARKER_PATTERNS[format][readUsage ? 1 : 0];
    this.dataMarkers = format === false ? [] : DATA_MARKERS[format];
  }

  /**
   * How the stream failed, once it ended (`ended`) or while it runs: an error event came, or it ended before its end
   * marker; undefined while it is sound (or when its format is not checked).
   */
  failure(ended: boolean): UpstreamStreamError | undefined {
    if (this.verdict === 'error')
      return new UpstreamStreamError('The provider sent an error in the stream.', true, this.errorEvent);
    if (!ended || this.format === false || this.verdict === 'end') return undefined;
    return new UpstreamStreamError('The provider ended the stream before its end marker.', false);
  }

  /**
   * Takes a chunk; returns the bytes to pass on (the chunk itself unless stripping), possibly empty, or, when
   * stripping and a line was cut across the chunks, two pieces: that line, and the rest of the chunk where it lies
   * (the chunk is never copied whole).
   */
  feed(chunk: Buffer): Buffer | Buffer[] {
    if (this.format === false) return chunk;
    const long = this.long;
    if (long) {
      // The rest of a line too long to hold is passed on as it comes, and the line read by its ends once it ends.
      const nl = chunk.indexOf(NL);
      if (nl < 0) {
        long.add(chunk);
        return chunk;
      }
      this.long = undefined;
      const end = chunk.subarray(0, nl + 1);
      long.add(end);
      this.readLong(long);
      const rest = this.read(chunk.subarray(nl + 1));
      if (!this.whole) return chunk;
      return rest.length === 0 ? end : [end, rest];
    }
    const partial = this.partial;
    if (partial === undefined) return this.read(chunk);
    const nl = chunk.indexOf(NL);
    if (nl < 0) {
      // Still the same line (longer than a socket read): kept until it ends, up to a bound (memory stays bounded).
      // Its pieces are joined once, at its end, and none is kept as a small view that holds a whole read.
      const held = this.partialBytes + chunk.length;
      if (held > MAX_HELD_LINE) {
        this.partial = undefined;
        this.partialBytes = 0;
        this.long = new LongLine(partial, chunk);
        if (!this.whole) return chunk;
        partial.push(chunk);
        return Buffer.concat(partial, held);
      }
      partial.push(ownBytes(chunk));
      this.partialBytes = held;
      return this.whole ? EMPTY : chunk;
    }
    this.partial = undefined;
    // The line the last chunk cut is joined (one line, held within a bound) and read on its own; then the rest of
    // this chunk, where it lies. A marker never spans the two: it lies within a line.
    partial.push(chunk.subarray(0, nl + 1));
    const first = this.read(Buffer.concat(partial, this.partialBytes + nl + 1));
    this.partialBytes = 0;
    const rest = this.read(chunk.subarray(nl + 1));
    if (!this.whole) return chunk;
    return first.length === 0 ? rest : rest.length === 0 ? first : [first, rest];
  }

  private readLong(long: LongLine): void {
    const line = long.line();
    this.line(line, 0, line.length);
  }

  /** Reads bytes that start at a line's start; returns what to pass on of them (the bytes themselves unless stripping). */
  private read(data: Buffer): Buffer {
    const from = this.markedFrom(data);
    // The common case: lines with nothing to read in them. Only a line not yet ended is kept, to be read (and, when
    // stripping, passed on) with the next chunk: a marker may be split across the two.
    if (from < 0) {
      const last = data.lastIndexOf(NL);
      if (last < data.length - 1) this.hold(data.subarray(last + 1));
      if (!this.whole) return data;
      return last === data.length - 1 ? data : data.subarray(0, last + 1);
    }
    // Lines are read from `from` on; the bytes passed on are runs of whole lines, cut only around a line left out.
    const kept: Buffer[] | undefined = this.whole ? [] : undefined;
    let run = 0;
    let at = from;
    for (;;) {
      const nl = data.indexOf(NL, at);
      if (nl < 0) break;
      if (!this.line(data, at, nl) && kept) {
        if (at > run) kept.push(data.subarray(run, at));
        run = nl + 1;
      }
      at = nl + 1;
    }
    // A line not yet ended waits (copied: it must not keep a large chunk alive), and is read with the next chunk.
    if (at < data.length) this.hold(data.subarray(at));
    if (!kept) return data;
    if (run === 0) return at === data.length ? data : data.subarray(0, at);
    if (at > run) kept.push(data.subarray(run, at));
    return kept.length === 1 ? kept[0] : Buffer.concat(kept);
  }

  /** Keeps the start of a line not yet ended (it must not keep a large chunk alive). */
  private hold(start: Buffer): void {
    this.partial = [ownBytes(start)];
    this.partialBytes = start.length;
  }

  /** The stream ended: what is left of a last line without its newline (to pass on when stripping), and the verdict. */
  end(): Buffer | undefined {
    const long = this.long;
    this.long = undefined;
    // Passed on already: only read.
    if (long) return void this.readLong(long);
    const pieces = this.partial;
    this.partial = undefined;
    if (!pieces) return undefined;
    const rest = pieces.length === 1 ? pieces[0] : Buffer.concat(pieces, this.partialBytes);
    this.partialBytes = 0;
    const keep = this.line(rest, 0, rest.length);
    return this.whole && keep ? rest : undefined;
  }

  /**
   * Where the lines that may hold something to read start in bytes that start at a line's start, or -1 when none
   * may. Every line of llama.cpp's native streams is read (each says whether its prompt stopped). An OpenAI stream's
   * markers are in its last lines (see the class comment): only those are searched, and its end marker only in the
   * very tail. Elsewhere every byte is searched, once: a compiled pattern over the bytes as latin1 (each byte one
   * character: an ASCII marker matches only the same bytes), rather than a native search per marker, as the markers
   * start or end with a quote, which is every few bytes of JSON and defeats the native search's skips. A usage object
   * is `"usage":{`, compact or with the one space JSON writers put after a colon.
   */
  private markedFrom(data: Buffer): number {
    // An error event's name came: the rest of that event is read, whatever it holds.
    const api = this.api!;
    if (api.stopPerPrompt || (this.verdict === 'error' && !this.errorRead)) return 0;
    let from = 0;
    if (api.saysAllAtEnd) {
      from = startOfLastLines(data, TAIL_LINES);
      if (data.indexOf(DONE, Math.max(from, data.length - DONE_TAIL)) >= 0) return from;
    }
    return this.markers !== undefined && this.markers.test(data.toString('latin1', from)) ? from : -1;
  }

  /** Reads one line (`[start, end)`, without its newline); false when it is the added usage event, to be left out. */
  private line(data: Buffer, start: number, end: number): boolean {
    if (end > start && data[end - 1] === CR) end--;
    if (end === start) {
      this.eventName = undefined;
      if (this.verdict === 'error') this.errorRead = true;
      return true;
    }
    if (startsWith(data, start, EVENT)) {
      const name = data.toString('utf8', start + EVENT.length, end).trim();
      this.eventName = name;
      // An `event: error` is an error whatever its data says (an OpenAI chat stream has no other named events).
      const api = this.api!;
      if (name === 'error' || api.errorEvents.includes(name)) this.verdict = 'error';
      else if (api.endEvents.includes(name)) this.verdict ??= 'end';
      return true;
    }
    if (!startsWith(data, start, DATA)) return true;
    let from = start + DATA.length;
    if (data[from] === 0x20) from++;
    const api = this.api!;
    if (api.endData !== undefined && end - from === DONE.length && startsWith(data, from, DONE)) {
      this.verdict ??= 'end';
      return true;
    }
    // The data of an `event: error` (a provider's error may be nothing but its message).
    if (this.verdict === 'error') this.errorRead = true;
    const payload = data.subarray(from, end);
    const errorLike = payload.indexOf(ERROR) >= 0;
    const usageLike = this.readUsage && USAGE.some((marker) => payload.indexOf(marker) >= 0);
    const endLike = this.dataMarkers.some((marker) => payload.indexOf(marker) >= 0);
    if (!errorLike && !usageLike && !endLike && !api.stopPerPrompt) return true;
    let json: unknown;
    try {
      json = JSON.parse(payload.toString('utf8'));
    } catch {
      return true;
    }
    if (typeof json !== 'object' || json === null) return true;
    const event = json as { error?: unknown; type?: unknown; index?: unknown; stop?: unknown };
    if (this.eventName === 'error') this.errorEvent = json;
    if (event.error !== undefined && event.error !== null) {
      this.verdict = 'error';
      this.errorRead = true;
      this.errorEvent = json;
      return true;
    }
    if (typeof event.type === 'string') {
      if (api.errorTypes.includes(event.type)) {
        this.verdict = 'error';
        this.errorRead = true;
        this.errorEvent = json;
      } else if (api.endTypes.includes(event.type)) this.verdict ??= 'end';
    }
    if (api.stopPerPrompt) this.promptChunk(event);
    if (this.readUsage) {
      const found = usageOfEvent(json);
      if (found) this.usage = mergeUsage(this.usage, found);
    }
    return !(this.stripUsage && isUsageChunk(json));
  }

  private promptChunk(chunk: { index?: unknown; stop?: unknown }): void {
    const index = typeof chunk.index === 'number' ? chunk.index : 0;
    if (chunk.stop === true) {
      this.unfinished.delete(index);
      this.llamaStopped = true;
    } else this.unfinished.add(index);
    if (this.llamaStopped && this.unfinished.size === 0) this.verdict ??= 'end';
    else if (this.verdict === 'end') this.verdict = undefined;
  }
}

const NL = 0x0a;
const EMPTY = Buffer.alloc(0);
const CR = 0x0d;
const EVENT = Buffer.from('event:');
const DATA = Buffer.from('data:');
// The one `data:` end marker of the tables (OpenAI's), searched for in a chunk's tail (see `markedFrom`).
const DONE = Buffer.from(API_FORMATS.openai.endData!);
const ERROR = Buffer.from(ERROR_MARKERS[0]);
/**
 * A line held for its end longer than this is passed on in pieces (a model's output, not an error event, is that
 * long) and read by its ends (see `LongLine`): what a stream holds stays bounded, whatever the size of its events.
 */
const MAX_HELD_LINE = 256 * 1024;
/** What is kept of each end of a line too long to hold. */
const LONG_LINE_EDGE = 64 * 1024;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const U = 0x75;

/**
 * A line too long to hold, as it passes: its first and last `LONG_LINE_EDGE` bytes. What a long event says beside
 * its long text (its type, an error, the usage at its end, as a Responses API `response.completed` carries the whole
 * output and then the usage) is in those ends, so it is read as the two joined inside a string (see
 * `joinedInString`): the event with the middle of its text left out.
 */
class LongLine {
  private readonly head = Buffer.allocUnsafe(LONG_LINE_EDGE);
  private headBytes = 0;
  private tail: Buffer[] = [];
  private tailBytes = 0;

  constructor(start: readonly Buffer[], next: Buffer) {
    for (const piece of start) this.add(piece);
    this.add(next);
  }

  add(piece: Buffer): void {
    if (this.headBytes < LONG_LINE_EDGE) this.headBytes += piece.copy(this.head, this.headBytes);
    this.tail.push(ownBytes(piece));
    this.tailBytes += piece.length;
    while (this.tailBytes - this.tail[0].length >= LONG_LINE_EDGE) this.tailBytes -= this.tail.shift()!.length;
  }

  /** The line to read, without its newline: its ends joined inside a string, or its start alone. */
  line(): Buffer {
    const head = this.head.subarray(0, this.headBytes);
    let tail = Buffer.concat(this.tail, this.tailBytes);
    if (tail.at(-1) === NL) tail = tail.subarray(0, -1);
    return joinedInString(head, tail.subarray(Math.max(0, tail.length - LONG_LINE_EDGE))) ?? head;
  }
}

/**
 * The start and the end of one JSON text joined where each is inside a string and outside an escape: the text with
 * the middle of its string (or of its strings at one depth) left out, and still JSON then. The tail is taken to start
 * inside a string; when it does not, the joined text is not JSON and is read as such (nothing in it counts).
 */
function joinedInString(head: Buffer, tail: Buffer): Buffer | undefined {
  let inString = false;
  let cut = -1;
  for (let i = 0; i < head.length; i++) {
    const c = head[i];
    if (!inString) {
      if (c === QUOTE) inString = true;
      continue;
    }
    if (c === BACKSLASH) {
      // `\uXXXX` or a two-character escape: never cut inside one.
      i += head[i + 1] === U ? 5 : 1;
      continue;
    }
    cut = i;
    if (c === QUOTE) inString = false;
  }
  if (cut < 0) return undefined;
  // Past six bytes without a backslash, no escape is under way (the longest is six bytes).
  let clean = 0;
  for (let at = 0; at < tail.length; at++) {
    if (clean >= 6) return Buffer.concat([head.subarray(0, cut), tail.subarray(at)]);
    clean = tail[at] === BACKSLASH ? 0 : clean + 1;
  }
  return undefined;
}
// Chunks before OpenAI's usage event say `"usage":null`: only an object is worth reading.
const USAGE = [Buffer.from('"usage":{'), Buffer.from('"usage": {'), Buffer.from('"tokens_predicted"')];
// `data: [DONE]` and the blank lines after it, with room for a CR before each newline.
const DONE_TAIL = 24;
/**
 * The lines of each chunk of an OpenAI stream that are searched: three events (the usage event, `[DONE]` and one
 * more) with their blank lines, and a line cut at the chunk's end.
 */
const TAIL_LINES = 7;
/**
 * The names of each format's end and error events and types, as a line may hold them (a bare `error` is found as
 * `"error"` or `event: error` instead). OpenAI's end marker is looked for in the tail only (see `markedFrom`).
 */
const DATA_MARKERS: Record<StreamFormat, readonly Buffer[]> = {
  openai: dataMarkers('openai'),
  responses: dataMarkers('responses'),
  anthropic: dataMarkers('anthropic'),
  llama: dataMarkers('llama'),
};

function dataMarkers(format: StreamFormat): readonly Buffer[] {
  const { endEvents, errorEvents, endTypes, errorTypes } = API_FORMATS[format];
  const names = new Set([...endEvents, ...errorEvents, ...endTypes, ...errorTypes]);
  names.delete('error');
  return [...names].map((name) => Buffer.from(name));
}

function startsWith(data: Buffer, at: number, prefix: Buffer): boolean {
  if (data.length - at < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (data[at + i] !== prefix[i]) return false;
  return true;
}

/** Where the last `lines` lines of the bytes start (a line cut at their end is one of them). */
function startOfLastLines(data: Buffer, lines: number): number {
  let start = data.length;
  for (let i = 0; i < lines; i++) {
    // A negative offset would search from the end again.
    if (start < 2) return 0;
    start = data.lastIndexOf(NL, start - 2) + 1;
  }
  return start;
}

/**
 * One pattern per format for its markers (literal text) and its error, without and with a usage object (`"usage":{`,
 * or with a space): made once, not per stream.
 */
const MARKER_PATTERNS: Record<StreamFormat, readonly [RegExp, RegExp]> = {
  openai: markerPatterns('openai'),
  responses: markerPatterns('responses'),
  anthropic: markerPatterns('anthropic'),
  llama: markerPatterns('llama'),
};

function markerPatterns(format: StreamFormat): readonly [RegExp, RegExp] {
  return [markerPattern(format, false), markerPattern(format, true)];
}

function markerPattern(format: StreamFormat, readUsage: boolean): RegExp {
  const literal = [...DATA_MARKERS[format].map((marker) => marker.toString('latin1')), ...ERROR_MARKERS].map((marker) =>
    marker.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'),
  );
  if (readUsage) literal.push('"usage": ?\\{');
  return new RegExp(literal.join('|'));
}
