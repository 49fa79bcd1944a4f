import { ChunkEvent, RawResponse, isRawResponse, type CallEvent, type StreamHead } from '../events.js';
import { RemoteCallError, type ErrorCodec } from './coordination.js';

/**
 * What crosses between a leader and its followers, whatever carries it (a Redis stream, node:cluster's IPC): one
 * message per event of the call, as JSON text. Replicas of different versions are not meant to follow each other:
 * a fleet runs one version.
 */
export type RelayMessage =
  | { kind: 'value'; value: unknown }
  /** A relayed response's bytes (base64) as the leader's callers got them. */
  | { kind: 'bytes'; body: string; contentType: string; headers?: Record<string, string>; status?: number }
  /** `lostChunk`: what the leader's own callers would be sent if it were lost mid-stream (its `formatError`, applied there). */
  | { kind: 'head'; head: StreamHead; lostChunk?: string }
  /** `base64`: `chunk` is bytes (a relayed stream's raw chunk), else text. */
  | { kind: 'chunk'; chunk: string; base64?: true }
  | { kind: 'end' }
  /** `chunk`: the last chunk the leader's callers got for this error (a stream's error event), for followers to send alike. */
  | { kind: 'error'; error: Record<string, unknown>; chunk?: string }
  /** The leader's callers all left, or the leader is lost to its followers: one of them takes the call over. */
  | { kind: 'gone' }
  /** The leader lives (sent while its call is silent). */
  | { kind: 'heartbeat' };

/** The messages that carry one of the call's events. */
export type RelayedEvent = Extract<RelayMessage, { kind: 'value' | 'bytes' | 'head' | 'chunk' }>;

export const END = '{"kind":"end"}';
export const GONE = '{"kind":"gone"}';
export const HEARTBEAT = '{"kind":"heartbeat"}';

/** Whether a message (as JSON text) ends its call for a follower: its end, its error, or its leader gone. */
export function isFinal(text: string): boolean {
  return text === GONE || text.startsWith('{"kind":"end"') || text.startsWith('{"kind":"error"');
}

export function toRelay<T>(event: CallEvent<T>): RelayedEvent {
  switch (event.kind) {
    case 'value': {
      const value = event.value;
      if (!isRawResponse(value)) return { kind: 'value', value };
      return {
        kind: 'bytes',
        body: value.body.toString('base64'),
        contentType: value.contentType,
        headers: value.headers,
        status: value.status,
      };
    }
    case 'head':
      return event.formatError
        ? { kind: 'head', head: event.head, lostChunk: event.formatError(leaderLost()) }
        : { kind: 'head', head: event.head };
    case 'chunk':
      return typeof event.chunk === 'string'
        ? { kind: 'chunk', chunk: event.chunk }
        : { kind: 'chunk', chunk: event.chunk.toString('base64'), base64: true };
  }
}

export function fromRelay<T>(message: RelayedEvent): CallEvent<T> {
  switch (message.kind) {
    case 'value':
      return { kind: 'value', value: message.value as T };
    case 'bytes':
      return {
        kind: 'value',
        value: new RawResponse(
          Buffer.from(message.body, 'base64'),
          message.contentType,
          message.headers,
          message.status,
        ) as T,
      };
    case 'head':
      return { kind: 'head', head: message.head };
    case 'chunk':
      return new ChunkEvent(message.base64 ? Buffer.from(message.chunk, 'base64') : message.chunk);
  }
}

/** What a leader publishes when its call fails: the error, and the chunk its callers got for it (if a stream said so). */
export function errorMessage(
  codec: ErrorCodec,
  error: unknown,
  formatError: ((error: unknown) => string) | undefined,
): Extract<RelayMessage, { kind: 'error' }> {
  const encoded = codec.encode(error);
  return formatError ? { kind: 'error', error: encoded, chunk: formatError(error) } : { kind: 'error', error: encoded };
}

/** The error a follower's callers get when the replica making the call goes away in the middle of its answer. */
export function leaderLost(
  message = 'The replica making this call went away in the middle of its answer.',
): RemoteCallError {
  return new RemoteCallError(message, 502, 'leader_lost');
}

/**
 * A followed call's events and errors as the leader's callers saw them: a stream's head gets an error formatter
 * (functions do not cross the wire) that writes, for an error from the leader, the very chunk the leader's callers
 * got, and for a lost leader, the leader's own formatting of that.
 */
export class RelayReader {
  private readonly texts = new WeakMap<object, string>();
  constructor(private readonly codec: ErrorCodec) {}

  event<T>(message: RelayedEvent): CallEvent<T> {
    if (message.kind !== 'head' || message.lostChunk === undefined) return fromRelay<T>(message);
    const lost = message.lostChunk;
    return {
      kind: 'head',
      head: message.head,
      formatError: (error) => (typeof error === 'object' && error !== null ? this.texts.get(error) : undefined) ?? lost,
    };
  }

  error(message: Extract<RelayMessage, { kind: 'error' }>): Error {
    const error = this.codec.decode(message.error);
    if (message.chunk !== undefined) this.texts.set(error, message.chunk);
    return error;
  }
}
