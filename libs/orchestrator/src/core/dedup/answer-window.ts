import { createCache, type Cache } from 'cache-manager';
import { KeyvCacheableMemory } from 'cacheable';
import { Keyv } from 'keyv';
import { RawResponse, isRawResponse, type CallEvent, type StreamHead } from '../events.js';

/** A finished answer kept for reuse. Plain data (a `RawResponse` is kept as `bytes`), so a shared store (Redis) can hold it. */
export type WindowEntry<T> =
  | { kind: 'value'; value: T }
  | { kind: 'bytes'; body: Buffer; contentType: string; headers?: Record<string, string>; status?: number }
  | { kind: 'stream'; head: StreamHead; chunks: string[] };

export interface AnswerWindowOptions {
  /** Most entries the in-memory store keeps (least recently used go first). */
  maxEntries: number;
  /** Keyv stores to use instead of the in-memory one, e.g. a Redis store shared by replicas. */
  stores?: Keyv[];
  /** Called when the store fails; the request then goes on as a miss. */
  onStoreError?: (error: unknown) => void;
}

/**
 * The window of recent successful answers, on cache-manager. In memory by
 * default, bounded by entry count through an LRU; values are stored as they
 * are (no serialisation, no clone) since nothing mutates them.
 */
export class AnswerWindow {
  private readonly cache: Cache;

  constructor(private readonly options: AnswerWindowOptions) {
    const stores = options.stores ?? [
      new Keyv({
        // Keys are already SHA-256 digests: one shard, no second hash per look-up.
        store: new KeyvCacheableMemory({ lruSize: options.maxEntries, useClone: false, storeHashSize: 1 }),
        serialize: undefined,
        deserialize: undefined,
        namespace: undefined,
      }),
    ];
    this.cache = createCache({ stores });
  }

  async get<T>(key: string): Promise<WindowEntry<T> | undefined> {
    try {
      return (await this.cache.get<WindowEntry<T>>(key)) ?? undefined;
    } catch (error) {
      this.options.onStoreError?.(error);
      return undefined;
    }
  }

  /** Keeps the answer for `ttlMs`; a store failure is reported, not thrown. */
  async set<T>(key: string, entry: WindowEntry<T>, ttlMs: number): Promise<void> {
    try {
      await this.cache.set(key, entry, ttlMs);
    } catch (error) {
      this.options.onStoreError?.(error);
    }
  }

  async clear(): Promise<void> {
    await this.cache.clear();
  }

  async disconnect(): Promise<void> {
    await this.cache.disconnect();
  }
}

/** Rebuilds a call's events from a stored answer. */
export function replayEntry<T>(entry: WindowEntry<T>): CallEvent<T>[] {
  if (entry.kind === 'value') return [{ kind: 'value', value: entry.value }];
  if (entry.kind === 'bytes') return [{ kind: 'value', value: new RawResponse(entry.body, entry.contentType, entry.headers, entry.status) as T }];
  const events: CallEvent<T>[] = [{ kind: 'head', head: entry.head }];
  for (const chunk of entry.chunks) events.push({ kind: 'chunk', chunk });
  return events;
}

/** Size in characters of a value once serialised; measured once per upstream call, off the joined path. */
export function sizeOf(value: unknown): number {
  if (typeof value === 'string') return value.length;
  if (isRawResponse(value)) return value.body.length;
  if (value === undefined) return 0;
  try {
    return JSON.stringify(value)?.length ?? 0;
  } catch {
    return Number.POSITIVE_INFINITY; // not serialisable: never stored
  }
}
