import { RawResponse, RemoteCallError, type CallEvent, type ErrorCodec, type StreamHead } from 'nest-prompt-orchestrator';

/**
 * A call's events as they cross between workers: the plugin's wire format
 * (libs/orchestrator/src/core/cluster/coordination.ts, the one the Redis
 * coordinator stores), written out here because the package's public index
 * does not export `toWire`, `fromWire`, `WireReader`, `errorToWire` and
 * `leaderLost`. Kept identical on purpose; test/cluster/workers.slow-spec.ts
 * checks it against the plugin's own.
 */
export type WireEvent =
  | { k: 'v'; v: unknown }
  | { k: 'b'; b: string; ct: string; h?: Record<string, string>; s?: number }
  /** `x`: what the leader's own callers would be sent if it were lost mid-stream (its `formatError`, applied there). */
  | { k: 'h'; h: StreamHead; x?: string }
  | { k: 'c'; c: string }
  | { k: 'end' }
  /** `f`: the last chunk the leader's callers got for this error (a stream's error event), for followers to send alike. */
  | { k: 'err'; e: Record<string, unknown>; f?: string }
  | { k: 'gone' };

type DataWire = Extract<WireEvent, { k: 'v' | 'b' | 'h' | 'c' }>;

/** The error a follower's callers get when the process making the call goes away in the middle of its answer. */
export function leaderLost(message = 'The replica making this call went away in the middle of its answer.'): RemoteCallError {
  return new RemoteCallError(message, 502, 'leader_lost');
}

export function toWire<T>(event: CallEvent<T>): WireEvent {
  switch (event.kind) {
    case 'value': {
      const value = event.value;
      if (!(value instanceof RawResponse)) return { k: 'v', v: value };
      return { k: 'b', b: value.body.toString('base64'), ct: value.contentType, h: value.headers, s: value.status };
    }
    case 'head':
      // Functions do not cross: the leader formats, now, what a lost leader would make its callers see.
      return event.formatError ? { k: 'h', h: event.head, x: event.formatError(leaderLost()) } : { k: 'h', h: event.head };
    case 'chunk':
      return { k: 'c', c: event.chunk };
  }
}

export function fromWire<T>(wire: DataWire): CallEvent<T> {
  switch (wire.k) {
    case 'v':
      return { kind: 'value', value: wire.v as T };
    case 'b':
      return { kind: 'value', value: new RawResponse(Buffer.from(wire.b, 'base64'), wire.ct, wire.h, wire.s) as T };
    case 'h':
      return { kind: 'head', head: wire.h };
    case 'c':
      return { kind: 'chunk', chunk: wire.c };
  }
}

/** What a leader publishes when its call fails: the error, and the chunk its callers got for it (if a stream said so). */
export function errorToWire(codec: ErrorCodec, error: unknown, formatError: ((error: unknown) => string) | undefined): Extract<WireEvent, { k: 'err' }> {
  const e = codec.encode(error);
  return formatError ? { k: 'err', e, f: formatError(error) } : { k: 'err', e };
}

/**
 * A followed call's events and errors as the leader's callers saw them: a
 * stream's head gets an error formatter that writes, for an error from the
 * leader, the very chunk the leader's callers got, and for a lost leader, the
 * leader's own formatting of that. One reader per followed call.
 */
export class WireReader {
  private readonly texts = new WeakMap<object, string>();

  constructor(private readonly codec: ErrorCodec) {}

  event<T>(wire: DataWire): CallEvent<T> {
    if (wire.k !== 'h' || wire.x === undefined) return fromWire<T>(wire);
    const lost = wire.x;
    return { kind: 'head', head: wire.h, formatError: (error) => (typeof error === 'object' && error !== null ? this.texts.get(error) : undefined) ?? lost };
  }

  error(wire: Extract<WireEvent, { k: 'err' }>): Error {
    const error = this.codec.decode(wire.e);
    if (wire.f !== undefined) this.texts.set(error, wire.f);
    return error;
  }
}
