import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { MockControl, getJson, type MockCall, type MockMode } from './mock-control.js';
import { startGateway, startMockProvider, type ChildHandle } from './processes.js';
import { ScenarioClock, prepareSdkChat, sdkChat, type RequestRecord } from './sdk-client.js';

export type TimelineScenario = 'herd' | 'distinct' | 'outage503' | 'outagehang';
export const TIMELINE_SCENARIOS: readonly TimelineScenario[] = ['herd', 'distinct', 'outage503', 'outagehang'];

export type TargetChoice = 'direct' | 'gateway' | 'both';

/** One way of sending the scenario's load: straight to the provider, or through the gateway with some flags. */
export interface Variant {
  /** Short name used in tables and charts, e.g. `gateway --timeout 0.5`. */
  label: string;
  target: 'direct' | 'gateway';
  gatewayFlags: string[];
  /** Role of this variant in the targets, e.g. `timeout5` for the outagehang run at --timeout 5 (scaled). */
  role: 'direct' | 'defaults' | 'concurrency32' | 'timeout5';
}

export type Load =
  { kind: 'burst'; count: number; identical: boolean } | { kind: 'paced'; intervalMs: number; durationMs: number };

export interface FailureWindow {
  mode: Extract<MockMode, 'error503' | 'hang'>;
  startMs: number;
  endMs: number;
}

/** A scenario at a given scale: every duration of its timeline is already multiplied by the scale. */
export interface ScenarioPlan {
  name: TimelineScenario;
  title: string;
  scale: number;
  latencyMs: number;
  load: Load;
  failure?: FailureWindow;
  variants: Variant[];
}

/** Latency of the provider in the outage scenarios (a short answer; the reference does not state its own). */
export const OUTAGE_LATENCY_MS = 100;
const HERD_LATENCY_MS = 1_500;

export function planScenario(name: TimelineScenario, scale: number, targets: TargetChoice = 'both'): ScenarioPlan {
  const s = (ms: number) => Math.round(ms * scale * 1000) / 1000;
  const direct: Variant = { label: 'direct', target: 'direct', gatewayFlags: [], role: 'direct' };
  const defaults: Variant = { label: 'gateway (defaults)', target: 'gateway', gatewayFlags: [], role: 'defaults' };
  let plan: ScenarioPlan;
  switch (name) {
    case 'herd':
      plan = {
        name,
        title: '200 identical requests at once',
        scale,
        latencyMs: s(HERD_LATENCY_MS),
        load: { kind: 'burst', count: 200, identical: true },
        variants: [direct, defaults],
      };
      break;
    case 'distinct':
      plan = {
        name,
        title: '20 distinct prompts at once',
        scale,
        latencyMs: s(HERD_LATENCY_MS),
        load: { kind: 'burst', count: 20, identical: false },
        variants: [
          direct,
          defaults,
          {
            label: 'gateway --concurrency 32',
            target: 'gateway',
            gatewayFlags: ['--concurrency', '32'],
            role: 'concurrency32',
          },
        ],
      };
      break;
    case 'outage503':
    case 'outagehang': {
      const hang = name === 'outagehang';
      const timeout = String(5 * scale);
      plan = {
        name,
        title: hang
          ? '1 request / 2 s for 150 s, provider hangs from 15 s to 75 s'
          : '1 request / 2 s for 150 s, provider answers 503 from 15 s to 75 s',
        scale,
        latencyMs: s(OUTAGE_LATENCY_MS),
        load: { kind: 'paced', intervalMs: s(2_000), durationMs: s(150_000) },
        failure: { mode: hang ? 'hang' : 'error503', startMs: s(15_000), endMs: s(75_000) },
        variants: hang
          ? [
              direct,
              { ...defaults, label: 'gateway (default timeout)' },
              {
                label: `gateway --timeout ${timeout}`,
                target: 'gateway',
                gatewayFlags: ['--timeout', timeout],
                role: 'timeout5',
              },
            ]
          : [direct, defaults],
      };
      break;
    }
  }
  if (targets !== 'both') plan.variants = plan.variants.filter((v) => v.target === targets);
  return plan;
}

/** A call the provider received, on the scenario's clock. */
export interface ProviderCallRecord {
  seq: number;
  route: string;
  /** Mode in force when it arrived. */
  mode: MockMode;
  at: number;
  finishedAt?: number;
  status?: number;
  outcome: MockCall['outcome'];
  /** The gateway's health probe (GET /v1/models), not a model call. */
  probe: boolean;
}

export interface RunResult {
  scenario: TimelineScenario;
  variant: Variant;
  scale: number;
  latencyMs: number;
  load: Load;
  /** With the moments the mode switches were acknowledged by the provider (scenario clock). */
  failure?: FailureWindow & { switchedAt: { start: number; end: number }; droppedHungConnections: number };
  startedAt: string;
  durationMs: number;
  requests: RequestRecord[];
  providerCalls: ProviderCallRecord[];
  /** The gateway's GET /health at the end of the run (breaker, limiter and dedup counters). */
  gatewayHealth?: unknown;
  /** Requests the harness had to abort at its deadline (should be 0). */
  abortedAtDeadline: number;
  /**
   * Moments the gateway's breaker opened (scenario clock), from the `openedAt` of its GET /health, polled
   * every 250 ms during runs with a failure window (a breaker stays open at least one 0.5 s probe interval).
   */
  breakerOpenings?: number[];
  /**
   * Paced load only: round trips of plain fetch to a bare node:http route of the mock provider, half an
   * interval after each request. The floor any server's answer has on this machine at this pace.
   */
  baselineRoundTripsMs?: number[];
}

export interface RunOptions {
  log?: (line: string) => void;
  /** Hard limit for the requests still running after the load ended; they are aborted then. Default 120 s. */
  drainLimitMs?: number;
}

const WARM_UP_ROUNDS = 3;
const PROBE_ROUTES = new Set(['/v1/models', '/models', '/health', '/v1/health']);

/**
 * Runs one variant: a fresh mock provider (and gateway) as child processes, a warm-up (not counted: the
 * provider's log is reset after it), the load on the scenario clock, the failure window switched over the
 * provider's control API, then the provider's call log. Children are always stopped.
 */
export async function runVariant(plan: ScenarioPlan, variant: Variant, options: RunOptions = {}): Promise<RunResult> {
  const log = options.log ?? (() => undefined);
  const children: ChildHandle[] = [];
  try {
    // A model list that needs a key, as the real APIs': the gateway runs pass-through (the SDK's key goes upstream).
    const mock = await startMockProvider(plan.latencyMs, ['--require-key', 'true']);
    children.push(mock);
    const control = new MockControl(mock.url);
    let gateway: ChildHandle | undefined;
    if (variant.target === 'gateway') {
      gateway = await startGateway(mock.url, variant.gatewayFlags);
      children.push(gateway);
    }
    const baseURL = `${gateway?.url ?? mock.url}/v1`;
    log(`  ${plan.name} / ${variant.label}: provider ${mock.url}${gateway ? `, gateway ${gateway.url}` : ''}`);

    // Warm-up, not counted (the provider's log is reset after it): first-request costs (JIT, connections) are
    // not part of the scenario. Three bursts of distinct prompts at latency 0, as large as the scenario's
    // burst (20 for paced load): after a single burst the next one was still slower.
    const nonce = randomBytes(4).toString('hex');
    const warmUp = plan.load.kind === 'burst' ? plan.load.count : 20;
    await control.configure({ latencyMs: 0 });
    const warmClock = new ScenarioClock();
    for (let round = 0; round < WARM_UP_ROUNDS; round++) {
      await Promise.all(
        Array.from({ length: warmUp }, (_, i) =>
          sdkChat(baseURL, -1 - i, `warm-up ${round}.${i} [${nonce}]`, warmClock),
        ),
      );
    }
    await control.configure({ latencyMs: Math.round(plan.latencyMs) });
    await control.reset();

    const load = plan.load;
    const burst =
      load.kind === 'burst'
        ? Array.from({ length: load.count }, (_, i) =>
            prepareSdkChat(
              baseURL,
              i,
              load.identical
                ? `Summarise the plot of Hamlet in one line. [${nonce}]`
                : `Distinct prompt #${i}: name a prime above ${i * 100}. [${nonce}]`,
            ),
          )
        : [];

    const clock = new ScenarioClock();
    const startedAt = new Date().toISOString();
    const abort = new AbortController();
    // Every request in flight listens on this one signal.
    setMaxListeners(0, abort.signal);
    const requests: Promise<RequestRecord>[] = [];
    const openings = gateway && plan.failure ? watchBreaker(gateway.url, clock) : undefined;

    let failureResult: RunResult['failure'];
    const failureTask = plan.failure
      ? (async (failure: FailureWindow) => {
          await clock.until(failure.startMs);
          await control.setMode(failure.mode);
          const start = clock.now();
          log(`    ${fmtSec(start)} provider switched to ${failure.mode}`);
          await clock.until(failure.endMs);
          const { droppedHungConnections } = await control.setMode('ok');
          const end = clock.now();
          log(
            `    ${fmtSec(end)} provider back to ok${droppedHungConnections ? ` (dropped ${droppedHungConnections} hung connections)` : ''}`,
          );
          failureResult = { ...failure, switchedAt: { start, end }, droppedHungConnections };
        })(plan.failure)
      : Promise.resolve();

    const baselineRoundTripsMs: number[] = [];
    const baselineTask =
      load.kind === 'paced'
        ? (async () => {
            const count = Math.floor(load.durationMs / load.intervalMs);
            for (let i = 0; i < count; i++) {
              await clock.until(i * load.intervalMs + load.intervalMs / 2);
              const sent = performance.now();
              await (await fetch(`${mock.url}/__mock/config`)).text();
              baselineRoundTripsMs.push(performance.now() - sent);
            }
          })()
        : Promise.resolve();

    if (load.kind === 'burst') {
      for (const request of burst) requests.push(request.send(clock, abort.signal));
    } else {
      const count = Math.floor(load.durationMs / load.intervalMs);
      for (let i = 0; i < count; i++) {
        await clock.until(i * load.intervalMs);
        requests.push(sdkChat(baseURL, i, `Paced prompt #${i}: what is ${i} squared? [${nonce}]`, clock, abort.signal));
      }
    }
    await failureTask;
    await baselineTask;

    // Everything still running gets a bounded time to finish, then is aborted and recorded as such.
    const drainLimit = options.drainLimitMs ?? 120_000;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        abort.abort();
        resolve();
      }, drainLimit);
    });
    await Promise.race([Promise.allSettled(requests), deadline]);
    clearTimeout(timer);
    const records = (await Promise.all(requests)).sort((a, b) => a.id - b.id);
    const durationMs = clock.now();
    const breakerOpenings = await openings?.stop();

    const calls = await control.calls();
    const providerCalls = calls.map((call): ProviderCallRecord => ({
      seq: call.seq,
      route: call.route,
      mode: call.mode,
      at: clock.fromEpoch(call.receivedAt),
      finishedAt: call.finishedAt === undefined ? undefined : clock.fromEpoch(call.finishedAt),
      status: call.status,
      outcome: call.outcome,
      probe: PROBE_ROUTES.has(call.route),
    }));
    const gatewayHealth = gateway
      ? await getJson(`${gateway.url}/health`).catch((error: unknown) => String(error))
      : undefined;
    return {
      scenario: plan.name,
      variant,
      scale: plan.scale,
      latencyMs: plan.latencyMs,
      load: plan.load,
      failure: failureResult,
      startedAt,
      durationMs,
      requests: records,
      providerCalls,
      gatewayHealth,
      abortedAtDeadline: records.filter((r) => r.errorCode === 'aborted_by_harness').length,
      breakerOpenings,
      baselineRoundTripsMs: load.kind === 'paced' ? baselineRoundTripsMs : undefined,
    };
  } finally {
    await Promise.all(children.reverse().map((child) => child.stop()));
  }
}

export interface ScenarioResult {
  plan: ScenarioPlan;
  runs: RunResult[];
}

/** Runs every variant of a scenario, one after the other (they would disturb each other's timings). */
export async function runScenario(plan: ScenarioPlan, options: RunOptions = {}): Promise<ScenarioResult> {
  const runs: RunResult[] = [];
  for (const variant of plan.variants) runs.push(await runVariant(plan, variant, options));
  return { plan, runs };
}

const BREAKER_POLL_MS = 250;

/** Polls the gateway's GET /health and collects every distinct `openedAt` of its breakers, until stopped. */
function watchBreaker(gatewayUrl: string, clock: ScenarioClock): { stop(): Promise<number[]> } {
  const seen = new Set<number>();
  let running = true;
  const loop = (async () => {
    // Bounded by the run: stop() is called once the load has drained (itself bounded by the drain limit).
    while (running) {
      const health = (await getJson(`${gatewayUrl}/health`).catch(() => undefined)) as
        { breakers?: Array<{ openedAt?: number }> } | undefined;
      for (const breaker of health?.breakers ?? [])
        if (typeof breaker.openedAt === 'number') seen.add(breaker.openedAt);
      await new Promise((resolve) => setTimeout(resolve, BREAKER_POLL_MS));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return [...seen].map((epoch) => clock.fromEpoch(epoch)).sort((a, b) => a - b);
    },
  };
}

export function fmtSec(ms: number): string {
  return `${(ms / 1000).toFixed(2)} s`;
}
