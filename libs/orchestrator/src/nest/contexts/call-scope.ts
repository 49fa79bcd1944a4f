import { AsyncLocalStorage } from 'node:async_hooks';

/** The call running now, for code that has no request to read it from (see `currentCallSignal`). */
interface CallScope {
  readonly signal: AbortSignal | undefined;
}

// HTTP routes keep the signal on the request (no async-context cost there); every other context reads it from here.
const scope = new AsyncLocalStorage<CallScope>();

/** Runs `work` with `signal` as the current call's signal: what `currentCallSignal()` (and `@CallSignal()` outside HTTP) gives. */
export function withCallSignal<T>(signal: AbortSignal, work: () => T): T {
  return scope.run({ signal }, work);
}

// A handler the interceptor serves without a call of its own (only `@Fallback`): in scope, with no signal.
const SERVED: CallScope = Object.freeze({ signal: undefined });

/** Runs `work` as a handler the interceptor serves, for the check of `guardTransportHandlers`. */
export function withServedHandler<T>(work: () => T): T {
  return scope.run(SERVED, work);
}

/** Whether the code runs inside a handler or method the orchestrator serves (one store look-up). */
export function inOrchestratedCall(): boolean {
  return scope.getStore() !== undefined;
}

/**
 * The AbortSignal of the orchestrated call this code runs in: a decorated
 * provider method, a GraphQL resolver, a microservice or WebSocket handler
 * (and anything they call, across `await`). It aborts when the call's time
 * limit passes or every caller of a shared call has gone. `undefined` outside
 * such a call. On HTTP routes use `@CallSignal()`.
 *
 * @example
 * ```ts
 * @Dedup() @CallTimeout(30_000)
 * async summarize(docId: string) {
 *   return this.openai.chat.completions.create(params, { signal: currentCallSignal() });
 * }
 * ```
 */
export function currentCallSignal(): AbortSignal | undefined {
  return scope.getStore()?.signal;
}
