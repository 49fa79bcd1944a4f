import { Keyv } from 'keyv';
import { DEFAULT_ERROR_CODEC, RedisCoordinator, type ErrorCodec } from 'nest-prompt-orchestrator/core';
import type { GatewayConfig } from '../config/gateway-config.js';
import type { ContextLog } from '../common/context-log.js';
import { redisModuleOfLinks, type RedisLink, type RedisTopology } from './redis-connection.js';
import { ApiError } from '../common/api-error.js';
import { redactor } from '../common/redaction.js';
import type { ClientApi } from '../providers/provider.js';
import { UpstreamStreamError } from '../apis/errors.js';
import { RedisHealth } from './redis-health.js';
import { MAX_ERROR_BODY, UpstreamHttpError, UpstreamProtocolError } from '../apis/errors.js';

/**
 * What replicas share through one Redis (`--redis`): the answer window, and a
 * coordinator that makes one upstream call per key across the fleet and shares
 * the breaker. Both never hold a request up: every operation is bounded, and
 * while Redis is away each replica acts alone (said once in the log, shown in
 * /health), then shares again once it is back.
 */
export class SharedState {
  readonly windowStore?: Keyv;
  readonly coordinator?: RedisCoordinator;
  /** The commands connection, for other shared counts (rate limits, spend): fails at once while Redis is known down. */
  readonly redis?: { sendCommand(args: string[]): Promise<unknown> };
  /** `single`, `cluster` or `sentinel`: what `--redis` turned out to be. */
  readonly topology?: RedisTopology;
  /** Whether coordination through Redis works, and why not (see `RedisHealth`). */
  readonly health?: RedisHealth;
  private readonly link?: RedisLink;
  private readonly connecting?: Promise<unknown>;

  constructor(config: GatewayConfig, link: RedisLink | null, logger: ContextLog) {
    if (!config.redisUrl || !link) return;
    this.link = link;
    this.topology = link.topology;
    this.connecting = link.connecting;
    this.health = new RedisHealth({
      client: link.commands,
      prefix: config.redisPrefix,
      periodMs: Math.max(config.redisTimeoutMs, 50),
      connected: this.connected(),
      log: { warn: (line) => logger.warn(line), info: (line) => logger.log(line) },
    });
    link.onError((error) => this.health?.connectionFailed(error));
    this.redis = this.health.gate(link.commands);
    // Every entry under `<prefix>:window::` (so `--redis-prefix` isolates answers too): Keyv hands its namespace to
    // the Redis adapter, which prefixes the keys; Keyv's own key prefix would repeat it. Its errors must reach the
    // window (a failure is a miss and an outage), not turn into "not found".
    const KeyvRedis = redisModuleOfLinks().default;
    this.windowStore = new Keyv({
      store: new KeyvRedis(link.store, { throwOnErrors: true, throwOnConnectError: true }),
      namespace: `${config.redisPrefix}:window`,
      useKeyPrefix: false,
    });
    this.coordinator = new RedisCoordinator({
      client: this.redis,
      subscriber: this.health.gateSubscriber(link.subscriber),
      prefix: config.redisPrefix,
      opTimeoutMs: Math.max(config.redisTimeoutMs, 50),
      errorCodec: GATEWAY_ERROR_CODEC,
      onState: (state, error) => this.health?.report('coordination', state, error),
    });
    this.health.start();
  }

  /**
   * Listening starts once Redis is connected (or a second has passed): the
   * client queues nothing while disconnected, so the first requests would
   * otherwise miss the shared state and report an outage that is not one.
   */
  async start(): Promise<void> {
    await this.connected();
  }

  /** Resolves once Redis is connected, or a second has passed (for whoever needs Redis during start-up). */
  connected(): Promise<void> {
    return Promise.race([this.connecting, sleep(1_000)]).then(() => undefined);
  }

  /** Before the window's store closes the shared client: the calls still finishing are not an outage to report. */
  stopSharing(): void {
    this.health?.close();
    this.coordinator?.close();
  }

  async close(): Promise<void> {
    await this.link?.close();
  }
}

/**
 * The gateway's own errors across replicas (Redis) and workers (their
 * primary): a replica that followed another's call answers its callers exactly
 * as the leader answered its own (the provider's status, bytes and
 * `Retry-After`, or the gateway's error; the orchestrator's own errors cross in
 * the package's codec). What crosses is bounded (an error body as the upstream
 * client keeps it, short strings) and leaves no known key in Redis: the body is
 * redacted as every client would get it.
 */
export const GATEWAY_ERROR_CODEC: ErrorCodec = {
  encode(error) {
    if (error instanceof UpstreamHttpError) {
      const body = redactor.jsonBytes(error.body.subarray(0, MAX_ERROR_BODY));
      return {
        t: 'upstream',
        status: error.status,
        body: body.toString('base64'),
        contentType: error.contentType,
        api: error.api,
        retryAfter: error.retryAfter,
      };
    }
    if (error instanceof ApiError) {
      return {
        t: 'api',
        status: error.status,
        message: error.message,
        code: error.code,
        param: error.param,
        type: error.type,
        retryAfter: error.retryAfter,
        retryable: error.retryable,
      };
    }
    if (error instanceof UpstreamStreamError)
      return { t: 'stream', message: error.message, delivered: error.delivered };
    if (error instanceof UpstreamProtocolError) return { t: 'protocol', message: error.message };
    return DEFAULT_ERROR_CODEC.encode(error);
  },
  decode(data) {
    switch (data.t) {
      case 'upstream':
        return new UpstreamHttpError(
          statusOf(data.status, 502),
          Buffer.from(String(data.body), 'base64').subarray(0, MAX_ERROR_BODY),
          shortText(data.contentType),
          data.api as ClientApi,
          shortText(data.retryAfter),
        );
      case 'api': {
        const error = new ApiError(
          statusOf(data.status, 500),
          String(data.message).slice(0, 1_000),
          shortText(data.code) ?? null,
          shortText(data.param) ?? null,
          shortText(data.type),
        );
        error.retryAfter = shortText(data.retryAfter);
        if (data.retryable === true) error.retryable = true;
        return error;
      }
      case 'stream':
        return new UpstreamStreamError(String(data.message).slice(0, 1_000), Boolean(data.delivered));
      case 'protocol':
        return new UpstreamProtocolError(String(data.message).slice(0, 1_000));
      default:
        return DEFAULT_ERROR_CODEC.decode(data);
    }
  },
};

/** An HTTP error status from the wire, else `fallback`. */
function statusOf(value: unknown, fallback: number): number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 400 && value <= 599 ? value : fallback;
}

/** A header value or a code from the wire: a short string, or undefined. */
function shortText(value: unknown): string | undefined {
  return typeof value === 'string' ? value.slice(0, 200) : undefined;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
