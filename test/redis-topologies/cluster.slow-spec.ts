import { afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { uniquePrompt } from '../support/gateway-harness.js';
import { ensureBuilt } from '../support/gateway-process.js';
import { redisCli, redisServerMissing, startRedisCluster, type OwnedRedisCluster } from '../support/redis-server.js';
import {
  ask,
  coordinated,
  expectCoordinatedAgain,
  expectExactRateLimit,
  expectExactSpendCap,
  expectOneCallPerHerd,
  startFleet,
  type Fleet,
} from './fleet.js';

/**
 * Four replicas given one node of a real Redis Cluster (3 masters) this suite
 * owns: they find the cluster by themselves, a herd makes one upstream call, a
 * rate limit and a spend cap are exact across them, and a master killed in
 * the middle of a herd costs no answer; once its replica took over, the fleet
 * coordinates again.
 */
describe('replicas sharing a Redis Cluster', () => {
  let cluster: OwnedRedisCluster | undefined;
  let fleet: Fleet | undefined;

  beforeAll(async () => {
    const missing = redisServerMissing();
    if (missing) throw new Error(missing);
    await ensureBuilt();
  }, 180_000);
  afterEach(async () => {
    await fleet?.stop();
    fleet = undefined;
    await cluster?.close();
    cluster = undefined;
  });

  it('given the third node: a herd over 4 replicas makes 1 call; a rate limit and a spend cap across two scopes are exact', async () => {
    cluster = await startRedisCluster({ masters: 3 });
    // Any node will do: not the first, which `--cluster create` was run on.
    fleet = await startFleet(['--redis', cluster.nodes[2].url]);
    await expectOneCallPerHerd(fleet, 'cluster herd');
    await expectOneCallPerHerd(fleet, 'cluster herd again');
    await expectExactRateLimit(fleet);
    await expectExactSpendCap(fleet);
    // Nothing was refused by the cluster on the way.
    for (const replica of fleet.replicas) expect(replica.output()).not.toMatch(/CROSSSLOT|MOVED|unknown command/);
  }, 240_000);

  it("the master holding a herd's lease killed mid-call: every caller is answered, and after the failover a herd makes 1 call again", async () => {
    cluster = await startRedisCluster({ masters: 3, replicasPerMaster: 1 });
    fleet = await startFleet(['--redis', cluster.url], { mock: { latencyMs: 2_000 } });
    const prompt = uniquePrompt('cluster failover');
    const herd = Promise.all(Array.from({ length: 20 }, (_, i) => ask(fleet!.urls[i % 4], prompt)));
    // The leader has its lease and the call is on its way: kill the master that holds the lease.
    let leaseHolder: number | undefined;
    for (const deadline = Date.now() + 10_000; leaseHolder === undefined;) {
      for (const node of cluster.nodes.filter((n) => n.pid !== undefined)) {
        const keys = await redisCli(node.port, ['keys', 'npo:lease:*']).catch(() => '');
        if (keys.trim() && /role:master/.test(await redisCli(node.port, ['info', 'replication'])))
          leaseHolder = node.port;
      }
      if (Date.now() > deadline) throw new Error('no lease was taken');
    }
    const victim = cluster.nodes.find((n) => n.port === leaseHolder)!;
    await victim.kill();
    const answers = await herd;
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    await cluster.healthy();
    await coordinated(fleet.replicas, 30_000);
    // Herds land on slots of every master, the promoted one included.
    await expectCoordinatedAgain(fleet, 'after failover', 4);
  }, 240_000);
});
