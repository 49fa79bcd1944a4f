import { readFileSync } from 'node:fs';
import { ConfigError } from '../common/config-error.js';

/** `--redis` and its companions: the URL (a node, or a Sentinel set), TLS files, and what limits do without Redis. */

export type LimitsWithoutRedis = 'open' | 'closed' | 'share';

/** PEM contents of `--redis-ca`, `--redis-cert`, `--redis-key`. */
export interface RedisTlsFiles {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
}

/** A Sentinel set: `redis+sentinel://[user:password@]host:port[,host:port...]/master-name[/db]` (`rediss+sentinel` for TLS). */
export interface SentinelTarget {
  name: string;
  sentinels: Array<{ host: string; port: number }>;
  username?: string;
  password?: string;
  database?: number;
  tls: boolean;
}

const SENTINEL_URL = /^(rediss?)\+sentinel:\/\/(?:([^@/]*)@)?([^/]+)\/([^/?#]+)(?:\/(\d+))?\/?$/;

/** The Sentinel set a `redis+sentinel://` URL names, `undefined` for another URL; throws (naming the flag, never a password) when it is malformed. */
export function parseSentinelUrl(url: string): SentinelTarget | undefined {
  if (!/^rediss?\+sentinel:/.test(url)) return undefined;
  const match = SENTINEL_URL.exec(url);
  if (!match)
    throw new Error(
      '--redis: a Sentinel URL is redis+sentinel://[user:password@]host:port[,host:port...]/master-name[/db]',
    );
  const [, scheme, userinfo, hosts, name, db] = match;
  const sentinels = hosts.split(',').map((entry) => {
    const at = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(entry.trim());
    const port = Number(at?.[2] ?? 26379);
    if (!at || !Number.isInteger(port) || port < 1 || port > 65535)
      throw new Error(`--redis: "${entry}" is not a sentinel's host:port`);
    return { host: at[1].replace(/^\[|\]$/g, ''), port };
  });
  let username: string | undefined;
  let password: string | undefined;
  if (userinfo) {
    const colon = userinfo.indexOf(':');
    username = colon < 0 ? undefined : decodeURIComponent(userinfo.slice(0, colon)) || undefined;
    password = decodeURIComponent(colon < 0 ? userinfo : userinfo.slice(colon + 1));
  }
  return {
    name: decodeURIComponent(name),
    sentinels,
    username,
    password,
    database: db === undefined ? undefined : Number(db),
    tls: scheme === 'rediss',
  };
}

/** Checks `--redis`; throws `ConfigError` naming the flag (never echoing the URL, which may hold a password). */
export function checkRedisUrl(url: string): void {
  // A Sentinel URL lists several hosts, which URL cannot parse.
  try {
    if (!parseSentinelUrl(url)) parseRedisUrl(url);
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
}

/** A redis:// or rediss:// URL; the message never repeats it (it may hold a password). */
function parseRedisUrl(raw: string): void {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error('--redis must be a redis://, rediss:// or redis+sentinel:// URL');
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
    throw new Error(`--redis must use redis:, rediss: or redis+sentinel:, got "${url.protocol}"`);
  }
}

/** `--redis-ca`, `--redis-cert`, `--redis-key`, read now: a missing or unreadable file stops the start, naming its flag. */
export function readRedisTls(
  raw: (name: string) => string | undefined,
  redisUrl: string | undefined,
): RedisTlsFiles | undefined {
  const read = (flag: 'redis-ca' | 'redis-cert' | 'redis-key') => {
    const path = raw(flag);
    if (path === undefined) return undefined;
    if (redisUrl === undefined) throw new ConfigError(`--${flag} needs --redis`);
    try {
      return readFileSync(path);
    } catch (error) {
      throw new ConfigError(`--${flag} ${path}: cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
    }
  };
  const tls = { ca: read('redis-ca'), cert: read('redis-cert'), key: read('redis-key') };
  if ((tls.cert === undefined) !== (tls.key === undefined))
    throw new ConfigError('--redis-cert and --redis-key go together');
  return tls.ca || tls.cert ? tls : undefined;
}

/** `--redis-prefix`: braces would decide which Redis Cluster slot a key is in. */
export function checkRedisPrefix(prefix: string | undefined): void {
  if (prefix !== undefined && /[{}]/.test(prefix)) {
    throw new ConfigError(
      '--redis-prefix must not hold { or }: they would decide which Redis Cluster slot a key is in',
    );
  }
}

/** `--limits-without-redis`: share unless given. */
export function parseLimitsWithoutRedis(value: string | undefined): LimitsWithoutRedis {
  if (value === undefined) return 'share';
  if (value === 'open' || value === 'closed' || value === 'share') return value;
  throw new ConfigError(`--limits-without-redis must be share, closed or open, got "${value}"`);
}
