import { afterEach, beforeEach, describe, expect, it, jest } from '@jest/globals';
import { CircuitOpenError, ClientClosedError, UpstreamTimeoutError } from '../errors.js';
import type { BreakerCoordinator, SharedBreakerState } from '../cluster/coordination.js';
import { CircuitBreaker, type CircuitBreakerOptions } from './circuit-breaker.js';
import { isUpstreamFailure } from './failure-classifier.js';

const OPEN_MS = 10_000;

function httpError(status: number): Error {
  return Object.assign(new Error(`HTTP ${status}`), { status });
}

function codeError(code: string): Error {
  return Object.assign(new Error(code), { code });
}

/** What undici's fetch throws when the socket drops: the code is on `cause`. */
function undiciSocketError(): Error {
  return new TypeError('fetch failed', {
    cause: Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }),
  });
}

/** A promise the test settles by hand. */
function deferred<T = unknown>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Error thrown by a synchronous call, or undefined. */
function thrownBy(fn: () => void): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('CircuitBreaker', () => {
  let breakers: CircuitBreaker[] = [];

  function makeBreaker(overrides: Partial<CircuitBreakerOptions> = {}): CircuitBreaker {
    const breaker = new CircuitBreaker('upstream', {
      failureThreshold: 5,
      openMs: OPEN_MS,
      maxOpenMultiplier: 4,
      probeIntervalMs: 500,
      probeTimeoutMs: 2_000,
      unansweredMs: 10_000,
      isFailure: isUpstreamFailure,
      ...overrides,
    });
    breakers.push(breaker);
    return breaker;
  }

  async function fail(breaker: CircuitBreaker, error: unknown = httpError(500)): Promise<unknown> {
    return breaker
      .execute(() => Promise.reject(error))
      .then(
        () => {
          throw new Error('expected the action to fail');
        },
        (caught: unknown) => caught,
      );
  }

  async function succeed(breaker: CircuitBreaker): Promise<void> {
    await breaker.execute(() => Promise.resolve('ok'));
  }

  /**
   * Five failures. With a health probe the opening waits for its verdict (a hung probe: until probeTimeoutMs);
   * the probe's calls are then forgotten, so that a test counts those made while open.
   */
  async function openIt(breaker: CircuitBreaker, healthProbe?: { mockClear(): unknown }): Promise<void> {
    for (let i = 0; i < 4; i++) await fail(breaker);
    let settled = false;
    const fifth = fail(breaker).finally(() => (settled = true));
    await jest.advanceTimersByTimeAsync(0);
    while (!settled) await jest.advanceTimersByTimeAsync(1);
    await fifth;
    expect(breaker.state).toBe('open');
    healthProbe?.mockClear();
  }

  beforeEach(() => {
    jest.useFakeTimers();
  });

  afterEach(() => {
    for (const breaker of breakers) breaker.shutdown();
    breakers = [];
    jest.useRealTimers();
  });

  describe('opening on consecutive failures', () => {
    it('stays closed after 4 failures and opens on the 5th', async () => {
      const breaker = makeBreaker();
      for (let i = 0; i < 4; i++) await fail(breaker);
      expect(breaker.state).toBe('closed');
      expect(breaker.snapshot().consecutiveFailures).toBe(4);
      expect(() => breaker.assertCallable()).not.toThrow();

      await fail(breaker);
      expect(breaker.state).toBe('open');
      expect(thrownBy(() => breaker.assertCallable())).toBeInstanceOf(CircuitOpenError);
    });

    it('a success in between resets the count', async () => {
      const breaker = makeBreaker();
      for (let i = 0; i < 4; i++) await fail(breaker);
      await succeed(breaker);
      expect(breaker.snapshot().consecutiveFailures).toBe(0);
      for (let i = 0; i < 4; i++) await fail(breaker);
      expect(breaker.state).toBe('closed');
      await fail(breaker);
      expect(breaker.state).toBe('open');
    });

    it('passes the action result and the failure through unchanged', async () => {
      const breaker = makeBreaker();
      await expect(breaker.execute(() => Promise.resolve(42))).resolves.toBe(42);
      const error = httpError(503);
      await expect(fail(breaker, error)).resolves.toBe(error);
    });
  });

  describe('while open', () => {
    it('assertCallable() throws CircuitOpenError with the seconds until the next probe', async () => {
      const breaker = makeBreaker();
      await openIt(breaker);
      const error = thrownBy(() => breaker.assertCallable());
      expect(error).toBeInstanceOf(CircuitOpenError);
      expect((error as CircuitOpenError).retryAfterSeconds).toBe(OPEN_MS / 1000);
      expect((error as CircuitOpenError).status).toBe(503);

      await jest.advanceTimersByTimeAsync(4_000);
      const later = thrownBy(() => breaker.assertCallable()) as CircuitOpenError;
      expect(later).toBeInstanceOf(CircuitOpenError);
      expect(later.retryAfterSeconds).toBe(6);
      expect(later.retryAfterSeconds).toBeGreaterThan(0);
    });

    it('execute() refuses without calling the action', async () => {
      const breaker = makeBreaker();
      await openIt(breaker);
      const action = jest.fn(() => Promise.resolve('called'));
      const refusal = await breaker.execute(action).catch((error: unknown) => error);
      expect(refusal).toBeInstanceOf(CircuitOpenError);
      expect((refusal as CircuitOpenError).retryAfterSeconds).toBeGreaterThan(0);
      expect(action).not.toHaveBeenCalled();
    });
  });

  describe('half-open', () => {
    it('half-opens after openMs and lets exactly one probe through', async () => {
      const breaker = makeBreaker();
      await openIt(breaker);

      await jest.advanceTimersByTimeAsync(OPEN_MS - 1);
      expect(breaker.state).toBe('open');
      expect(thrownBy(() => breaker.assertCallable())).toBeInstanceOf(CircuitOpenError);

      await jest.advanceTimersByTimeAsync(1);
      expect(breaker.state).toBe('half_open');
      expect(() => breaker.assertCallable()).not.toThrow();

      const probe = deferred<string>();
      const probeAction = jest.fn(() => probe.promise);
      const probeResult = breaker.execute(probeAction);
      expect(probeAction).toHaveBeenCalledTimes(1);

      // The probe is out: everything else is refused, without being called.
      expect(thrownBy(() => breaker.assertCallable())).toBeInstanceOf(CircuitOpenError);
      const second = jest.fn(() => Promise.resolve('second'));
      await expect(breaker.execute(second)).rejects.toBeInstanceOf(CircuitOpenError);
      expect(second).not.toHaveBeenCalled();

      probe.resolve('probe ok');
      await expect(probeResult).resolves.toBe('probe ok');
    });

    it('a successful probe closes the breaker and restores the first open period', async () => {
      const breaker = makeBreaker();
      await openIt(breaker);
      await jest.advanceTimersByTimeAsync(OPEN_MS);
      await fail(breaker); // failed probe: doubled
      expect(breaker.snapshot().openMs).toBe(2 * OPEN_MS);
      await jest.advanceTimersByTimeAsync(2 * OPEN_MS);
      expect(breaker.state).toBe('half_open');

      await succeed(breaker);
      expect(breaker.state).toBe('closed');
      expect(breaker.snapshot()).toMatchObject({ state: 'closed', consecutiveFailures: 0, openMs: OPEN_MS });
      expect(() => breaker.assertCallable()).not.toThrow();
      const action = jest.fn(() => Promise.resolve('through'));
      await expect(breaker.execute(action)).resolves.toBe('through');

      // Reopening starts again from the first period, not the doubled one.
      await openIt(breaker);
      expect(breaker.snapshot().openMs).toBe(OPEN_MS);
      await jest.advanceTimersByTimeAsync(OPEN_MS);
      expect(breaker.state).toBe('half_open');
    });

    it('a failed probe reopens with the open period doubled, capped at maxOpenMultiplier', async () => {
      const breaker = makeBreaker({ maxOpenMultiplier: 4 });
      await openIt(breaker);
      expect(breaker.snapshot().openMs).toBe(OPEN_MS);

      const expected = [2 * OPEN_MS, 4 * OPEN_MS, 4 * OPEN_MS, 4 * OPEN_MS];
      let period = OPEN_MS;
      for (const next of expected) {
        await jest.advanceTimersByTimeAsync(period);
        expect(breaker.state).toBe('half_open');
        await fail(breaker);
        expect(breaker.state).toBe('open');
        expect(breaker.snapshot().openMs).toBe(next);

        const refusal = thrownBy(() => breaker.assertCallable()) as CircuitOpenError;
        expect(refusal).toBeInstanceOf(CircuitOpenError);
        expect(refusal.retryAfterSeconds).toBe(next / 1000);

        // Still refusing just before the doubled period ends...
        await jest.advanceTimersByTimeAsync(next - 1);
        expect(breaker.state).toBe('open');
        expect(thrownBy(() => breaker.assertCallable())).toBeInstanceOf(CircuitOpenError);
        // ...and half-open right after it.
        await jest.advanceTimersByTimeAsync(1);
        expect(breaker.state).toBe('half_open');
        expect(() => breaker.assertCallable()).not.toThrow();
        period = 0;
      }
    });
  });

  describe('abandoned calls (the caller hung up)', () => {
    it('an abandoned half-open probe reopens for the same period: neither closed nor doubled', async () => {
      const breaker = makeBreaker();
      await openIt(breaker);
      await jest.advanceTimersByTimeAsync(OPEN_MS);
      expect(breaker.state).toBe('half_open');

      await fail(breaker, new ClientClosedError());
      expect(breaker.state).toBe('open');
      expect(breaker.snapshot().openMs).toBe(OPEN_MS);
      await jest.advanceTimersByTimeAsync(OPEN_MS - 1);
      expect(breaker.state).toBe('open');
      await jest.advanceTimersByTimeAsync(1);
      expect(breaker.state).toBe('half_open');
      await succeed(breaker);
      expect(breaker.state).toBe('closed');
    });

    it('an abandoned call neither counts as a failure nor resets the count', async () => {
      const breaker = makeBreaker();
      for (let i = 0; i < 4; i++) await fail(breaker);
      await fail(breaker, new ClientClosedError());
      expect(breaker.state).toBe('closed');
      expect(breaker.snapshot().consecutiveFailures).toBe(4);
      await fail(breaker);
      expect(breaker.state).toBe('open');
    });
  });

  describe('health probe', () => {
    it('closes the breaker within about one probeIntervalMs once the probe succeeds', async () => {
      let healthy = false;
      const healthProbe = jest.fn(async () => healthy);
      const breaker = makeBreaker({ openMs: 60_000, healthProbe, probeIntervalMs: 500, probeTimeoutMs: 200 });
      await openIt(breaker, healthProbe);

      // While the upstream is still down, the probe runs every interval and keeps it open.
      await jest.advanceTimersByTimeAsync(1_600);
      expect(healthProbe).toHaveBeenCalledTimes(3);
      expect(breaker.state).toBe('open');
      // Retry-After is the real remaining open time: the probe may close it sooner, but cannot promise to.
      expect((thrownBy(() => breaker.assertCallable()) as CircuitOpenError).retryAfterSeconds).toBe(59);

      healthy = true;
      await jest.advanceTimersByTimeAsync(500);
      expect(breaker.state).toBe('closed');
      expect(() => breaker.assertCallable()).not.toThrow();

      // Closed: the probe loop stops.
      const calls = healthProbe.mock.calls.length;
      await jest.advanceTimersByTimeAsync(5_000);
      expect(healthProbe).toHaveBeenCalledTimes(calls);
    });

    it('a probe that rejects keeps the breaker open', async () => {
      const healthProbe = jest.fn(async () => {
        throw codeError('ECONNREFUSED');
      });
      const breaker = makeBreaker({ openMs: 60_000, healthProbe, probeIntervalMs: 500 });
      await openIt(breaker, healthProbe);
      await jest.advanceTimersByTimeAsync(2_000);
      expect(healthProbe).toHaveBeenCalledTimes(4);
      expect(breaker.state).toBe('open');
    });

    it('a hanging probe is aborted after probeTimeoutMs, does not close the breaker, and probing goes on', async () => {
      const signals: AbortSignal[] = [];
      let hang = true;
      // Ignores its signal on purpose: a hung health route must not stall the probe loop.
      const healthProbe = jest.fn((signal: AbortSignal) => {
        signals.push(signal);
        return hang ? new Promise<unknown>(() => {}) : Promise.resolve(true);
      });
      const breaker = makeBreaker({ openMs: 60_000, healthProbe, probeIntervalMs: 500, probeTimeoutMs: 200 });
      await openIt(breaker, healthProbe);
      signals.length = 0;

      await jest.advanceTimersByTimeAsync(500);
      expect(healthProbe).toHaveBeenCalledTimes(1);
      expect(signals[0].aborted).toBe(false);
      await jest.advanceTimersByTimeAsync(199);
      expect(signals[0].aborted).toBe(false);
      await jest.advanceTimersByTimeAsync(1);
      expect(signals[0].aborted).toBe(true);
      expect(breaker.state).toBe('open');

      // The next probe is scheduled one interval after the timed-out one.
      hang = false;
      await jest.advanceTimersByTimeAsync(500);
      expect(healthProbe).toHaveBeenCalledTimes(2);
      expect(breaker.state).toBe('closed');
    });

    it('a probe that answers only after probeTimeoutMs does not close the breaker', async () => {
      const healthProbe = jest.fn(() => new Promise<unknown>((resolve) => setTimeout(() => resolve(true), 300)));
      const breaker = makeBreaker({ openMs: 60_000, healthProbe, probeIntervalMs: 500, probeTimeoutMs: 200 });
      await openIt(breaker, healthProbe);
      await jest.advanceTimersByTimeAsync(500 + 300);
      expect(healthProbe).toHaveBeenCalledTimes(1);
      expect(breaker.state).toBe('open');
    });
    it('while the probe sees the upstream down, the open period ends without a live half-open request, doubled', async () => {
      let healthy = false;
      const healthProbe = jest.fn(async () => healthy);
      const breaker = makeBreaker({ openMs: 2_000, healthProbe, probeIntervalMs: 500, maxOpenMultiplier: 4 });
      await openIt(breaker, healthProbe);
      await jest.advanceTimersByTimeAsync(2_000);
      // The half-open probe would have been a paid call into a known-dead upstream: it is skipped.
      expect(breaker.state).toBe('open');
      expect(() => breaker.assertCallable()).toThrow(CircuitOpenError);
      expect(breaker.snapshot().openMs).toBe(4_000);
      await jest.advanceTimersByTimeAsync(4_000);
      expect(breaker.state).toBe('open');
      expect(breaker.snapshot().openMs).toBe(8_000);

      healthy = true;
      await jest.advanceTimersByTimeAsync(500);
      expect(breaker.state).toBe('closed');
      expect(breaker.snapshot().openMs).toBe(2_000);
    });

    it('opened while the probe saw the upstream answering (a partial outage): no probing, the half-open request decides', async () => {
      const healthProbe = jest.fn(async () => true);
      const breaker = makeBreaker({ openMs: 4_000, healthProbe, probeIntervalMs: 500, unansweredMs: 10_000 });
      await jest.advanceTimersByTimeAsync(10_000);
      await openIt(breaker, healthProbe);
      await jest.advanceTimersByTimeAsync(3_999);
      // The probe cannot see this outage end: it is not asked, and does not close the breaker.
      expect(healthProbe).not.toHaveBeenCalled();
      expect(breaker.state).toBe('open');
      await jest.advanceTimersByTimeAsync(1);
      expect(breaker.state).toBe('half_open');
      await succeed(breaker);
      expect(breaker.state).toBe('closed');
    });
  });

  describe('what counts as a failure', () => {
    it('UpstreamTimeoutError counts', async () => {
      const breaker = makeBreaker();
      for (let i = 0; i < 4; i++) await fail(breaker, new UpstreamTimeoutError('total', 5_000));
      expect(breaker.snapshot().consecutiveFailures).toBe(4);
      await fail(breaker, new UpstreamTimeoutError('idle', 5_000));
      expect(breaker.state).toBe('open');
    });

    it.each([400, 401, 404, 422, 429, 501])(
      'a %i does not count (and is still rejected to the caller)',
      async (status) => {
        const breaker = makeBreaker({ failureThreshold: 1 });
        for (let i = 0; i < 10; i++) {
          const error = httpError(status);
          await expect(fail(breaker, error)).resolves.toBe(error);
        }
        expect(breaker.state).toBe('closed');
        expect(breaker.snapshot().consecutiveFailures).toBe(0);
      },
    );

    it('a 4xx reported through getStatus() (a Nest HttpException) does not count', async () => {
      const breaker = makeBreaker({ failureThreshold: 1 });
      await fail(breaker, Object.assign(new Error('bad request'), { getStatus: () => 400 }));
      expect(breaker.state).toBe('closed');
    });

    it.each<[string, () => unknown]>([
      ['a 500', () => httpError(500)],
      ['a 502', () => httpError(502)],
      ['a 503 (statusCode)', () => Object.assign(new Error('unavailable'), { statusCode: 503 })],
      ['ECONNREFUSED', () => codeError('ECONNREFUSED')],
      ['ECONNRESET', () => codeError('ECONNRESET')],
      ['undici UND_ERR_SOCKET in cause', undiciSocketError],
      [
        'ECONNREFUSED two causes deep',
        () => new Error('outer', { cause: new Error('mid', { cause: codeError('ECONNREFUSED') }) }),
      ],
    ])('%s counts', async (_name, makeError) => {
      const breaker = makeBreaker({ failureThreshold: 2 });
      await fail(breaker, makeError());
      expect(breaker.snapshot().consecutiveFailures).toBe(1);
      await fail(breaker, makeError());
      expect(breaker.state).toBe('open');
    });

    it('recordFailure() after a successful execute counts', async () => {
      const breaker = makeBreaker();
      for (let i = 0; i < 4; i++) {
        await succeed(breaker); // the stream's first chunk arrived...
        breaker.recordFailure(httpError(502)); // ...then it broke
      }
      // Each success resets the count, so interleaved they never reach 5.
      expect(breaker.state).toBe('closed');
      expect(breaker.snapshot().consecutiveFailures).toBe(1);
      for (let i = 0; i < 3; i++) breaker.recordFailure(codeError('ECONNRESET'));
      expect(breaker.state).toBe('closed');
      expect(breaker.snapshot().consecutiveFailures).toBe(4);
      breaker.recordFailure(new UpstreamTimeoutError('idle', 1_000));
      expect(breaker.state).toBe('open');
    });

    it('recordFailure() ignores what is not a failure', async () => {
      const breaker = makeBreaker({ failureThreshold: 1 });
      await succeed(breaker);
      breaker.recordFailure(httpError(400));
      breaker.recordFailure(httpError(429));
      expect(breaker.state).toBe('closed');
      expect(breaker.snapshot().consecutiveFailures).toBe(0);
    });
  });

  describe('failure-rate mode', () => {
    // Alternating results never make 5 consecutive failures; only the rate can open the breaker.
    async function alternate(breaker: CircuitBreaker, pairs: number): Promise<void> {
      for (let i = 0; i < pairs; i++) {
        await succeed(breaker);
        await fail(breaker);
      }
    }

    it('opens when the failure rate passes the threshold', async () => {
      const breaker = makeBreaker({
        failureThreshold: 5,
        failureRate: { thresholdPercent: 40, minimumCalls: 4, windowMs: 10_000 },
      });
      await succeed(breaker);
      await fail(breaker); // 1 of 2 fired, but fewer than minimumCalls
      expect(breaker.state).toBe('closed');
      await succeed(breaker);
      await fail(breaker); // 2 of 4 = 50% > 40%
      expect(breaker.state).toBe('open');
    });

    it('judges the rate over the whole window, across a doubled open period', async () => {
      const breaker = makeBreaker({
        failureThreshold: 5,
        openMs: 1_000,
        failureRate: { thresholdPercent: 40, minimumCalls: 4, windowMs: 10_000 },
      });
      await alternate(breaker, 2); // 2 of 4 = 50% > 40%
      expect(breaker.state).toBe('open');
      await jest.advanceTimersByTimeAsync(1_000);
      await fail(breaker); // the half-open probe fails: open again, for twice as long
      expect(breaker.snapshot().openMs).toBe(2_000);
      await jest.advanceTimersByTimeAsync(2_000);
      await succeed(breaker);
      expect(breaker.state).toBe('closed');
      // Still within the window: 3 of 6 calls failed, and one more failure makes it 4 of 7.
      await fail(breaker);
      expect(breaker.state).toBe('open');
    });

    it('forgets calls once they have left the window, and keeps no timer once every call has', async () => {
      const breaker = makeBreaker({
        failureThreshold: 5,
        failureRate: { thresholdPercent: 40, minimumCalls: 4, windowMs: 10_000 },
      });
      await succeed(breaker);
      await fail(breaker);
      await succeed(breaker);
      // Still in the window: the window's buckets are rotating.
      expect(jest.getTimerCount()).toBeGreaterThan(0);
      await jest.advanceTimersByTimeAsync(11_000);
      // Every bucket is empty: nothing rotates any more.
      expect(jest.getTimerCount()).toBe(0);
      // 1 of 1 failed, but the 3 calls before have left the window: fewer than minimumCalls.
      await fail(breaker);
      expect(breaker.state).toBe('closed');
      // And the window counts again from there: 2 of 4 = 50% > 40%.
      await succeed(breaker);
      await succeed(breaker);
      await fail(breaker);
      expect(breaker.state).toBe('open');
    });

    it('does not open on the same calls when not configured', async () => {
      const breaker = makeBreaker({ failureThreshold: 5 });
      await alternate(breaker, 10);
      expect(breaker.state).toBe('closed');
    });
  });

  describe('shutdown()', () => {
    it('stops the probe loop and leaves no timers behind', async () => {
      const healthProbe = jest.fn(async () => false);
      const breaker = makeBreaker({ openMs: 60_000, healthProbe, probeIntervalMs: 500 });
      await openIt(breaker, healthProbe);
      await jest.advanceTimersByTimeAsync(1_000);
      expect(healthProbe).toHaveBeenCalledTimes(2);
      expect(jest.getTimerCount()).toBeGreaterThan(0);

      breaker.shutdown();
      expect(jest.getTimerCount()).toBe(0);
      await jest.advanceTimersByTimeAsync(10_000);
      expect(healthProbe).toHaveBeenCalledTimes(2);
    });

    it('stops a probe that is in flight', async () => {
      const signals: AbortSignal[] = [];
      const healthProbe = jest.fn((signal: AbortSignal) => {
        signals.push(signal);
        return new Promise<unknown>(() => {});
      });
      const breaker = makeBreaker({ openMs: 60_000, healthProbe, probeIntervalMs: 500, probeTimeoutMs: 2_000 });
      await openIt(breaker, healthProbe);
      signals.length = 0;
      await jest.advanceTimersByTimeAsync(600);
      expect(healthProbe).toHaveBeenCalledTimes(1);

      breaker.shutdown();
      expect(signals[0].aborted).toBe(true);
      await jest.advanceTimersByTimeAsync(0);
      expect(jest.getTimerCount()).toBe(0);
      await jest.advanceTimersByTimeAsync(10_000);
      expect(healthProbe).toHaveBeenCalledTimes(1);
    });
  });

  describe('failures are attributed before they count', () => {
    const failAs = (breaker: CircuitBreaker, tenant: string, key = `${tenant}-${Math.random()}`) =>
      breaker.execute(() => Promise.reject(httpError(500)), { tenant, key }).catch((error: unknown) => error);
    const succeedAs = (breaker: CircuitBreaker, tenant: string) =>
      breaker.execute(() => Promise.resolve('ok'), { tenant, key: `${tenant}-ok` });

    it("one tenant's failures while another is answered never count: the breaker stays closed", async () => {
      const breaker = makeBreaker();
      await succeedAs(breaker, 'good');
      for (let i = 0; i < 20; i++) {
        await failAs(breaker, 'bad');
        await succeedAs(breaker, 'good');
      }
      // Even a run of the bad tenant's failures with the good one only idle: its failures are its own.
      for (let i = 0; i < 20; i++) await failAs(breaker, 'bad');
      expect(breaker.state).toBe('closed');
    });

    it('with a probe, every opening is confirmed: healthy, the breaker stays closed and the count starts over', async () => {
      const healthProbe = jest.fn(async () => true);
      const breaker = makeBreaker({ healthProbe });
      await succeedAs(breaker, 'good');
      await jest.advanceTimersByTimeAsync(1_000);
      for (let i = 0; i < 5; i++) await failAs(breaker, 'bad', `k${i}`);
      expect(healthProbe).toHaveBeenCalledTimes(1);
      expect(breaker.state).toBe('closed');
      expect(breaker.snapshot().consecutiveFailures).toBe(0);
    });

    it('... and when the probe sees the upstream down, it opens', async () => {
      const healthProbe = jest.fn(async () => false);
      const breaker = makeBreaker({ healthProbe });
      await succeedAs(breaker, 'good');
      await jest.advanceTimersByTimeAsync(1_000);
      for (let i = 0; i < 5; i++) await failAs(breaker, 'bad', `k${i}`);
      expect(healthProbe).toHaveBeenCalledTimes(1);
      expect(breaker.state).toBe('open');
    });

    it.each([2, 6])(
      '%i colluding tenants with standing never open it while the probe sees the upstream answering',
      async (count) => {
        const healthProbe = jest.fn(async () => true);
        const breaker = makeBreaker({ healthProbe });
        for (let t = 0; t < count; t++) await succeedAs(breaker, `colluder-${t}`);
        await succeedAs(breaker, 'victim');
        for (let round = 0; round < 40; round++) {
          // Bursts of five failures from each colluder, the victim answered between them.
          for (let t = 0; t < count; t++) for (let i = 0; i < 5; i++) await failAs(breaker, `colluder-${t}`);
          expect(await succeedAs(breaker, 'victim')).toBe('ok');
          await jest.advanceTimersByTimeAsync(250);
        }
        expect(breaker.state).toBe('closed');
        // One probe answers for a second of failures: the attack costs the upstream about a probe a second.
        expect(healthProbe.mock.calls.length).toBeLessThanOrEqual(11);
      },
    );

    it('calls that arrive while the probe decides wait for its verdict: an outage costs the threshold, whatever the concurrency', async () => {
      const probe = deferred<boolean>();
      const healthProbe = jest.fn(() => probe.promise);
      const breaker = makeBreaker({ healthProbe });
      for (let i = 0; i < 4; i++) await failAs(breaker, `t${i}`);
      const fifth = failAs(breaker, 't4');
      await jest.advanceTimersByTimeAsync(0);
      expect(breaker.deciding).toBeDefined();
      const waiting = breaker.deciding!.then(() => breaker.isCallable());
      probe.resolve(false);
      expect(await waiting).toBe(false);
      await fifth;
      expect(breaker.state).toBe('open');
      expect(breaker.deciding).toBeUndefined();
    });

    describe('a caller posing as a new tenant on every request', () => {
      it('never opens it while an established tenant is answered, without a probe', async () => {
        const breaker = makeBreaker();
        await succeedAs(breaker, 'victim');
        for (let i = 0; i < 200; i++) {
          await failAs(breaker, `swarm-${i}`);
          if (i % 20 === 0) await succeedAs(breaker, 'victim');
          await jest.advanceTimersByTimeAsync(10);
        }
        expect(breaker.state).toBe('closed');
      });

      it('with a probe, asks it once the threshold is reached: healthy, the count starts over and the victim stays served', async () => {
        const healthProbe = jest.fn(async () => true);
        const breaker = makeBreaker({ healthProbe });
        await succeedAs(breaker, 'victim');
        await jest.advanceTimersByTimeAsync(1);
        for (let i = 0; i < 50; i++) {
          await failAs(breaker, `swarm-${i}`);
          await jest.advanceTimersByTimeAsync(1);
        }
        expect(breaker.state).toBe('closed');
        expect(healthProbe.mock.calls.length).toBeGreaterThanOrEqual(1);
        expect(healthProbe.mock.calls.length).toBeLessThanOrEqual(10);
        expect(await succeedAs(breaker, 'victim')).toBe('ok');
      });

      it('... and opens at the threshold when the probe sees the upstream down: a real outage seen only by new callers', async () => {
        const healthProbe = jest.fn(async () => false);
        const breaker = makeBreaker({ healthProbe });
        await succeedAs(breaker, 'old');
        await jest.advanceTimersByTimeAsync(1_000);
        let calls = 0;
        for (let i = 0; i < 12; i++) {
          await breaker
            .execute(
              () => {
                calls++;
                return Promise.reject(httpError(503));
              },
              { tenant: `new-${i}`, key: `k${i}` },
            )
            .catch(() => undefined);
          await jest.advanceTimersByTimeAsync(0);
        }
        expect(breaker.state).toBe('open');
        expect(calls).toBe(5);
      });

      it('right after start (nobody answered yet), new callers failing open it only when the probe sees the upstream down', async () => {
        let healthy = true;
        const healthProbe = jest.fn(async () => healthy);
        const breaker = makeBreaker({ healthProbe });
        let calls = 0;
        const attempt = (i: number) =>
          breaker
            .execute(
              () => {
                calls++;
                return Promise.reject(httpError(500));
              },
              { tenant: `new-${i}`, key: `k${i}` },
            )
            .catch(() => undefined);
        // An attack that starts with the gateway: the upstream answers the probe.
        for (let i = 0; i < 12; i++) await attempt(i);
        expect(breaker.state).toBe('closed');
        expect(calls).toBe(12);
        // A real outage: the probe sees it down at the next threshold (its last verdict is reused for a second).
        await jest.advanceTimersByTimeAsync(1_000);
        healthy = false;
        calls = 0;
        for (let i = 12; i < 30; i++) await attempt(i);
        expect(breaker.state).toBe('open');
        expect(calls).toBeLessThanOrEqual(5);
      });

      it('a partial outage (the probe sees the upstream answering, every call fails): opens once nobody has been answered for unansweredMs', async () => {
        const healthProbe = jest.fn(async () => true);
        const breaker = makeBreaker({ healthProbe, unansweredMs: 10_000 });
        await succeedAs(breaker, 'old');
        for (let i = 0; i < 9; i++) {
          for (let j = 0; j < 5; j++) await fail(breaker, httpError(503));
          await jest.advanceTimersByTimeAsync(1_000);
          expect(breaker.state).toBe('closed');
        }
        await jest.advanceTimersByTimeAsync(1_000);
        for (let j = 0; j < 5; j++) await fail(breaker, httpError(503));
        expect(breaker.state).toBe('open');
      });

      it('in a fleet, a partial outage is announced as one the probe cannot see: no replica closes it on its probe', async () => {
        const healthProbe = jest.fn(async () => true);
        const announced: SharedBreakerState[] = [];
        const watchers: Array<(state: SharedBreakerState) => void> = [];
        const fleet = (): BreakerCoordinator => ({
          countFailure: async () => undefined,
          resetFailures: async () => undefined,
          announce: async (_name, state) => void announced.push(state),
          watch: async (_name, onChange) => {
            watchers.push(onChange);
            return undefined;
          },
          isProber: async () => true,
        });
        const options = {
          failureThreshold: 5,
          openMs: 4_000,
          maxOpenMultiplier: 4,
          probeIntervalMs: 500,
          probeTimeoutMs: 2_000,
          unansweredMs: 10_000,
          isFailure: isUpstreamFailure,
          healthProbe,
        };
        const here = new CircuitBreaker('upstream', options, fleet());
        const there = new CircuitBreaker('upstream', options, fleet());
        breakers.push(here, there);
        await jest.advanceTimersByTimeAsync(10_000);
        for (let i = 0; i < 5; i++) await fail(here, httpError(503));
        expect(here.state).toBe('open');
        expect(announced).toEqual([{ state: 'open', openMs: 4_000, probeBlind: true }]);
        watchers[1](announced[0]);
        expect(there.state).toBe('open');
        healthProbe.mockClear();
        await jest.advanceTimersByTimeAsync(3_999);
        expect(healthProbe).not.toHaveBeenCalled();
        expect(there.state).toBe('open');
      });

      it('timeouts never open it while the probe sees the upstream answering: long generations are not an outage', async () => {
        const healthProbe = jest.fn(async () => true);
        const breaker = makeBreaker({ healthProbe, unansweredMs: 10_000 });
        for (let i = 0; i < 60; i++) {
          await fail(breaker, new UpstreamTimeoutError('total', 3_000));
          await jest.advanceTimersByTimeAsync(500);
        }
        expect(breaker.state).toBe('closed');
      });

      it('once nobody has been answered for the grace period, new callers failing open it without a probe', async () => {
        const breaker = makeBreaker();
        await succeedAs(breaker, 'old');
        await jest.advanceTimersByTimeAsync(10_000);
        for (let i = 0; i < 5; i++) await failAs(breaker, `new-${i}`);
        expect(breaker.state).toBe('open');
      });
    });

    it('failures of calls without a tenant count as before', async () => {
      const breaker = makeBreaker();
      for (let i = 0; i < 5; i++) await fail(breaker);
      expect(breaker.state).toBe('open');
    });
  });
});
