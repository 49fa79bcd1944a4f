import { describe, expect, it } from '@jest/globals';
import { FailureAttribution } from './failure-attribution.js';

function clocked() {
  let now = 1_000;
  const attribution = new FailureAttribution(() => now);
  return { attribution, tick: (ms = 1) => (now += ms) };
}

describe('FailureAttribution', () => {
  it('an outage: nobody succeeds once it starts, so every failure is the upstream\'s, from one tenant or many', () => {
    const { attribution, tick } = clocked();
    attribution.succeeded({ tenant: 'a', key: 'k1' });
    tick();
    for (const tenant of ['a', 'a', 'b', 'a', 'c']) {
      expect(attribution.isUpstreams({ tenant, key: `k-${Math.random()}` })).toBe(true);
      tick();
    }
  });

  it('a tenant whose own requests fail while another tenant is answered: its failures are its own', () => {
    const { attribution, tick } = clocked();
    expect(attribution.isUpstreams({ tenant: 'bad', key: 'b1' })).toBe(true); // no evidence yet
    tick();
    attribution.succeeded({ tenant: 'good', key: 'g1' });
    tick();
    for (let i = 2; i < 10; i++) {
      expect(attribution.isUpstreams({ tenant: 'bad', key: `b${i}` })).toBe(false);
      tick();
    }
    // The good tenant's own failure, right after its success elsewhere: the upstream's (no one else succeeded since).
    expect(attribution.isUpstreams({ tenant: 'good', key: 'g2' })).toBe(true);
  });

  it('a request that fails again while other requests of the same tenant are answered: the request\'s own', () => {
    const { attribution, tick } = clocked();
    expect(attribution.isUpstreams({ tenant: 't', key: 'poison' })).toBe(true);
    tick();
    attribution.succeeded({ tenant: 't', key: 'fine' });
    tick();
    expect(attribution.isUpstreams({ tenant: 't', key: 'poison' })).toBe(false);
    // A distinct request failing for the first time is still counted: it could be the upstream.
    expect(attribution.isUpstreams({ tenant: 't', key: 'other' })).toBe(true);
  });

  it('a tenant that recovers starts a new streak: an old success by others does not excuse a new outage', () => {
    const { attribution, tick } = clocked();
    attribution.isUpstreams({ tenant: 'bad' });
    tick();
    attribution.succeeded({ tenant: 'good' });
    tick();
    expect(attribution.isUpstreams({ tenant: 'bad' })).toBe(false);
    attribution.succeeded({ tenant: 'bad' });
    tick(10_000);
    // The outage begins: "good" succeeded long before this streak of "bad" began.
    expect(attribution.isUpstreams({ tenant: 'bad' })).toBe(true);
  });

  it('calls without a source are always the upstream\'s', () => {
    const { attribution } = clocked();
    attribution.succeeded({ tenant: 'x', key: 'y' });
    expect(attribution.isUpstreams(undefined)).toBe(true);
    expect(attribution.isUpstreams({})).toBe(true);
  });

  it('keeps memory bounded: old streaks are forgotten past the bound', () => {
    let now = 0;
    const attribution = new FailureAttribution(() => now, 100);
    for (let i = 0; i < 10_000; i++) {
      attribution.isUpstreams({ tenant: `t${i}`, key: `k${i}` });
      now++;
    }
    // Nothing to assert on the inside but that it answers; the maps are capped at 100 entries each.
    expect(attribution.isUpstreams({ tenant: 't0' })).toBe(true);
  });
});
