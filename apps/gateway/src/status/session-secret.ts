import { randomBytes } from 'node:crypto';
import type { GatewayConfig } from '../config/gateway-config.js';
import type { ContextLog } from '../common/context-log.js';
import type { SharedState } from '../shared-state/shared-state.js';

/**
 * Set by the primary of `--workers` for its workers: one random secret for the whole port, made before forking, so
 * that a session signed by one worker is accepted by the next. Not a flag: `--session-secret` is the operator's.
 */
export const WORKER_SESSION_SECRET_ENV = 'NPO_WORKER_SESSION_SECRET';

/**
 * The secret status page sessions are signed with. Never derived from the keys file (a file of `sha256:` digests must
 * not be enough to forge a session): `--session-secret` when given, else a random one per process (per port under
 * `--workers`), which with `--redis` becomes the fleet's (the first replica's, stored with SET NX), so that any replica
 * accepts a session another one issued. Without Redis at start, the process's own (said once in the log).
 */
export class SessionSecret {
  private secret: Buffer;

  constructor(
    private readonly config: GatewayConfig,
    private readonly shared: SharedState,
    private readonly logger: ContextLog,
  ) {
    const handed = process.env[WORKER_SESSION_SECRET_ENV];
    this.secret =
      config.sessionSecret !== undefined
        ? Buffer.from(config.sessionSecret)
        : handed && handed.length >= 64
          ? Buffer.from(handed, 'hex')
          : randomBytes(32);
  }

  get current(): Buffer {
    return this.secret;
  }

  /** With --redis, takes the fleet's secret (or makes this one the fleet's). */
  async start(): Promise<void> {
    const redis = this.shared.redis;
    if (this.config.sessionSecret !== undefined || !redis) return;
    await this.shared.connected();
    const key = `${this.config.redisPrefix}:status-session-secret`;
    const bound = Math.max(this.config.redisTimeoutMs, 1_000);
    try {
      const stored = await withTimeout(
        redis.sendCommand(['SET', key, this.secret.toString('hex'), 'NX']).then(() => redis.sendCommand(['GET', key])),
        bound,
      );
      if (typeof stored !== 'string' || !/^[0-9a-f]{64,}$/.test(stored))
        throw new Error('the stored secret is not one this gateway writes');
      this.secret = Buffer.from(stored, 'hex');
    } catch (error) {
      this.logger.warn(
        `status page sessions: the fleet's secret could not be read from Redis (${(error as Error).message}); this process signs its own, so a session is accepted only by the replica that issued it`,
      );
    }
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`Redis did not answer within ${ms} ms`)), ms);
    promise.then(
      (value) => (clearTimeout(timer), resolve(value)),
      (error: unknown) => (clearTimeout(timer), reject(error)),
    );
  });
}
