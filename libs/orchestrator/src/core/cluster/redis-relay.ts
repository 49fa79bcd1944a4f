import { randomUUID } from 'node:crypto';
import { GONE, HEARTBEAT } from './relay-wire.js';
import type { RelayFollow, RelayFollower, RelayLead, RelayPublisher, RelayTransport } from './relay.js';

/** What the Redis relay uses of its coordinator: bounded commands, and the outage state it shares with the breakers. */
export interface RedisRelayStore {
  readonly replicaId: string;
  readonly leaseMs: number;
  readonly pollMs: number;
  readonly streamTtlMs: number;
  readonly maxBacklogBytes: number;
  available(): boolean;
  command(args: string[]): Promise<unknown>;
  eval(script: string, keys: string[], args: string[]): Promise<unknown>;
  subscribe(channel: string, listener: (message: string) => void): Promise<unknown>;
  unsubscribe(channel: string, listener: (message: string) => void): Promise<unknown>;
  degrade(error: unknown): void;
  key(kind: string, id: string): string;
  flightKey(flight: string, what: 'stream' | 'events'): string;
}

// XADDs then PUBLISH, atomically: a follower that subscribed and then read the stream misses nothing. Each message
// carries its number (`seq`), so a follower tells a gap (messages trimmed or evicted) from the next one; the oldest
// are trimmed (`MINID`) to keep the stream within its backlog. Messages that waited are appended together.
const APPEND = `local ids = {}
for i = 3, #ARGV, 2 do ids[#ids + 1] = redis.call('XADD', KEYS[1], '*', 'event', ARGV[i], 'seq', ARGV[i + 1]) end
if ARGV[2] ~= '' then redis.call('XTRIM', KEYS[1], 'MINID', ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PUBLISH', KEYS[2], ids[#ids])
return ids`;
/** Most bytes of messages one append carries (those that waited for Redis go together, up to this or a quarter of the backlog). */
const APPEND_BATCH_BYTES = 64 * 1024;
// A leader renews its lease, and takes it again if Redis evicted it (never from another holder).
const REASSERT = `local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not held then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end
return 0`;
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;
/** Messages a follower reads at once: a late joiner of a long stream reads it in parts, none of them long for Redis. */
const READ_BATCH = 200;

/**
 * The relay over one Redis: for each key, the replica that wins a lease (`SET NX PX`, renewed while its call runs)
 * leads and appends each message to a Redis stream, announcing it on a channel; the others read the stream from its
 * start, then follow the announcements, with a poll every `pollMs` so that a lost announcement costs latency, never
 * correctness. A leader that dies stops renewing: once its lease is lost and it fell silent for a lease, its
 * followers are told `gone`.
 */
export class RedisRelay implements RelayTransport {
  constructor(private readonly store: RedisRelayStore) {}

  async claim(key: string, trace?: string): Promise<RelayLead | RelayFollow | undefined> {
    const store = this.store;
    if (!store.available()) return undefined;
    // The leader's span rides in the lease's value: a follower learns it with the same reply that makes it follow.
    const holder = `${store.replicaId}:${randomUUID()}${trace && TRACEPARENT.test(trace) ? `;${trace}` : ''}`;
    let previous: unknown;
    try {
      previous = await store.command([
        'SET',
        store.key('lease', key),
        holder,
        'NX',
        'PX',
        String(store.leaseMs),
        'GET',
      ]);
    } catch (error) {
      store.degrade(error);
      return undefined;
    }
    if (previous === null) return { role: 'lead', open: () => this.publisher(key, holder) };
    const leader = String(previous);
    const mark = leader.indexOf(';');
    const open = (follower: RelayFollower) => this.follow(key, leader, follower);
    return mark < 0 ? { role: 'follow', open } : { role: 'follow', open, leader: leader.slice(mark + 1) };
  }

  /**
   * Appends the leader's messages in order to the call's stream, numbered. An append that fails is tried again (a
   * follower skips a message it already has) until Redis has failed for a whole lease or the messages waiting for it
   * outgrow the backlog: only then does the leader stop publishing, and stop renewing its lease, so that its
   * followers learn within a lease that it is lost to them. While the call is silent, a heartbeat tells the
   * followers it lives, whatever happens to the lease's key.
   */
  private publisher(key: string, holder: string): RelayPublisher {
    const store = this.store;
    const lease = store.key('lease', key);
    const stream = store.flightKey(flightOf(holder), 'stream');
    const channel = store.flightKey(flightOf(holder), 'events');
    const backlog = new Backlog(store.maxBacklogBytes);
    const waiting: Array<{ text: string; n: number }> = [];
    let waitingBytes = 0;
    let sequence = 0;
    let sending = false;
    let broken = false;
    let ended = false;
    let failingSince: number | undefined;
    let queuedAt = Date.now();
    const ttl = String(store.streamTtlMs);
    // A part of the backlog at most: a follower reading behind has the time of a few appends before its messages go.
    const batchBytes = Math.min(APPEND_BATCH_BYTES, Math.floor(store.maxBacklogBytes / 4));
    const renew = setInterval(() => {
      void store.eval(REASSERT, [lease], [holder, String(store.leaseMs)]).catch(() => undefined);
      if (!ended && Date.now() - queuedAt >= store.leaseMs / 6) append(HEARTBEAT);
    }, store.leaseMs / 3);
    renew.unref?.();
    const giveUp = (error: unknown) => {
      // Followers notice within a lease (nothing renews it) and take over, or fail; this call goes on for its own callers.
      broken = true;
      clearInterval(renew);
      waiting.length = 0;
      waitingBytes = 0;
      store.degrade(error);
    };
    const pump = async () => {
      if (sending) return;
      sending = true;
      while (waiting.length > 0 && !broken) {
        let count = 0;
        let bytes = 0;
        const args: string[] = [];
        for (; count < waiting.length && (count === 0 || bytes + waiting[count].text.length <= batchBytes); count++) {
          bytes += waiting[count].text.length;
          args.push(waiting[count].text, String(waiting[count].n));
        }
        try {
          const trimTo = backlog.trimFor(bytes);
          const ids = (await store.eval(APPEND, [stream, channel], [ttl, trimTo, ...args])) as unknown[];
          for (let i = 0; i < count; i++) backlog.add(String(ids[i]), waiting[i].text.length);
          failingSince = undefined;
          waiting.splice(0, count);
          waitingBytes -= bytes;
        } catch (error) {
          failingSince ??= Date.now();
          if (Date.now() - failingSince >= store.leaseMs || waitingBytes > store.maxBacklogBytes) giveUp(error);
          else await delay(Math.min(store.pollMs, 100));
        }
      }
      sending = false;
      if (ended && waiting.length === 0) release();
    };
    // Renewed until the end is in Redis (however long Redis takes): followers must not take over meanwhile.
    const release = () => {
      clearInterval(renew);
      void store.eval(RELEASE, [lease], [holder]).catch(() => undefined);
    };
    const append = (text: string) => {
      if (broken) return;
      waiting.push({ text, n: sequence++ });
      waitingBytes += text.length;
      queuedAt = Date.now();
      void pump();
    };
    return {
      send: append,
      end: (text) => {
        ended = true;
        if (broken) release();
        else append(text);
      },
    };
  }

  /**
   * Another replica's call, from its first message: read from the stream (in parts), then on each announcement and
   * every `pollMs`. The leader lives while it holds its lease or its messages (heartbeats included) keep coming: a
   * lease Redis evicted, or another replica took meanwhile, does not cut its followers. Once it is gone (lease lost
   * and silent for a lease), the follower is told `gone`. Messages it cannot read in order are a gap.
   */
  private follow(key: string, initialHolder: string, follower: RelayFollower): (left: boolean) => void {
    const store = this.store;
    let holder = initialHolder;
    let lastId = '-';
    /** The number of the next message. */
    let expected = 0;
    let finished = false;
    let reading: Promise<void> | undefined;
    let again = false;
    let channel = '';
    /** When the leader was last heard from (a message read), and since when Redis fails us. */
    let heardAt = Date.now();
    let failingSince: number | undefined;
    const listener = () => void read();

    const stop = () => {
      if (finished) return;
      finished = true;
      clearInterval(poll);
      if (channel) void store.unsubscribe(channel, listener).catch(() => undefined);
    };
    // One read at a time; an announcement during a read asks for one more.
    const read = async (): Promise<void> => {
      if (finished) return;
      if (reading) {
        again = true;
        return reading;
      }
      reading = (async () => {
        do {
          again = false;
          for (;;) {
            const stream = store.flightKey(flightOf(holder), 'stream');
            const entries = (await store.command([
              'XRANGE',
              stream,
              lastId === '-' ? '-' : `(${lastId}`,
              '+',
              'COUNT',
              String(READ_BATCH),
            ])) as Array<[string, string[]]> | null;
            failingSince = undefined;
            for (const [id, fields] of entries ?? []) {
              lastId = id;
              heardAt = Date.now();
              const n = Number(fields[3]);
              // An append the leader tried again after a timeout that had in fact landed.
              if (n < expected) continue;
              // Messages missing before the next one this follower can read: never skipped, never taken from another call.
              if (n > expected) return follower.gap();
              expected = n + 1;
              follower.message(fields[1]);
              if (finished) return;
            }
            if (!entries || entries.length < READ_BATCH || finished) break;
          }
        } while (again && !finished);
      })()
        .catch((error: unknown) => failed(error))
        .finally(() => (reading = undefined));
      return reading;
    };
    const watch = async (next: string) => {
      if (channel) await store.unsubscribe(channel, listener).catch(() => undefined);
      holder = next;
      lastId = '-';
      channel = store.flightKey(flightOf(holder), 'events');
      // Subscribed before reading: whatever is appended after the read is announced to us (and polled for anyway).
      await store.subscribe(channel, listener).catch(() => undefined);
      await read();
    };
    // Redis failed a read: tried again at the next poll; failing for a whole lease, coordination is lost.
    const failed = (error: unknown) => {
      failingSince ??= Date.now();
      if (Date.now() - failingSince < store.leaseMs) return;
      store.degrade(error);
      follower.failed();
    };
    const poll = setInterval(() => {
      void read().then(async () => {
        if (finished) return;
        let current: unknown;
        try {
          current = await store.command(['GET', store.key('lease', key)]);
        } catch (error) {
          return failed(error);
        }
        // Its lease, or its messages still coming: the leader lives, whoever holds the lease's key now.
        if (finished || current === holder || Date.now() - heardAt < store.leaseMs) return;
        // Read once more: the leader may have ended between our read and the check.
        await read();
        if (!finished) follower.message(GONE);
      });
    }, store.pollMs);
    poll.unref?.();
    void watch(holder).catch((error: unknown) => failed(error));
    return stop;
  }
}

/** The flight id in a lease holder's value (`replica:flight`, then `;traceparent` when the leader is traced). */
function flightOf(holder: string): string {
  const mark = holder.indexOf(';');
  return holder.slice(holder.indexOf(':') + 1, mark < 0 ? undefined : mark);
}

// Only a plain traceparent goes into a lease's value (it must never hold a `;` or `:` of its own).
const TRACEPARENT = /^[\da-f]{2}-[\da-f]{32}-[\da-f]{16}-[\da-f]{2}$/;

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref?.());
}

/**
 * What a call's Redis stream keeps, as its leader counts it: the ids and sizes of its newest messages, within
 * `maxBytes`. `trimFor` says from which id on the stream is kept once the next message is added (`MINID`), or
 * `''` when nothing has to go.
 */
class Backlog {
  private readonly ids: string[] = [];
  private readonly sizes: number[] = [];
  private head = 0;
  private bytes = 0;

  constructor(private readonly maxBytes: number) {}

  trimFor(size: number): string {
    let last: string | undefined;
    while (this.head < this.ids.length && this.bytes + size > this.maxBytes) {
      last = this.ids[this.head];
      this.bytes -= this.sizes[this.head++];
    }
    if (this.head > 1024 && this.head * 2 > this.ids.length) {
      this.ids.splice(0, this.head);
      this.sizes.splice(0, this.head);
      this.head = 0;
    }
    if (last === undefined) return '';
    return this.head < this.ids.length ? this.ids[this.head] : following(last);
  }

  add(id: string, size: number): void {
    this.ids.push(id);
    this.sizes.push(size);
    this.bytes += size;
  }
}

/** The stream id right after `id` (`ms-seq`): `MINID` of it trims `id` and everything before. */
function following(id: string): string {
  const dash = id.indexOf('-');
  return `${id.slice(0, dash)}-${BigInt(id.slice(dash + 1)) + 1n}`;
}
