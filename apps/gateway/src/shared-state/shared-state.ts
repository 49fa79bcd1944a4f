import { Inject, Injectable, Logger, type BeforeApplicationShutdown, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import KeyvRedis, { createClient } from '@keyv/redis';
import { Keyv } from 'keyv';
import { RedisCoordinator } from 'nest-prompt-orchestrator';
import { DEFAULT_ERROR_CODEC, type ErrorCodec } from 'nest-prompt-orchestrator/internal';
import type { GatewayConfig } from '../config/gateway-config.js';
import { GATEWAY_CONFIG } from '../gateway.tokens.js';
import { ApiError } from '../http/api-error.js';
import type { ClientApi } from '../providers/provider.js';
import { UpstreamStreamError } from '../upstream/stream-end.js';
import { UpstreamHttpError } from '../upstream/upstream-client.js';

type RedisClient = ReturnType<typeof connect>;

/**
 * What replicas share through one Redis (`--redis`): the answer window, and a
 * coordinator that makes one upstream call per key across the fleet and shares
 * the breaker. Both never hold a request up: every operation is bounded, and
 * while Redis is away each replica acts alone (said once in the log, shown in
 * /health), then shares again once it is back.
 */
@Injectable()
export class SharedState implements OnModuleInit, BeforeApplicationShutdown, OnApplicationShutdown {
  readonly windowStore?: Keyv;
  readonly coordinator?: RedisCoordinator;
  /** The commands connection, for other shared counts (rate limits, spend). */
  readonly redis?: { sendCommand(args: string[]): Promise<unknown> };
  private readonly clients: RedisClient[] = [];
  private connecting?: Promise<unknown>;
  private readonly logger = new Logger('Gateway');

  constructor(@Inject(GATEWAY_CONFIG) config: GatewayConfig) {
    if (!config.redisUrl) return;
    const client = connect(config.redisUrl);
    const subscriber = client.duplicate();
    subscriber.on('error', () => undefined);
    this.clients.push(client, subscriber);
    this.redis = client;
    this.connecting = Promise.all(this.clients.map((c) => c.connect().catch(() => undefined)));
    // Every entry under `<prefix>:window::` (so `--redis-prefix` isolates answers too): Keyv hands its namespace to
    // the Redis adapter, which prefixes the keys; Keyv's own key prefix would repeat it. Its errors must reach the
    // window (a failure is a miss and an outage), not turn into "not found".
    this.windowStore = new Keyv({
      store: new KeyvRedis(client, { throwOnErrors: true, throwOnConnectError: true }),
      namespace: `${config.redisPrefix}:window`,
      useKeyPrefix: false,
    });
    this.coordinator = new RedisCoordinator({
      client,
      subscriber,
      prefix: config.redisPrefix,
      opTimeoutMs: Math.max(config.redisTimeoutMs, 50),
      errorCodec: GATEWAY_ERROR_CODEC,
      onState: (state, error) =>
        state === 'degraded'
          ? this.logger.warn(`replica coordination through Redis unavailable (${describe(error)}); each replica acts alone until it is back`)
          : this.logger.log('replica coordination through Redis is back'),
    });
  }

  /**
   * Listening starts once Redis is connected (or a second has passed): the
   * client queues nothing while disconnected, so the first requests would
   * otherwise miss the shared state and report an outage that is not one.
   */
  async onModuleInit(): Promise<void> {
    await Promise.race([this.connecting, sleep(1_000)]);
  }

  /** Before the window's store closes the shared client: the calls still finishing are not an outage to report. */
  beforeApplicationShutdown(): void {
    this.coordinator?.close();
  }

  async onApplicationShutdown(): Promise<void> {
    await Promise.all(this.clients.map(closeClient));
  }
}

/**
 * Quits politely, within a second (a frozen Redis never holds shutdown up),
 * else drops the connection. A client already closed (the window's store
 * closes the shared one) is left alone: closing it again throws.
 */
async function closeClient(client: RedisClient): Promise<void> {
  if (!client.isOpen) return;
  const quit = client.quit().then(
    () => true,
    () => false,
  );
  if (await Promise.race([quit, sleep(1_000).then(() => false)])) return;
  try {
    if (client.isOpen) client.destroy();
  } catch {
    // Closed meanwhile: nothing left to drop.
  }
}

/** A Redis client that fails commands at once while disconnected (no offline queue) and reconnects backing off to 2 s. */
function connect(url: string) {
  const client = createClient({
    url,
    disableOfflineQueue: true,
    socket: { connectTimeout: 1_000, reconnectStrategy: (retries) => Math.min(100 * 2 ** retries, 2_000) },
  });
  // node-redis throws an unhandled 'error' event; the window and the coordinator report the outage once instead.
  client.on('error', () => undefined);
  return client;
}

/**
 * The gateway's own errors across replicas: a replica that followed another's
 * call answers its callers exactly as the leader answered its own (the
 * provider's status and bytes, or the gateway's error).
 */
export const GATEWAY_ERROR_CODEC: ErrorCodec = {
  encode(error) {
    if (error instanceof UpstreamHttpError) {
      return { t: 'upstream', status: error.status, body: error.body.toString('base64'), contentType: error.contentType, api: error.api, retryAfter: error.retryAfter };
    }
    if (error instanceof ApiError) return { t: 'api', status: error.status, message: error.message, code: error.code, param: error.param, type: error.type };
    if (error instanceof UpstreamStreamError) return { t: 'stream', message: error.message, delivered: error.delivered };
    return DEFAULT_ERROR_CODEC.encode(error);
  },
  decode(data) {
    switch (data.t) {
      case 'upstream':
        return new UpstreamHttpError(
          data.status as number,
          Buffer.from(String(data.body), 'base64'),
          data.contentType as string | undefined,
          data.api as ClientApi,
          data.retryAfter as string | undefined,
        );
      case 'api':
        return new ApiError(data.status as number, String(data.message), (data.code as string | null) ?? null, (data.param as string | null) ?? null, data.type as string | undefined);
      case 'stream':
        return new UpstreamStreamError(String(data.message), Boolean(data.delivered));
      default:
        return DEFAULT_ERROR_CODEC.decode(data);
    }
  },
};

function describe(error: unknown): string {
  return ((error as Error | undefined)?.message ?? String(error)).slice(0, 200);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
