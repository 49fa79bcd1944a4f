import { parseGatewayConfig, type GatewayConfig } from '../../apps/gateway/src/config/gateway-config.js';
import { computeMetrics, type RunMetrics } from './metrics.js';
import type { RunResult, ScenarioResult, TimelineScenario } from './scenarios.js';

/**
 * A target and whether the run met it. `count` targets (provider calls, refusals the SDK retried) are
 * deterministic and make the benchmark exit non-zero when missed; `timing` targets are reported only
 * (the machine is a noisy 2-core box) unless --strict.
 */
export interface TargetCheck {
  scenario: string;
  run: string;
  kind: 'count' | 'timing';
  name: string;
  target: string;
  actual: string;
  pass: boolean;
  /** How the bound relates to --scale: at scale 1 always 'none'. */
  scaling: 'none' | 'scaled' | 'partly' | 'fixed';
  note?: string;
}

/** The gateway's settings when started without flags (an empty environment: the harness strips ORCHESTRATOR_*). */
export const GATEWAY_DEFAULTS: GatewayConfig = parseGatewayConfig([], {}) as GatewayConfig;

/** The gateway's own fixed default that --scale does not compress: the breaker's health-probe interval. */
export const GATEWAY_PROBE_INTERVAL_MS = GATEWAY_DEFAULTS.probeIntervalMs;

export function describeGatewayDefaults(): string {
  const d = GATEWAY_DEFAULTS;
  return (
    `gateway defaults: --concurrency ${d.concurrency}, --timeout ${d.timeoutMs / 1000} s, --retries ${d.retries}, ` +
    `breaker ${d.breakerFailures} failures / ${d.breakerOpenMs / 1000} s open / probe every ${d.probeIntervalMs / 1000} s, ` +
    `dedup window ${d.dedupWindowMs / 1000} s`
  );
}

export function fmtMs(ms: number | undefined): string {
  if (ms === undefined || Number.isNaN(ms)) return '-';
  const abs = Math.abs(ms);
  if (abs < 10) return `${ms.toFixed(2)} ms`;
  if (abs < 1000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(2)} s`;
}

function count(
  scenario: string,
  run: string,
  name: string,
  actual: number,
  target: string,
  pass: boolean,
  note?: string,
): TargetCheck {
  return { scenario, run, kind: 'count', name, target, actual: String(actual), pass, scaling: 'none', note };
}

function atMost(
  scenario: string,
  run: string,
  name: string,
  actual: number | undefined,
  boundMs: number,
  scaling: TargetCheck['scaling'],
  strictlyBelow = false,
  note?: string,
): TargetCheck {
  const pass = actual !== undefined && (strictlyBelow ? actual < boundMs : actual <= boundMs);
  return {
    scenario,
    run,
    kind: 'timing',
    name,
    target: `${strictlyBelow ? '<' : '<='} ${fmtMs(boundMs)}`,
    actual: actual === undefined ? 'none' : fmtMs(actual),
    pass,
    scaling,
    note,
  };
}

/** Targets of the timeline scenarios (herd, distinct, outage503, outagehang), per gateway run. */
export function checkScenario(
  result: ScenarioResult,
  metricsOf: (run: RunResult) => RunMetrics = computeMetrics,
): TargetCheck[] {
  const { plan } = result;
  const scale = plan.scale;
  const s = (ms: number) => ms * scale;
  const scaled: TargetCheck['scaling'] = scale === 1 ? 'none' : 'scaled';
  const recoveryBound = scale === 1 ? 2_000 : 2_000 * scale + GATEWAY_PROBE_INTERVAL_MS;
  const recoveryScaling: TargetCheck['scaling'] = scale === 1 ? 'none' : 'partly';
  const recoveryNote =
    scale === 1
      ? undefined
      : `2 s x scale + the gateway's ${GATEWAY_PROBE_INTERVAL_MS / 1000} s probe interval (not compressed by --scale)`;
  const checks: TargetCheck[] = [];
  for (const run of result.runs) {
    if (run.variant.target !== 'gateway') continue;
    const m = metricsOf(run);
    const name = plan.name;
    const label = run.variant.label;
    const role = run.variant.role;
    const latency = plan.latencyMs;
    switch (name) {
      case 'herd':
        checks.push(count(name, label, 'provider calls', m.providerCalls, '= 1', m.providerCalls === 1));
        checks.push(
          atMost(name, label, 'slowest wait <= provider latency + 50 ms', m.waitMax, latency + s(50), scaled),
        );
        break;
      case 'distinct':
        checks.push(
          count(
            name,
            label,
            'provider calls (each prompt once)',
            m.providerCalls,
            `= ${m.requests}`,
            m.providerCalls === m.requests,
          ),
        );
        if (role === 'concurrency32') {
          checks.push(atMost(name, label, 'slowest wait <= 1.0 x latency + 50 ms', m.waitMax, latency + s(50), scaled));
        } else {
          checks.push(atMost(name, label, 'slowest wait <= 1.1 x latency', m.waitMax, 1.1 * latency, scaled));
        }
        break;
      case 'outage503':
        checks.push(
          count(
            name,
            label,
            'calls reaching the failing provider',
            m.providerCallsFailing,
            '<= 5',
            m.providerCallsFailing <= 5,
          ),
        );
        checks.push(
          atMost(
            name,
            label,
            'refusal latency p50 < 2 ms',
            m.refusalP50,
            2,
            scale === 1 ? 'none' : 'fixed',
            true,
            'measured at the SDK: the wait of requests answered 503 circuit_open',
          ),
        );
        checks.push(atMost(name, label, 'overall p95 < 314 ms', m.waitP95, s(314), scaled, true));
        checks.push(
          atMost(
            name,
            label,
            'recovery lag <= 2 s',
            m.recoveryLagMs,
            recoveryBound,
            recoveryScaling,
            false,
            recoveryNote,
          ),
        );
        break;
      case 'outagehang':
        if (role === 'timeout5') {
          checks.push(atMost(name, label, 'no client waits > 5.5 s', m.waitMax, s(5_500), scaled));
          checks.push(
            atMost(
              name,
              label,
              'breaker opens <= 13 s into the hang',
              m.breakerOpenedAfterFirstFailingCallMs,
              s(13_050),
              scaled,
              false,
              'from the first request that met the hang (requests come at even seconds, the hang starts at 15 s); 13 s = 4 intervals + the 5 s timeout, + 50 ms',
            ),
          );
          checks.push(
            count(
              name,
              label,
              'calls reaching the hung provider',
              m.providerCallsFailing,
              '<= 9',
              m.providerCallsFailing <= 9,
            ),
          );
        }
        checks.push(
          atMost(
            name,
            label,
            'recovery lag <= 2 s',
            m.recoveryLagMs,
            recoveryBound,
            recoveryScaling,
            false,
            recoveryNote,
          ),
        );
        break;
    }
    checks.push(
      count(
        name,
        label,
        'refusals retried by the SDK',
        m.refusalsRetried + m.retriedAfterNoRetry,
        '= 0',
        m.refusalsRetried === 0 && m.retriedAfterNoRetry === 0,
        'attempts after a circuit_open refusal or any x-should-retry: false answer',
      ),
    );
  }
  return checks;
}

/** The reference Rust proxy's published figures (design.md, "Benchmarks"), at full scale. */
export const REFERENCE: Record<TimelineScenario, { direct: string; proxy: string }> = {
  herd: { direct: '200 calls', proxy: '1 call (1 miss, 199 joined), slowest 1.60 s' },
  distinct: { direct: '1.5 s', proxy: '3.0 s at its default (16 in flight), 1.5 s with 32' },
  outage503: {
    direct: '89 calls hit the dead provider',
    proxy: '5 calls; refusals ~1 ms; p95 314 ms; traffic resumed at 78.8 s (3.8 s after recovery)',
  },
  outagehang: {
    direct: '30 calls, p95 53.7 s',
    proxy:
      'timeout 5 s: breaker opens ~13 s into the hang, slowest wait 11.4 s, 9 calls reached the hung provider; 30 s timeout: first success at 136.9 s',
  },
};

/** Reference figures placed on the rows of the comparison table (full-scale values). */
export const REFERENCE_ROWS: Record<TimelineScenario, Partial<Record<string, string>>> = {
  herd: { providerCalls: '1 (direct 200)', answers: '1 / 199 / 0', slowest: '1.60 s' },
  distinct: { slowest: '3.0 s (16 in flight); 1.5 s (32)' },
  outage503: { failing: '5 (direct 89)', refusal: '~1 ms', p95: '314 ms', recovery: '78.8 s (lag 3.8 s)' },
  outagehang: {
    failing: '9 at 5 s (direct 30)',
    p95: 'direct 53.7 s',
    slowest: '11.4 s at 5 s',
    opened: '~13 s at 5 s',
    recovery: '136.9 s at 30 s',
  },
};
