import { LRUCache } from 'lru-cache';

/** Failed sign-ins one client address may make per minute; past them its wrong keys get 429 until the minute is over. */
export const FAILURES_PER_ADDRESS = 10;
/** Failed sign-ins per minute from all addresses together: many addresses trying one key each are bounded too. */
export const FAILURES_PER_MINUTE = 30;
const WINDOW_MS = 60_000;
/** Addresses remembered at once (the least recent are forgotten: memory stays bounded under a spray of addresses). */
const MAX_ADDRESSES = 10_000;

interface Window {
  start: number;
  failures: number;
}

/**
 * The status page's sign-in throttle. It judges wrong keys only: the right key
 * always signs in (an attacker sharing an address, or a reverse proxy's, with
 * the admins must not be able to lock them out). A wrong key from an address
 * past its failures, or from anywhere while the whole gateway is past its
 * bound, is answered 429 with the seconds to wait. Fixed one-minute windows;
 * the clock is injected so that tests need not wait.
 */
export class SignInThrottle {
  private readonly addresses = new LRUCache<string, Window>({ max: MAX_ADDRESSES });
  private global: Window;

  constructor(
    private readonly now: () => number = Date.now,
    private readonly limits = { perAddress: FAILURES_PER_ADDRESS, perMinute: FAILURES_PER_MINUTE },
  ) {
    this.global = { start: now(), failures: 0 };
  }

  /**
   * A wrong key from `address`: the seconds it must wait (then answered 429, not counted again), or undefined
   * (answered 401, and counted).
   */
  failed(address: string): number | undefined {
    const now = this.now();
    if (now - this.global.start >= WINDOW_MS) this.global = { start: now, failures: 0 };
    let own = this.addresses.get(address);
    if (!own || now - own.start >= WINDOW_MS) own = { start: now, failures: 0 };
    const wait = (window: Window) => Math.max(1, Math.ceil((window.start + WINDOW_MS - now) / 1000));
    if (own.failures >= this.limits.perAddress) return wait(own);
    if (this.global.failures >= this.limits.perMinute) return wait(this.global);
    own.failures++;
    this.global.failures++;
    this.addresses.set(address, own);
    return undefined;
  }
}
