/**
 * A request body's JSON read for its structure only: whether it is valid JSON, how deep it nests, what its top
 * level is, and where each top-level field's value lies in the bytes. Strings (nearly all of an LLM request's
 * bytes: the conversation) are skipped with a native search for their closing quote, never decoded, so a 200 KB
 * conversation costs a few thousand small steps instead of a full `JSON.parse` that builds every message as an
 * object only to throw it away. A field the gateway needs (`model`, `stream`, ...) is parsed from its own bytes,
 * on demand.
 *
 * Everything outside strings is checked as JSON.parse would check it (literals, numbers, punctuation, nesting,
 * trailing bytes). Inside strings, only the end is looked for: an invalid escape or a raw control character is
 * left for the provider to judge, as it is the provider's to judge what the text says.
 */

export type JsonType = 'object' | 'array' | 'string' | 'number' | 'boolean' | 'null';

/** The bytes `[start, end)` of one top-level field's value. */
export interface FieldSpan {
  start: number;
  end: number;
}

export class JsonSyntaxError extends Error {
  override name = 'JsonSyntaxError';
  constructor(readonly at: number) {
    super(`The request body is not valid JSON (at byte ${at}).`);
  }
}

export class JsonTooDeepError extends Error {
  override name = 'JsonTooDeepError';
  constructor(readonly maxDepth: number) {
    super(`The request body is nested more than ${maxDepth} levels deep.`);
  }
}

export class JsonSkeleton {
  private values?: Map<string, unknown>;

  constructor(
    readonly bytes: Buffer,
    /** The type of the top-level value. */
    readonly type: JsonType,
    /** The top-level object's fields (the last of a repeated name wins, as with JSON.parse); empty for other types. */
    readonly fields: ReadonlyMap<string, FieldSpan>,
  ) {}

  has(name: string): boolean {
    return this.fields.has(name);
  }

  /** A top-level field's value, parsed from its own bytes once (undefined when absent). */
  field(name: string): unknown {
    const span = this.fields.get(name);
    if (!span) return undefined;
    const values = (this.values ??= new Map());
    if (values.has(name)) return values.get(name);
    const value: unknown = JSON.parse(this.bytes.toString('utf8', span.start, span.end));
    values.set(name, value);
    return value;
  }

  /** The type of a top-level field's value, from its first byte (no parsing). */
  typeOf(name: string): JsonType | undefined {
    const span = this.fields.get(name);
    return span && typeAt(this.bytes[span.start]);
  }
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

const enum Container {
  Object = 1,
  Array = 2,
}

/** Scans `bytes` as one JSON document (see the file's comment). Throws `JsonSyntaxError` or `JsonTooDeepError`. */
export function scanJson(bytes: Buffer, maxDepth: number): JsonSkeleton {
  const n = bytes.length;
  const stack: Container[] = [];
  const fields = new Map<string, FieldSpan>();
  let i = skipSpace(bytes, 0);
  if (i >= n) throw new JsonSyntaxError(i);
  const type = typeAt(bytes[i]);
  if (type === undefined) throw new JsonSyntaxError(i);
  let key: string | undefined;
  let valueStart = 0;

  // Each turn reads one value at `i`, then the punctuation after it up to the next value (or the end).
  for (;;) {
    const depth = stack.length;
    if (depth === 1 && stack[0] === Container.Object) valueStart = i;
    const c = bytes[i];
    if (c === 0x7b || c === 0x5b) {
      if (depth >= maxDepth) throw new JsonTooDeepError(maxDepth);
      i = skipSpace(bytes, i + 1);
      if (c === 0x7b) {
        stack.push(Container.Object);
        if (bytes[i] === 0x7d) {
          stack.pop();
          i++;
        } else {
          const read = readKey(bytes, i, stack.length === 1);
          if (stack.length === 1) key = read.key;
          i = read.next;
          continue;
        }
      } else {
        stack.push(Container.Array);
        if (bytes[i] === 0x5d) {
          stack.pop();
          i++;
        } else continue;
      }
    } else if (c === QUOTE) i = stringEnd(bytes, i) + 1;
    else if (c === 0x74) i = literal(bytes, i, TRUE);
    else if (c === 0x66) i = literal(bytes, i, FALSE);
    else if (c === 0x6e) i = literal(bytes, i, NULL);
    else i = number(bytes, i);

    // After a value: closers, then a comma (and the next key) or the end of the document.
    for (;;) {
      if (stack.length === 1 && stack[0] === Container.Object && key !== undefined) {
        fields.set(key, { start: valueStart, end: i });
        key = undefined;
      }
      i = skipSpace(bytes, i);
      if (stack.length === 0) {
        if (i !== n) throw new JsonSyntaxError(i);
        return new JsonSkeleton(bytes, type, fields);
      }
      const top = stack[stack.length - 1];
      const b = bytes[i];
      if (b === 0x2c) {
        i = skipSpace(bytes, i + 1);
        if (top === Container.Object) {
          const read = readKey(bytes, i, stack.length === 1);
          if (stack.length === 1) key = read.key;
          i = read.next;
        }
        break;
      }
      if ((top === Container.Object && b === 0x7d) || (top === Container.Array && b === 0x5d)) {
        stack.pop();
        i++;
        continue;
      }
      throw new JsonSyntaxError(i);
    }
    if (i >= n) throw new JsonSyntaxError(i);
  }
}

/** A key and its colon; the key's text only when it is a top-level field (`named`). Returns where its value starts. */
function readKey(bytes: Buffer, i: number, named: boolean): { key?: string; next: number } {
  if (bytes[i] !== QUOTE) throw new JsonSyntaxError(i);
  const end = stringEnd(bytes, i);
  let key: string | undefined;
  if (named) {
    key = hasByte(bytes, BACKSLASH, i + 1, end) ? decodeKey(bytes, i, end) : bytes.toString('utf8', i + 1, end);
  }
  const colon = skipSpace(bytes, end + 1);
  if (bytes[colon] !== 0x3a) throw new JsonSyntaxError(colon);
  const next = skipSpace(bytes, colon + 1);
  if (next >= bytes.length) throw new JsonSyntaxError(next);
  return { key, next };
}

/** Whether `byte` is in `[from, to)`: a key is short, and a search from it to the end of a large body would not be. */
function hasByte(bytes: Buffer, byte: number, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (bytes[i] === byte) return true;
  return false;
}

function decodeKey(bytes: Buffer, start: number, end: number): string {
  try {
    return JSON.parse(bytes.toString('utf8', start, end + 1)) as string;
  } catch {
    throw new JsonSyntaxError(start);
  }
}

/** Index of the quote that closes the string opened at `start` (an escaped quote is preceded by an odd run of `\`). */
function stringEnd(bytes: Buffer, start: number): number {
  let at = start;
  for (;;) {
    at = bytes.indexOf(QUOTE, at + 1);
    if (at < 0) throw new JsonSyntaxError(bytes.length);
    let slashes = 0;
    while (bytes[at - 1 - slashes] === BACKSLASH) slashes++;
    if (slashes % 2 === 0) return at;
  }
}

function skipSpace(bytes: Buffer, i: number): number {
  for (;;) {
    const c = bytes[i];
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++;
    else return i;
  }
}

const TRUE = Buffer.from('true');
const FALSE = Buffer.from('false');
const NULL = Buffer.from('null');

function literal(bytes: Buffer, i: number, word: Buffer): number {
  for (let k = 0; k < word.length; k++) if (bytes[i + k] !== word[k]) throw new JsonSyntaxError(i + k);
  return i + word.length;
}

const isDigit = (c: number | undefined) => c !== undefined && c >= 0x30 && c <= 0x39;

/** `-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?`, as JSON defines a number. */
function number(bytes: Buffer, i: number): number {
  if (bytes[i] === 0x2d) i++;
  if (bytes[i] === 0x30) i++;
  else if (isDigit(bytes[i])) while (isDigit(bytes[i])) i++;
  else throw new JsonSyntaxError(i);
  if (bytes[i] === 0x2e) {
    i++;
    if (!isDigit(bytes[i])) throw new JsonSyntaxError(i);
    while (isDigit(bytes[i])) i++;
  }
  if (bytes[i] === 0x65 || bytes[i] === 0x45) {
    i++;
    if (bytes[i] === 0x2b || bytes[i] === 0x2d) i++;
    if (!isDigit(bytes[i])) throw new JsonSyntaxError(i);
    while (isDigit(bytes[i])) i++;
  }
  return i;
}

function typeAt(c: number | undefined): JsonType | undefined {
  if (c === 0x7b) return 'object';
  if (c === 0x5b) return 'array';
  if (c === QUOTE) return 'string';
  if (c === 0x74 || c === 0x66) return 'boolean';
  if (c === 0x6e) return 'null';
  if (c === 0x2d || isDigit(c)) return 'number';
  return undefined;
}
