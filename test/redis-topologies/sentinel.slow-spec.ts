import { afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { uniquePrompt } from '../support/gateway-harness.js';
import { ensureBuilt } from '../support/gateway-process.js';
import { redisServerMissing, startSentinelSet, type OwnedSentinelSet } from '../support/redis-server.js';
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
 * Four replicas given a Sentinel (`redis+sentinel://host:port/name`) watching
 * a master and its replica, all owned by this suite: a herd makes one
 * upstream call, a rate limit and a spend cap are exact, and the master killed
 * in the middle of a herd costs no answer; once Sentinel promoted the replica,
 * the fleet follows it and coordinates again.
 */
describe('replicas sharing Redis through Sentinel', () => {
  let set: OwnedSentinelSet | undefined;
  let fleet: Fleet | undefined;

  beforeAll(async () => {
    const missing = redisServerMissing();
    if (missing) throw new Error(missing);
    await ensureBuilt();
  }, 180_000);
  afterEach(async () => {
    await fleet?.stop();
    fleet = undefined;
    await set?.close();
    set = undefined;
  });

  it('a herd over 4 replicas makes 1 call; a rate limit and a spend cap are exact', async () => {
    set = await startSentinelSet();
    fleet = await startFleet(['--redis', set.url]);
    await expectOneCallPerHerd(fleet, 'sentinel herd');
    await expectExactRateLimit(fleet);
    await expectExactSpendCap(fleet);
    for (const replica of fleet.replicas) expect(replica.output()).not.toMatch(/unknown command|CROSSSLOT|MOVED/);
  }, 240_000);

  it('the master killed mid-herd: every caller is answered; after the failover the fleet follows the new master and a herd makes 1 call', async () => {
    set = await startSentinelSet();
    fleet = await startFleet(['--redis', set.url], { mock: { latencyMs: 2_000 } });
    const old = await set.master();
    const herd = Promise.all(
      Array.from({ length: 20 }, (_, i) => ask(fleet!.urls[i % 4], uniquePrompt('sentinel failover'))),
    );
    // The herd is in flight: its call has reached the provider (and takes 2 s there).
    await fleet.provider.waitFor((stats) => stats.total >= 1, 60_000);
    await old.kill();
    const answers = await herd;
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    const promoted = await set.failedOver(old);
    expect(promoted).not.toBe(old);
    await coordinated(fleet.replicas, 60_000);
    await expectCoordinatedAgain(fleet, 'after sentinel failover');
  }, 240_000);
});
