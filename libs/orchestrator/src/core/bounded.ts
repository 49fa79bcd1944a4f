import { LOOP_LAG_TOLERANCE_MS } from './timeout/time-limits.js';

/**
 * `promise`, or a rejection once `ms` have passed (the timer never holds the
 * process open). Every operation on a shared store goes through this: a store
 * that stops answering costs a bounded wait, then counts as a failure.
 *
 * The bound measures the store, not this process: on a busy event loop (a
 * herd being parsed, a saturated machine) the timer fires late and the
 * store's answer may already sit unread in the socket. A timer that fires
 * late is extended by its lateness (up to `ms` once more), and an expiry waits
 * for the current loop turn's I/O to be read before it rejects, so an answer
 * that arrived in time is never counted as a failure of the store.
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, what = 'no answer'): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    let due = Date.now() + ms;
    let given = 0;
    let timer: ReturnType<typeof setTimeout>;
    const expire = () => {
      if (settled) return;
      const late = Date.now() - due;
      if (late > LOOP_LAG_TOLERANCE_MS && given < ms) {
        const back = Math.min(late, ms - given);
        given += back;
        due = Date.now() + back;
        timer = setTimeout(expire, back);
        timer.unref?.();
        return;
      }
      // One more timer turn: the poll phase between reads a reply already in the socket, which then settles first.
      timer = setTimeout(() => {
        if (settled) return;
        settled = true;
        reject(new Error(`${what} within ${ms} ms`));
      }, 0);
      timer.unref?.();
    };
    timer = setTimeout(expire, ms);
    timer.unref?.();
    promise.then(
      (value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}

/** An error's message, short enough for a log line or a health document. */
export function describeError(error: unknown): string {
  return ((error as Error | undefined)?.message ?? String(error)).slice(0, 200);
}
