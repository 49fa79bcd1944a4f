import { describe, expect, it } from '@jest/globals';
import { FailureAttribution } from './failure-attribution.js';

function clocked() {
  let now = 1_000;
  const attribution = new FailureAttribution({ now: () => now });
  return { attribution, tick: (ms = 1) => (now += ms) };
}

describe('FailureAttribution', () => {
  it("an outage: nobody succeeds once it starts, so every failure is the upstream's, from one tenant or many", () => {
    const { attribution, tick } = clocked();
    for (const tenant of ['c', 'b', 'a']) attribution.succeeded({ tenant, key: `k-${tenant}` });
    tick();
    for (const tenant of ['a', 'a', 'b', 'a', 'c']) {
      expect(attribution.attribute({ tenant, key: `k-${Math.random()}` })).toBe('upstream');
      tick();
    }
  });

  it('a tenant whose own requests fail while another tenant is answered: its failures are its own', () => {
    const { attribution, tick } = clocked();
    expect(attribution.attribute({ tenant: 'bad', key: 'b1' })).toBe('upstream'); // no evidence yet
    tick();
    attribution.succeeded({ tenant: 'good', key: 'g1' });
    tick();
    for (let i = 2; i < 10; i++) {
      expect(attribution.attribute({ tenant: 'bad', key: `b${i}` })).toBe('caller');
      tick();
    }
    // The good tenant's own failure, right after its success elsewhere: the upstream's (no one else succeeded since).
    expect(attribution.attribute({ tenant: 'good', key: 'g2' })).toBe('upstream');
  });

  it("a request that fails again while other requests of the same tenant are answered: the request's own", () => {
    const { attribution, tick } = clocked();
    expect(attribution.attribute({ tenant: 't', key: 'poison' })).toBe('upstream');
    tick();
    attribution.succeeded({ tenant: 't', key: 'fine' });
    tick();
    expect(attribution.attribute({ tenant: 't', key: 'poison' })).toBe('caller');
    // A distinct request failing for the first time is still counted: it could be the upstream.
    expect(attribution.attribute({ tenant: 't', key: 'other' })).toBe('upstream');
  });

  it('a tenant that recovers starts a new streak: an old success by others does not excuse a new outage', () => {
    const { attribution, tick } = clocked();
    attribution.attribute({ tenant: 'bad' });
    tick();
    attribution.succeeded({ tenant: 'good' });
    tick();
    expect(attribution.attribute({ tenant: 'bad' })).toBe('caller');
    attribution.succeeded({ tenant: 'bad' });
    tick(10_000);
    // The outage begins: "good" succeeded long before this streak of "bad" began.
    expect(attribution.attribute({ tenant: 'bad' })).toBe('upstream');
  });

  it("calls without a source are always the upstream's", () => {
    const { attribution } = clocked();
    attribution.succeeded({ tenant: 'x', key: 'y' });
    expect(attribution.attribute(undefined)).toBe('upstream');
    expect(attribution.attribute({})).toBe('upstream');
  });

  it('keeps memory bounded: old streaks are forgotten past the bound', () => {
    let now = 0;
    const attribution = new FailureAttribution({ now: () => now, maxTracked: 100 });
    for (let i = 0; i < 10_000; i++) {
      attribution.attribute({ tenant: `t${i}`, key: `k${i}` });
      now++;
    }
    // Nothing to assert on the inside but that it answers; the maps are capped at 100 entries each.
    expect(attribution.attribute({ tenant: 't0' })).toBe('upstream');
  });

  describe('callers never answered (a caller posing as a new tenant on every request)', () => {
    it("while others are answered, a swarm of new callers only ever fails as newcomers: none of it is the upstream's", () => {
      const { attribution, tick } = clocked();
      attribution.succeeded({ tenant: 'victim', key: 'v0' });
      for (let i = 0; i < 1_000; i++) {
        tick();
        expect(attribution.attribute({ tenant: `swarm-${i}`, key: `poison-${i}` })).toBe('newcomer');
        // The victim is still answered now and then, which keeps proving the upstream works.
        if (i % 50 === 0) attribution.succeeded({ tenant: 'victim', key: `v${i}` });
      }
    });

    it('right after start nobody has been answered: brand-new callers failing are an outage', () => {
      const { attribution, tick } = clocked();
      for (let i = 0; i < 5; i++) {
        expect(attribution.attribute({ tenant: `new-${i}`, key: `k${i}` })).toBe('upstream');
        tick();
      }
    });

    it('once nobody has been answered for the grace period, new callers failing count again', () => {
      let now = 0;
      const attribution = new FailureAttribution({ now: () => now, newcomerGraceMs: 10_000 });
      attribution.succeeded({ tenant: 'old', key: 'k' });
      now = 9_999;
      expect(attribution.attribute({ tenant: 'new-1' })).toBe('newcomer');
      now = 10_000;
      expect(attribution.attribute({ tenant: 'new-2' })).toBe('upstream');
      // The first one too, now: its standing did not change, the evidence that the upstream works went stale.
      expect(attribution.attribute({ tenant: 'new-1' })).toBe('upstream');
    });

    it("one answer gives a caller standing: its failures are then judged like anyone's", () => {
      const { attribution, tick } = clocked();
      attribution.succeeded({ tenant: 'old', key: 'k1' });
      tick();
      expect(attribution.attribute({ tenant: 'late', key: 'k2' })).toBe('newcomer');
      attribution.succeeded({ tenant: 'late', key: 'k3' });
      tick();
      // Nobody else has been answered since its run of failures began (an outage may have started).
      expect(attribution.attribute({ tenant: 'late', key: 'k4' })).toBe('upstream');
    });

    it('standing is bounded: the callers answered longest ago are forgotten first', () => {
      let now = 1_000;
      const bounded = new FailureAttribution({ now: () => now, maxTracked: 3 });
      for (const tenant of ['a', 'b', 'c', 'd']) bounded.succeeded({ tenant });
      now++;
      expect(bounded.attribute({ tenant: 'a' })).toBe('newcomer');
      expect(bounded.attribute({ tenant: 'd' })).toBe('upstream');
    });
  });
});
