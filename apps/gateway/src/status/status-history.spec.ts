import { describe, expect, it } from '@jest/globals';
import { ErrorCauses } from './error-causes.js';
import { HourHistory } from './hour-history.js';
import { SpendTable } from './spend-table.js';

describe('HourHistory', () => {
  it('percentiles of the hour within a bucket (25%) of the truth; outcomes and errors counted', () => {
    const history = new HourHistory();
    const now = Date.UTC(2026, 0, 1, 12, 0, 0);
    for (let i = 1; i <= 1000; i++) history.record(i % 10 === 0 ? 'joined' : 'miss', i % 100 === 0 ? 503 : 200, i, now);
    const { hour, minutes } = history.summary(now);
    expect(hour.requests).toBe(1000);
    expect(hour.errors).toBe(10);
    expect(hour.outcomes).toMatchObject({ miss: 900, joined: 100 });
    expect(minutes).toHaveLength(1);
    for (const [p, truth] of [
      ['p50', 500],
      ['p95', 950],
      ['p99', 990],
    ] as const) {
      expect(hour.latencyMs![p]).toBeGreaterThanOrEqual(truth);
      expect(hour.latencyMs![p]).toBeLessThanOrEqual(truth * 1.25);
    }
  });

  it('keeps 60 minutes, whatever the traffic', () => {
    const history = new HourHistory();
    const start = Date.UTC(2026, 0, 1, 0, 0, 0);
    for (let minute = 0; minute < 180; minute++)
      for (let i = 0; i < 5; i++) history.record('miss', 200, 10, start + minute * 60_000);
    const { minutes, hour } = history.summary(start + 179 * 60_000);
    expect(minutes).toHaveLength(60);
    expect(hour.requests).toBe(300);
  });
});

describe('ErrorCauses', () => {
  it('a flood of refusals is one counted line; the cause stays beside it', () => {
    const causes = new ErrorCauses();
    causes.record({ at: 1, route: 'chat', status: 503, code: 'upstream_error', requestId: 'r0', fromUpstream: true });
    for (let i = 0; i < 500; i++)
      causes.record({
        at: 2 + i,
        route: 'chat',
        status: 503,
        code: 'circuit_open',
        requestId: `r${i + 1}`,
        fromUpstream: false,
      });
    const list = causes.list();
    expect(list.map((c) => [c.cause, c.count])).toEqual([
      ['circuit_open', 500],
      ['upstream_error', 1],
    ]);
    expect(list[0]).toMatchObject({ firstAt: 2, lastAt: 501, lastRequestId: 'r500' });
  });

  it('keeps the 20 most recent distinct causes', () => {
    const causes = new ErrorCauses();
    for (let i = 0; i < 30; i++)
      causes.record({ at: i, route: `r${i}`, status: 500, requestId: `${i}`, fromUpstream: true });
    expect(causes.list()).toHaveLength(20);
    expect(causes.list()[0].route).toBe('r29');
  });
});

describe('SpendTable', () => {
  it('bounded: names past the cap add up under "other"', () => {
    const table = new SpendTable(2);
    for (const name of ['a', 'b', 'c', 'd']) table.record(name, { spentDollars: 1, saved: false });
    table.record('a', { savedDollars: 5, savedTokens: 10, saved: true });
    expect(table.top(10)).toEqual([
      expect.objectContaining({ name: 'a', requests: 2, spentDollars: 1, savedDollars: 5, savedCalls: 1 }),
      expect.objectContaining({ name: 'other', requests: 2, spentDollars: 2 }),
      expect.objectContaining({ name: 'b', requests: 1 }),
    ]);
  });
});
