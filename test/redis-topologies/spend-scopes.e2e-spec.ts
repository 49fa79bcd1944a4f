import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createClient } from '@keyv/redis';
import { SpendLedger, type ScopedCap } from '../../apps/gateway/src/budgets/spend-ledger.js';
import { periodKey } from '../../apps/gateway/src/budgets/spend-periods.js';
import { redisServerMissing, startOwnedRedis, type OwnedRedis } from '../support/redis-server.js';

/**
 * The spend ledger as it runs against a Redis Cluster (`slotPerScope`), on a
 * Redis this suite owns: each scope's keys carry the scope as hash tag, a
 * reservation across scopes is one script per scope, and a scope that refuses
 * makes the others release what they held.
 */
describe('spend per scope, one slot each', () => {
  let redis: OwnedRedis;
  let client: ReturnType<typeof createClient>;
  const now = Date.UTC(2026, 10, 30, 12);
  const day = periodKey('day', now);

  beforeAll(async () => {
    const missing = redisServerMissing();
    if (missing) throw new Error(missing);
    redis = await startOwnedRedis();
    client = createClient({ url: redis.url });
    await client.connect();
  });
  afterAll(async () => {
    await client?.quit();
    await redis?.close();
  });

  const ledger = (prefix: string) => new SpendLedger({ redis: client, slotPerScope: true, prefix, now: () => now });

  it("holds against every scope under tagged keys, and settles each scope's totals", async () => {
    const spend = ledger('tagged');
    const caps: ScopedCap[] = [
      { scope: 'tenant', cap: { usd: 10, period: 'day' } },
      { scope: '*', cap: { usd: 100, period: 'month' } },
    ];
    const reserved = await spend.reserve(caps, 4e9, 60_000);
    if (!('hold' in reserved)) throw new Error('refused');
    expect(await client.hLen(`tagged:spend:{s:tenant}:held:${day}`)).toBe(1);
    expect(await client.hLen(`tagged:spend:{s:*}:held:${periodKey('month', now)}`)).toBe(1);
    await spend.settle(reserved.hold, 'tenant', 3e9);
    expect(await client.get(`tagged:spend:{s:tenant}:spent:${day}`)).toBe('3000000000');
    expect(await client.get(`tagged:spend:{s:*}:spent:${day}`)).toBe('3000000000');
    expect(await client.hLen(`tagged:spend:{s:tenant}:held:${day}`)).toBe(0);
    expect(await client.hLen(`tagged:spend:{s:*}:held:${periodKey('month', now)}`)).toBe(0);
  });

  it('a scope that refuses: the others release what they held, and the refusal names the cap', async () => {
    const spend = ledger('refused');
    await client.set(`refused:spend:{s:tenant}:spent:${day}`, String(10e9));
    const caps: ScopedCap[] = [
      { scope: '*', cap: { usd: 100, period: 'day' } },
      { scope: 'tenant', cap: { usd: 10, period: 'day' } },
    ];
    expect(await spend.reserve(caps, 1e9, 60_000)).toEqual({ refused: { index: 1, spentNano: 10e9, heldNano: 0 } });
    expect(await client.hLen(`refused:spend:{s:*}:held:${day}`)).toBe(0);
  });
});
