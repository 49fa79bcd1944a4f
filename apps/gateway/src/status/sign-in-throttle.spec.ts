import { describe, expect, it } from '@jest/globals';
import { SignInThrottle } from './sign-in-throttle.js';

describe('SignInThrottle', () => {
  it('slows one address after its failures, for the rest of its minute only', () => {
    let now = 1_000_000;
    const throttle = new SignInThrottle(() => now, { perAddress: 3, perMinute: 100 });
    for (let i = 0; i < 3; i++) expect(throttle.failed('10.0.0.1')).toBeUndefined();
    expect(throttle.failed('10.0.0.1')).toBe(60);
    now += 45_500;
    expect(throttle.failed('10.0.0.1')).toBe(15);
    // Another address is not held by this one's failures.
    expect(throttle.failed('10.0.0.2')).toBeUndefined();
    now += 15_000;
    expect(throttle.failed('10.0.0.1')).toBeUndefined();
  });

  it('bounds failures from many addresses, one try each', () => {
    let now = 0;
    const throttle = new SignInThrottle(() => now, { perAddress: 10, perMinute: 30 });
    const verdicts = Array.from({ length: 40 }, (_, i) => throttle.failed(`10.0.1.${i}`));
    expect(verdicts.filter((v) => v === undefined)).toHaveLength(30);
    expect(verdicts.slice(30)).toEqual(Array(10).fill(60));
    now += 60_000;
    expect(throttle.failed('10.0.2.1')).toBeUndefined();
  });

  it('keeps at most 10,000 addresses in memory', () => {
    const throttle = new SignInThrottle(() => 0, { perAddress: 1, perMinute: Number.MAX_SAFE_INTEGER });
    for (let i = 0; i < 20_000; i++) throttle.failed(`a${i}`);
    expect((throttle as unknown as { addresses: { size: number } }).addresses.size).toBe(10_000);
  });
});
