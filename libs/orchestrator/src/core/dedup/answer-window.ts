import { createCache, type Cache } from 'cache-manager';
import type { Keyv } from 'keyv';
import { LRUCache } from 'lru-cache';
import { describeError, withTimeout } from '../bounded.js';
import { ChunkEvent, RawResponse, isRawResponse, type CallEvent, type Chunk, type StreamHead } from '../events.js';

/**
 * A finished answer as recorded. Plain data (a `RawResponse` is kept as `bytes`), so a shared store (Redis) can hold
 * it; `tag` is what its leader's request said of itself (`CallRequest.tag`).
 */
export type WindowPayload<T> = (
  | { kind: 'value'; value: T }
  | { kind: 'bytes'; body: Buffer; contentType: string; headers?: Record<string, string>; status?: number }
  | { kind: 'stream'; head: StreamHead; chunks: Chunk[] }
) & { tag?: unknown };

/** A finished answer kept for reuse, with when it was stored and until when it is reused. */
export type WindowEntry<T> = WindowPayload<T> & {
  /** Epoch ms when the answer was stored: its age is what `Age` and `max-age` speak of. */
  storedAt: number;
  /** Epoch ms after which it is no longer reused. */
  expiresAt: number;
};

/**
 * Where the window keeps the bytes of the streams it stores, instead of the Buffers they arrived in (see the
 * gateway's `ByteArena`). `keep` returns the stream's bytes copied into memory the keeper owns (or undefined: the
 * chunks are kept as they are); `release` is called once the window has let the stream go.
 */
export interface ByteKeeper {
  keep(chunks: readonly Buffer[], size: number): { chunks: Buffer[]; release: () => void } | undefined;
}

/** A shared store's state: `ok`, or `degraded` (skipped, and tried again now and then) after a failure or a slow answer. */
export type StoreState = 'ok' | 'degraded';

export interface AnswerWindowOptions {
  /** Most entries the in-memory tier keeps (least recently used go first). */
  maxEntries: number;
  /** Bytes the in-memory tier keeps at most, measured on what each entry holds. */
  maxBytes: number;
  /** Keyv stores shared with other replicas (e.g. Redis), behind the in-memory tier. */
  stores?: Keyv[];
  /** Longest any shared-store operation may take; a slower one counts as a failure (and as a miss). */
  storeTimeoutMs: number;
  /** While degraded, how often the shared store is tried again. */
  storeRetryMs: number;
  /** The shared store failed (once per outage), or is reachable again. */
  onStoreState?: (state: StoreState, error?: unknown) => void;
}

export interface WindowHealth {
  entries: number;
  bytes: number;
  maxBytes: number;
  /** The shared store's state; absent when there is none. */
  store?: { state: StoreState; since: number; error?: string };
}

// Bookkeeping an entry costs beyond its payload (object headers, the LRU's node, the key): counted so that
// a budget of many tiny answers is not underestimated.
const ENTRY_OVERHEAD = 256;
/** How long closing a shared store may take at shutdown (at least one operation's bound). */
const DISCONNECT_MS = 1_000;
const CHUNK_OVERHEAD = 32;

/**
 * The window of recent successful answers: a synchronous in-memory LRU
 * bounded in entries and in bytes, and (optionally) shared stores behind it
 * through cache-manager. The in-memory tier is lru-cache rather than
 * cache-manager's own memory store because only lru-cache bounds the total
 * size; a look-up that hits it costs no promise.
 *
 * A shared store never holds a request up: every operation is bounded by
 * `storeTimeoutMs`, a failure is a miss, and after one the store is skipped
 * (degraded) and tried again every `storeRetryMs` until it answers.
 */
export class AnswerWindow {
  private readonly memory: LRUCache<string, WindowEntry<unknown>>;
  private readonly shared?: Cache;
  private store?: { state: StoreState; since: number; error?: string; retry?: ReturnType<typeof setTimeout> };
  /** Where stored streams' bytes go (set once, before any answer is stored). */
  keeper?: ByteKeeper;
  /** What to call when an entry whose bytes a keeper holds is let go (evicted, expired, replaced, cleared). */
  private readonly releases = new WeakMap<object, () => void>();

  constructor(private readonly options: AnswerWindowOptions) {
    this.memory = new LRUCache<string, WindowEntry<unknown>>({
      max: options.maxEntries,
      maxSize: options.maxBytes,
      sizeCalculation: entrySize,
      dispose: (entry) => {
        const release = this.releases.get(entry);
        if (release === undefined) return;
        this.releases.delete(entry);
        release();
      },
    });
    if (options.stores?.length) {
      // Keyv and cache-manager both turn a store failure into a quiet miss. Keyv is told to throw, and
      // cache-manager's events carry the error, so that a dead store is noticed (and skipped) instead.
      for (const store of options.stores) {
        store.throwOnErrors = true;
        store.on('error', (error: unknown) => this.degrade(error));
      }
      const shared = createCache({ stores: options.stores });
      for (const event of ['get', 'set', 'clear'] as const) {
        shared.on(event, (info: { error?: unknown }) => {
          if (info.error !== undefined) this.degrade(info.error);
        });
      }
      this.shared = shared;
      this.store = { state: 'ok', since: Date.now() };
    }
  }

  /** The stored answer, from memory only: no promise, no I/O. */
  getLocal<T>(key: string): WindowEntry<T> | undefined {
    const entry = this.memory.get(key) as WindowEntry<T> | undefined;
    if (entry && entry.expiresAt <= Date.now()) {
      this.memory.delete(key);
      return undefined;
    }
    return entry;
  }

  /** Whether a look-up may find more than memory holds (a shared store that is not degraded). */
  get hasShared(): boolean {
    return this.store?.state === 'ok';
  }

  /** The stored answer from the shared store (within its time bound), kept in memory too for the next look-up. */
  async getShared<T>(key: string): Promise<WindowEntry<T> | undefined> {
    const entry = await this.sharedOp((cache) => cache.get<WindowEntry<T>>(key));
    if (!entry || typeof entry.expiresAt !== 'number' || entry.expiresAt <= Date.now()) return undefined;
    this.memory.set(key, entry);
    return entry;
  }

  /** Memory first, then the shared store. */
  async get<T>(key: string): Promise<WindowEntry<T> | undefined> {
    return this.getLocal<T>(key) ?? (this.hasShared ? this.getShared<T>(key) : undefined);
  }

  /**
   * Keeps the answer for `ttlMs` in memory and in the shared store; a store failure is reported, not thrown.
   * Returns what to wait for while the shared store takes it (nothing without one: the memory tier is synchronous).
   */
  set<T>(key: string, payload: WindowPayload<T>, ttlMs: number): Promise<void> | undefined {
    const entry = this.setLocal(key, payload, ttlMs);
    if (!this.hasShared) return undefined;
    const shared = entry.kind === 'stream' ? { ...entry, chunks: joinBytes(entry.chunks) } : entry;
    return this.sharedOp((cache) => cache.set(key, shared, ttlMs)).then(noop);
  }

  /**
   * Keeps the answer in memory only (another replica already put it in the shared store). The payload becomes the
   * entry (its times are added to it): it is the recorder's own, made for this.
   */
  setLocal<T>(key: string, payload: WindowPayload<T>, ttlMs: number): WindowEntry<T> {
    const entry = payload as WindowEntry<T>;
    entry.storedAt = Date.now();
    entry.expiresAt = entry.storedAt + ttlMs;
    if (this.keeper && entry.kind === 'stream') this.keep(entry, this.keeper);
    // No ttl for lru-cache: `getLocal` reads `expiresAt` itself, and lru-cache's own clock per entry costs every set.
    this.memory.set(key, entry);
    return entry;
  }

  /** A stream's bytes, moved into the keeper's memory (a stream with text chunks, or one it has no room for, stays). */
  private keep(entry: Extract<WindowEntry<unknown>, { kind: 'stream' }>, keeper: ByteKeeper): void {
    let size = 0;
    for (const chunk of entry.chunks) {
      if (typeof chunk === 'string') return;
      size += chunk.length;
    }
    const kept = keeper.keep(entry.chunks as Buffer[], size);
    if (kept === undefined) return;
    entry.chunks = kept.chunks;
    this.releases.set(entry, kept.release);
  }

  health(): WindowHealth {
    const store = this.store && { state: this.store.state, since: this.store.since, error: this.store.error };
    return { entries: this.memory.size, bytes: this.memory.calculatedSize, maxBytes: this.options.maxBytes, store };
  }

  async clear(): Promise<void> {
    this.memory.clear();
    if (this.hasShared) await this.sharedOp((cache) => cache.clear());
  }

  /** Closes the shared stores, within about a second: a frozen store never holds shutdown up. */
  async disconnect(): Promise<void> {
    clearTimeout(this.store?.retry);
    if (this.shared)
      await withTimeout(this.shared.disconnect(), Math.max(this.options.storeTimeoutMs, DISCONNECT_MS)).catch(
        () => undefined,
      );
  }

  private async sharedOp<R>(op: (cache: Cache) => Promise<R>): Promise<R | undefined> {
    if (!this.shared || this.store?.state !== 'ok') return undefined;
    try {
      return await withTimeout(op(this.shared), this.options.storeTimeoutMs);
    } catch (error) {
      this.degrade(error);
      return undefined;
    }
  }

  private degrade(error: unknown): void {
    const store = this.store;
    if (!store || store.state === 'degraded') return;
    this.store = { state: 'degraded', since: Date.now(), error: describeError(error) };
    this.options.onStoreState?.('degraded', error);
    this.scheduleRetry();
  }

  private scheduleRetry(): void {
    const store = this.store!;
    store.retry = setTimeout(() => void this.retry(), this.options.storeRetryMs);
    store.retry.unref?.();
  }

  /** One bounded look-up: an answer (even "not found") means the store is back. */
  private async retry(): Promise<void> {
    try {
      // Straight to the stores: cache-manager would turn a failure into a miss.
      const stores = this.options.stores!;
      await withTimeout(
        Promise.all(stores.map((store) => store.get('nest-prompt-orchestrator:probe'))),
        this.options.storeTimeoutMs,
      );
    } catch (error) {
      this.store!.error = describeError(error);
      return this.scheduleRetry();
    }
    this.store = { state: 'ok', since: Date.now() };
    this.options.onStoreState?.('ok');
  }
}

/** Bytes an entry holds, as the in-memory budget counts them. */
export function entrySize(entry: WindowPayload<unknown>): number {
  switch (entry.kind) {
    case 'bytes':
      return ENTRY_OVERHEAD + entry.body.length;
    case 'stream': {
      let size = ENTRY_OVERHEAD;
      // A string holds at most 2 bytes per UTF-16 unit; SSE text is nearly always one byte per unit.
      for (const chunk of entry.chunks) size += CHUNK_OVERHEAD + chunk.length;
      return size;
    }
    case 'value':
      return ENTRY_OVERHEAD + sizeOf(entry.value);
  }
}

/** Rebuilds a call's events from a stored answer. */
export function replayEntry<T>(entry: WindowPayload<T>): CallEvent<T>[] {
  if (entry.kind === 'value') return [{ kind: 'value', value: entry.value }];
  if (entry.kind === 'bytes')
    return [{ kind: 'value', value: new RawResponse(entry.body, entry.contentType, entry.headers, entry.status) as T }];
  const events: CallEvent<T>[] = [{ kind: 'head', head: entry.head }];
  for (const chunk of entry.chunks) events.push(new ChunkEvent(chunk));
  return events;
}

/** Size of a value as the window counts it: its bytes, or its length once serialised; measured once per upstream call. */
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

function noop(): void {}

/**
 * A finished stream of relayed bytes as one Buffer, for a shared store: one value to write and read, and never
 * decoded chunk by chunk (a chunk may end inside a multi-byte character). Text chunks stay as they are. In memory
 * the chunks stay as they came: joining them would copy every stream once more.
 */
function joinBytes(chunks: Chunk[]): Chunk[] {
  if (chunks.length < 2 || chunks.every((chunk) => typeof chunk === 'string')) return chunks;
  return [Buffer.concat(chunks.map((chunk) => (typeof chunk === 'string' ? Buffer.from(chunk) : chunk)))];
}
