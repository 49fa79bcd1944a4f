import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { rmSync } from 'node:fs';
import { ensureBuilt, startGatewayProcess, type AppProcess } from '../support/gateway-process.js';
import {
  makeTlsFiles,
  redisServerMissing,
  startOwnedRedis,
  startRedisCluster,
  type OwnedRedis,
  type OwnedRedisCluster,
  type TlsFiles,
} from '../support/redis-server.js';
import { expectExactRateLimit, expectExactSpendCap, expectOneCallPerHerd, startFleet, type Fleet } from './fleet.js';

/**
 * Four replicas sharing a Redis (one node, or a cluster) that speaks TLS only and wants a client
 * certificate, all signed by a CA made here with openssl (nothing from the
 * system's trust store): with --redis-ca, --redis-cert and --redis-key a herd
 * makes one upstream call and a rate limit and a spend cap are exact; a
 * certificate refused either way stops the start with the reason.
 */
describe('replicas sharing a Redis over TLS', () => {
  let tls: TlsFiles;
  let redis: OwnedRedis | undefined;
  let cluster: OwnedRedisCluster | undefined;
  let fleet: Fleet | undefined;
  let gateway: AppProcess | undefined;

  beforeAll(async () => {
    const missing = redisServerMissing();
    if (missing) throw new Error(missing);
    await ensureBuilt();
    tls = await makeTlsFiles();
  }, 180_000);
  afterEach(async () => {
    await gateway?.stop();
    gateway = undefined;
    await fleet?.stop();
    fleet = undefined;
    await redis?.close();
    redis = undefined;
    await cluster?.close();
    cluster = undefined;
  });
  afterAll(() => rmSync(tls.dir, { recursive: true, force: true }));

  it('rediss:// with --redis-ca, --redis-cert, --redis-key: a herd over 4 replicas makes 1 call; a rate limit and a spend cap are exact', async () => {
    redis = await startOwnedRedis({ tls });
    expect(redis.url).toMatch(/^rediss:/);
    fleet = await startFleet([
      '--redis',
      redis.url,
      '--redis-ca',
      tls.ca,
      '--redis-cert',
      tls.clientCert,
      '--redis-key',
      tls.clientKey,
    ]);
    await expectOneCallPerHerd(fleet, 'tls herd');
    await expectExactRateLimit(fleet);
    await expectExactSpendCap(fleet);
  }, 240_000);

  it('a Redis Cluster over TLS (tls-cluster yes), given one node and the same flags: a herd over 4 replicas makes 1 call; a spend cap is exact', async () => {
    cluster = await startRedisCluster({ masters: 3, tls });
    expect(cluster.url).toMatch(/^rediss:/);
    fleet = await startFleet([
      '--redis',
      cluster.nodes[1].url,
      '--redis-ca',
      tls.ca,
      '--redis-cert',
      tls.clientCert,
      '--redis-key',
      tls.clientKey,
    ]);
    await expectOneCallPerHerd(fleet, 'tls cluster herd');
    await expectExactSpendCap(fleet);
    for (const replica of fleet.replicas) expect(replica.output()).not.toMatch(/CROSSSLOT|MOVED/);
  }, 240_000);

  it('a client certificate missing, or a CA that did not sign the server: the gateway does not start, and says why naming the flags', async () => {
    redis = await startOwnedRedis({ tls });
    const attempts = [
      ['--redis-ca', tls.ca],
      ['--redis-ca', tls.clientCert, '--redis-cert', tls.clientCert, '--redis-key', tls.clientKey],
    ];
    for (const flags of attempts) {
      const failure = await startGatewayProcess([
        '--upstream',
        'http://127.0.0.1:9',
        '--redis',
        redis.url,
        ...flags,
      ]).then(
        (started) => {
          gateway = started;
          return 'started';
        },
        (error: Error) => error.message,
      );
      expect(failure).toMatch(
        /Redis refused the TLS connection \(.+\): check --redis-ca, --redis-cert and --redis-key/,
      );
      expect(failure).not.toContain('PRIVATE KEY');
    }
    // A Redis not reachable yet is no such error: the gateway starts (and acts alone until it is).
    gateway = await startGatewayProcess([
      '--upstream',
      'http://127.0.0.1:9',
      '--redis',
      'rediss://127.0.0.1:9',
      '--redis-ca',
      tls.ca,
    ]);
    expect(gateway.output()).not.toContain('refused the TLS connection');
  }, 120_000);
});
