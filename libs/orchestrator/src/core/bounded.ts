/**
 * `promise`, or a rejection once `ms` have passed (the timer never holds the
 * process open). Every operation on a shared store goes through this: a store
 * that stops answering costs a bounded wait, then counts as a failure.
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, what = 'no answer'): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} within ${ms} ms`)), ms);
    timer.unref?.();
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
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
