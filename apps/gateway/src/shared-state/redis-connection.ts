import { isIP } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { RedisCommands, RedisSubscriber } from 'nest-prompt-orchestrator/core';
import { parseSentinelUrl, type SentinelTarget } from '../config/redis-flags.js';

export type RedisTopology = 'single' | 'cluster' | 'sentinel';

/** What `--redis` and its TLS flags say (the files already read by the configuration). */
export interface RedisTarget {
  url: string;
  /** PEM contents of `--redis-ca`, `--redis-cert`, `--redis-key`. */
  tls?: { ca?: Buffer; cert?: Buffer; key?: Buffer };
}

/** Whatever node-redis object `KeyvRedis` is given (a client, a cluster or a Sentinel set). */
export type KeyvRedisClient = ConstructorParameters<typeof import('@keyv/redis').default>[0];

/**
 * The gateway's connection to Redis, whatever its topology: commands (routed
 * to the node that holds their first key in a cluster), a pub/sub side, and
 * the object the answer window's Keyv store uses.
 */
export interface RedisLink {
  readonly topology: RedisTopology;
  readonly commands: RedisCommands;
  readonly subscriber: RedisSubscriber;
  readonly store: KeyvRedisClient;
  /** Settles once every connection is up, or failed its first attempt. */
  readonly connecting: Promise<unknown>;
  /** Hears every connection error (a refused password or certificate says why Redis is not shared). */
  onError(listener: (error: unknown) => void): void;
  close(): Promise<void>;
}

type RedisModule = typeof import('@keyv/redis');
let redisModule: RedisModule | undefined;

/** node-redis (through `@keyv/redis`), loaded by the first link opened: a gateway without `--redis` never loads it. */
async function loadRedis(): Promise<RedisModule> {
  return (redisModule ??= await import('@keyv/redis'));
}

/** The `@keyv/redis` module a link was opened with (for its Keyv store): only to be asked once a link exists. */
export function redisModuleOfLinks(): RedisModule {
  if (!redisModule) throw new Error('no Redis link has been opened');
  return redisModule;
}

/** The `onError` side of a link: node-redis's 'error' events, which must have a listener, passed on. */
function connectionErrors(): { emit: (error: unknown) => void; onError: (listener: (error: unknown) => void) => void } {
  const listeners: Array<(error: unknown) => void> = [];
  return {
    emit: (error) => listeners.forEach((listener) => listener(error)),
    onError: (listener) => void listeners.push(listener),
  };
}

/** Fails commands at once while disconnected (no offline queue) and reconnects backing off to 2 s. */
const SOCKET = { connectTimeout: 1_000, reconnectStrategy: (retries: number) => Math.min(100 * 2 ** retries, 2_000) };

function socketOptions(target: RedisTarget, tls: boolean) {
  const files = target.tls ?? {};
  return tls || files.ca || files.cert || files.key
    ? { ...SOCKET, tls: true as const, ca: files.ca, cert: files.cert, key: files.key }
    : SOCKET;
}

/**
 * Opens the connection `--redis` names. A `redis+sentinel://` URL is a
 * Sentinel set; any other URL is asked `INFO cluster` on a first plain
 * connection, and a node with `cluster_enabled:1` (any node of a cluster, or a
 * managed service's one endpoint) becomes the root of a cluster client. A
 * Redis not answering within `waitMs` is taken for a single node (and said so
 * in the log if it turns out to be a cluster node once it answers).
 */
export async function openRedisLink(
  target: RedisTarget,
  log: { warn(line: string): void; error(line: string): void },
  waitMs = 1_000,
): Promise<RedisLink> {
  const { createClient } = await loadRedis();
  const sentinel = parseSentinelUrl(target.url);
  if (sentinel) return openSentinel(target, sentinel, waitMs);
  const tls = target.url.startsWith('rediss:') || target.tls !== undefined;
  if (tls) await checkTls(target, waitMs);
  const client = createClient({ url: target.url, disableOfflineQueue: true, socket: socketOptions(target, tls) });
  // node-redis throws an unhandled 'error' event; Redis's health reports the outage once instead.
  const errors = connectionErrors();
  client.on('error', errors.emit);
  const ready = client.connect().then(
    () => true,
    () => false,
  );
  if (await Promise.race([ready, sleep(waitMs).then(() => false)])) {
    const info = await bounded(client.sendCommand(['INFO', 'cluster']), waitMs).catch(() => undefined);
    if (typeof info === 'string' && /^cluster_enabled:1\b/m.test(info)) {
      await closeQuietly(client);
      return openCluster(target, tls, waitMs);
    }
  } else {
    // Not answering yet: a single node, as before. Should it answer as a cluster node, only a restart can switch.
    void ready.then(async () => {
      const info = await client.sendCommand(['INFO', 'cluster']).catch(() => undefined);
      if (typeof info === 'string' && /^cluster_enabled:1\b/m.test(info)) {
        log.error(
          '--redis is a Redis Cluster node, which was unreachable at start: restart the gateway to use the cluster (until then replicas do not share)',
        );
      }
    });
  }
  const subscriber = client.duplicate();
  subscriber.on('error', () => undefined);
  const connecting = Promise.all([ready, subscriber.connect().catch(() => undefined)]);
  return {
    topology: 'single',
    commands: client,
    subscriber,
    store: client,
    connecting,
    onError: errors.onError,
    close: () => closeAll([client, subscriber]).then(() => undefined),
  };
}

/**
 * One TLS handshake and a PING before any client is made: a certificate
 * refused either way stops the start with the reason, naming the flags (a
 * Redis that is not reachable yet is no such error: the gateway starts and
 * acts alone until it is). Also, node-redis can meet a refusal that comes
 * right after the handshake (TLS 1.3 asks for the client certificate then)
 * with no error listener on its socket, which would end the process.
 */
async function checkTls(target: RedisTarget, waitMs: number): Promise<void> {
  const url = new URL(target.url.replace(/^rediss?:/, 'redis:'));
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const files = target.tls ?? {};
  const refusal = await new Promise<string | undefined>((resolve) => {
    let handshaken = false;
    const socket = tlsConnect({
      host,
      port: Number(url.port || 6379),
      ca: files.ca,
      cert: files.cert,
      key: files.key,
      servername: isIP(host) ? undefined : host,
    });
    const done = (reason: string | undefined) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(reason);
    };
    const timer = setTimeout(() => done(undefined), Math.max(waitMs, 2_000));
    socket.on('secureConnect', () => {
      handshaken = true;
      socket.write('PING\r\n');
    });
    // Any answer (+PONG, or -NOAUTH when a password is due) means TLS is accepted.
    socket.once('data', () => done(undefined));
    socket.on('error', (error: NodeJS.ErrnoException) => {
      const tlsError =
        /^ERR_(SSL|TLS)_/.test(error.code ?? '') ||
        /certificate|alert|self.signed|verify|handshake/i.test(error.message);
      done(tlsError || handshaken ? error.message.split('\n')[0].slice(0, 200) : undefined);
    });
    socket.on('close', () => done(handshaken ? 'the connection was closed after the TLS handshake' : undefined));
  });
  if (refusal)
    throw new Error(`Redis refused the TLS connection (${refusal}): check --redis-ca, --redis-cert and --redis-key`);
}

/** A cluster client rooted at the node `--redis` names; every node is reached with the same credentials and TLS. */
async function openCluster(target: RedisTarget, tls: boolean, waitMs: number): Promise<RedisLink> {
  const { createClient, createCluster } = await loadRedis();
  const url = new URL(target.url);
  const defaults = {
    username: url.username ? decodeURIComponent(url.username) : undefined,
    password: url.password ? decodeURIComponent(url.password) : undefined,
    disableOfflineQueue: true,
    socket: socketOptions(target, tls),
  };
  const cluster = createCluster({ rootNodes: [{ url: target.url }], defaults });
  // node-redis learns a new slot map only from a MOVED reply: commands for the slots of a master that died would go
  // to its dead connection for good, and a first discovery that failed is never tried again. While a node's
  // connection is failing, and after a failed command, a node that is up (else the node `--redis` names) is asked for
  // the map, at most once a second: once a replica took over, commands go to it before any request fails there.
  let lastRediscovery = 0;
  const rediscover = () => {
    if (Date.now() - lastRediscovery < 1_000) return;
    lastRediscovery = Date.now();
    const alive = [...cluster.masters, ...cluster.replicas].find((node) => node.client?.isReady)?.client;
    // Only its options are used: a client to the root node, never connected itself.
    const root = alive ?? createClient({ url: target.url, ...defaults });
    void cluster._slots.rediscover(root).catch(() => undefined);
  };
  const errors = connectionErrors();
  cluster.on('error', errors.emit);
  cluster.on('node-error', (error: unknown) => {
    errors.emit(error);
    rediscover();
  });
  cluster.on('node-reconnecting', rediscover);
  // Slots known before anything subscribes (a subscription needs a node to subscribe on).
  const connecting = bounded(cluster.connect(), Math.max(waitMs, 5_000)).catch(() => undefined);
  await connecting;
  return {
    topology: 'cluster',
    // Each command goes to the node holding its first key (scripts: their first KEYS entry); every key a script or a
    // multi-key command touches carries the same hash tag, so one node holds them all.
    commands: {
      sendCommand: (args: string[]) =>
        cluster.sendCommand(firstKey(args), false, args).catch((error: unknown) => {
          rediscover();
          throw error;
        }),
    },
    // Classic pub/sub: the cluster's own subscriber connection hears a PUBLISH made on any node (scripts publish on
    // the node of their keys), and node-redis moves it to another node when its node leaves.
    subscriber: pubSub(cluster),
    store: cluster,
    connecting,
    onError: errors.onError,
    close: () => closeAll([cluster]).then(() => undefined),
  };
}

async function openSentinel(target: RedisTarget, sentinel: SentinelTarget, waitMs: number): Promise<RedisLink> {
  const { createSentinel } = await loadRedis();
  const socket = socketOptions(target, sentinel.tls);
  const set = createSentinel({
    name: sentinel.name,
    sentinelRootNodes: sentinel.sentinels,
    // The URL's credentials and database are the data nodes'; sentinels are asked without them.
    nodeClientOptions: {
      username: sentinel.username,
      password: sentinel.password,
      database: sentinel.database,
      disableOfflineQueue: true,
      socket,
    },
    sentinelClientOptions: { socket },
    // A failover is noticed from Sentinel's own announcements; the scan is a backstop.
    scanInterval: 2_000,
  });
  const errors = connectionErrors();
  set.on('error', errors.emit);
  set.on('client-error', (event: { error?: unknown }) => errors.emit(event?.error ?? event));
  const connecting = set.connect().catch(() => undefined);
  await Promise.race([connecting, sleep(waitMs)]);
  return {
    topology: 'sentinel',
    commands: { sendCommand: (args: string[]) => set.sendCommand(false, args) },
    subscriber: pubSub(set),
    store: set,
    connecting,
    onError: errors.onError,
    close: () => closeAll([set]).then(() => undefined),
  };
}

interface PubSubSide {
  subscribe(channel: string, listener: (message: string) => void): Promise<unknown>;
  unsubscribe(channel: string, listener?: (message: string | Buffer) => void): Promise<unknown>;
}

/** String messages only (the coordinator never asks for buffers). */
function pubSub(side: PubSubSide): RedisSubscriber {
  return {
    subscribe: (channel, listener) => side.subscribe(channel, listener),
    unsubscribe: (channel, listener) =>
      side.unsubscribe(channel, listener as ((message: string | Buffer) => void) | undefined),
  };
}

/** The key a command is routed by in a cluster: a script's first key, else the command's first argument. */
export function firstKey(args: string[]): string | undefined {
  const command = args[0]?.toUpperCase();
  if (command === 'EVAL' || command === 'EVALSHA' || command === 'FCALL')
    return Number(args[2]) > 0 ? args[3] : undefined;
  if (command === 'PING' || command === 'INFO') return undefined;
  return args[1];
}

interface Closable {
  isOpen: boolean;
  close(): Promise<unknown>;
  destroy(): unknown;
}

/**
 * Quits politely, within a second (a frozen Redis never holds shutdown up),
 * else drops the connection. A client already closed (the window's store
 * closes the shared one) is left alone: closing it again throws.
 */
async function closeAll(clients: Closable[]): Promise<unknown> {
  return Promise.all(clients.map(closeQuietly));
}

async function closeQuietly(client: Closable): Promise<void> {
  if (!client.isOpen) return;
  const quit = client.close().then(
    () => true,
    () => false,
  );
  if (await Promise.race([quit, sleep(1_000).then(() => false)])) return;
  try {
    if (client.isOpen) await client.destroy();
  } catch {
    // Closed meanwhile: nothing left to drop.
  }
}

function bounded<T>(promise: Promise<T>, ms: number): Promise<T> {
  return Promise.race([promise, sleep(ms).then(() => Promise.reject(new Error('no answer from Redis')))]);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

/**
 * The fleet heartbeat's hash, and Redis health's probe key beside it: one hash tag, so the probe's script (which
 * writes the one and reads the other) touches one slot in a Redis Cluster.
 */
export function fleetKey(prefix: string, part?: 'probe'): string {
  return part ? `${prefix}:{fleet}:${part}` : `${prefix}:{fleet}`;
}
