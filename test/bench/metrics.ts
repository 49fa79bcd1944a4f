import type { RunResult } from './scenarios.js';
import { OUTCOMES, type Outcome } from './sdk-client.js';

/** Nearest-rank percentile of unsorted values; undefined for none. */
export function percentile(values: readonly number[], p: number): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1];
}

export interface RunMetrics {
  requests: number;
  outcomes: Record<Outcome, number>;
  /** Model calls the provider received (health probes not included). */
  providerCalls: number;
  /** Model calls that arrived while the provider was failing (503 or hanging). */
  providerCallsFailing: number;
  /** The gateway's health probes (GET /v1/models) the provider received; in the failure window too. */
  probes: number;
  probesFailing: number;
  sdkAttempts: number;
  /** Attempts beyond the first, summed over requests. */
  sdkRetries: number;
  /** Attempts the SDK made after a response that said `x-should-retry: false` (must be 0). */
  retriedAfterNoRetry: number;
  /** Requests whose circuit_open refusal was followed by another SDK attempt (must be 0). */
  refusalsRetried: number;
  /** Time each client waited for its final answer (all attempts), ms. */
  waitP50?: number;
  waitP95?: number;
  waitMax?: number;
  /** p50 of the wait of requests answered 503 circuit_open. */
  refusalP50?: number;
  refusalMax?: number;
  /** p50 of the refusals' last HTTP attempt alone (fetch to response headers), without the SDK's own work. */
  refusalFetchP50?: number;
  /** p50 round trip of plain fetch to a bare node:http route at the same pace (the machine's floor). */
  baselineRoundTripP50?: number;
  /** When the gateway's breaker first opened (its /health `openedAt`), minus the start of the failure. */
  breakerOpenedAfterMs?: number;
  /** The same, minus the arrival of the first model call that met the failure instead. */
  breakerOpenedAfterFirstFailingCallMs?: number;
  /** First refusal (answer time) minus the start of the failure. */
  firstRefusalAfterMs?: number;
  /** Arrival of the first model call that met the failure, minus the start of the failure. */
  firstFailingCallAfterMs?: number;
  /** First success (answer time) at or after the recovery, minus the recovery time. */
  recoveryLagMs?: number;
  /** Absolute time of that first success. */
  firstSuccessAfterRecoveryMs?: number;
  /** Last answer minus first start. */
  makespanMs?: number;
}

export function computeMetrics(run: RunResult): RunMetrics {
  const { requests, providerCalls } = run;
  const outcomes = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Outcome, number>;
  for (const r of requests) outcomes[r.outcome]++;
  const waits = requests.map((r) => r.end - r.start);
  const refusals = requests.filter((r) => r.outcome === 'refused');
  const refusalWaits = refusals.map((r) => r.end - r.start);
  const model = providerCalls.filter((c) => !c.probe);
  const probes = providerCalls.filter((c) => c.probe);

  let retriedAfterNoRetry = 0;
  let refusalsRetried = 0;
  for (const r of requests) {
    const log = r.attemptLog;
    const firstNoRetry = log.findIndex((a) => a.shouldRetry === 'false');
    if (firstNoRetry >= 0) retriedAfterNoRetry += log.length - 1 - firstNoRetry;
    const firstRefusal = log.findIndex((a) => a.status === 503 && a.code === 'circuit_open');
    if (firstRefusal >= 0 && firstRefusal < log.length - 1) refusalsRetried++;
  }

  const metrics: RunMetrics = {
    requests: requests.length,
    outcomes,
    providerCalls: model.length,
    providerCallsFailing: model.filter((c) => c.mode !== 'ok').length,
    probes: probes.length,
    probesFailing: probes.filter((c) => c.mode !== 'ok').length,
    sdkAttempts: requests.reduce((sum, r) => sum + r.attempts, 0),
    sdkRetries: requests.reduce((sum, r) => sum + Math.max(0, r.attempts - 1), 0),
    retriedAfterNoRetry,
    refusalsRetried,
    waitP50: percentile(waits, 50),
    waitP95: percentile(waits, 95),
    waitMax: waits.length ? Math.max(...waits) : undefined,
    refusalP50: percentile(refusalWaits, 50),
    refusalMax: refusalWaits.length ? Math.max(...refusalWaits) : undefined,
    baselineRoundTripP50: run.baselineRoundTripsMs ? percentile(run.baselineRoundTripsMs, 50) : undefined,
    refusalFetchP50: percentile(
      refusals.map((r) => {
        const last = r.attemptLog.at(-1);
        return last ? last.end - last.start : r.end - r.start;
      }),
      50,
    ),
    makespanMs: requests.length
      ? Math.max(...requests.map((r) => r.end)) - Math.min(...requests.map((r) => r.start))
      : undefined,
  };

  const failure = run.failure;
  if (failure) {
    const failStart = failure.switchedAt.start;
    const recovered = failure.switchedAt.end;
    if (refusals.length) metrics.firstRefusalAfterMs = Math.min(...refusals.map((r) => r.end)) - failStart;
    const failing = model.filter((c) => c.mode !== 'ok').map((c) => c.at);
    const firstFailingCall = failing.length ? Math.min(...failing) : undefined;
    if (firstFailingCall !== undefined) metrics.firstFailingCallAfterMs = firstFailingCall - failStart;
    const opened = run.breakerOpenings?.find((t) => t >= failStart - 1);
    if (opened !== undefined) {
      metrics.breakerOpenedAfterMs = opened - failStart;
      if (firstFailingCall !== undefined) metrics.breakerOpenedAfterFirstFailingCallMs = opened - firstFailingCall;
    }
    const after = requests.filter(
      (r) => (r.outcome === 'ok' || r.outcome === 'joined' || r.outcome === 'cached') && r.end >= recovered,
    );
    if (after.length) {
      metrics.firstSuccessAfterRecoveryMs = Math.min(...after.map((r) => r.end));
      metrics.recoveryLagMs = metrics.firstSuccessAfterRecoveryMs - recovered;
    }
  }
  return metrics;
}
