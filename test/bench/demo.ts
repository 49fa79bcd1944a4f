import { exampleSection } from './demo-example.js';
import { closeControlConnections } from './mock-control.js';
import type { RunMetrics } from './metrics.js';
import { requireBuild, stopAllChildren, stopChildrenOnSignals } from './processes.js';
import type { RunResult, TimelineScenario } from './scenarios.js';
import { fmtMs } from './targets.js';
import { runTimeline, type TimelineOutcome } from './timeline.js';

/**
 * `npm run demo`: the benchmark's herd, distinct and outage503 scenarios, ten times shorter, through the
 * gateway only, told in plain words. The mock provider and the gateway run as child processes on free
 * ports; every request is made with the official openai SDK, its defaults untouched.
 */
const SCALE = 0.1;
const say = (line = '') => process.stdout.write(`${line}\n`);
// A reader that went away (e.g. `| head`) must not crash the run and leave it without its clean-up.
process.stdout.on('error', () => undefined);
const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

async function gatewayRun(
  name: TimelineScenario,
): Promise<{ outcome: TimelineOutcome; run: RunResult; m: RunMetrics }> {
  // The demo shows the gateway at its defaults (the benchmark also runs other flags, and "direct").
  const outcome = await runTimeline(name, SCALE, 'gateway', {
    roles: ['defaults'],
    log: (line) => say(`   ${line.trim()}`),
  });
  return { outcome, run: outcome.result.runs[0], m: outcome.metrics[0] };
}

function savedLine(m: RunMetrics): string {
  const saved = m.requests - m.providerCalls;
  return `The provider received ${plural(m.providerCalls, 'call')} for ${plural(m.requests, 'request')}${saved > 0 ? ` (${saved} saved)` : ''}.`;
}

async function main(): Promise<number> {
  requireBuild();
  stopChildrenOnSignals();
  const started = performance.now();
  const failedCounts: string[] = [];
  say('nest-prompt-orchestrator demo');
  say('A simulated provider that counts every call and the gateway in front of it run as child processes on free');
  say('ports. Every request is made with the official openai SDK (defaults untouched: 10 min timeout, 2 retries),');
  say(`pointed at the gateway. Timelines are ${1 / SCALE}x shorter than in the full benchmark.`);

  say();
  say('1) A herd: 200 identical requests at once.');
  {
    const { run, m, outcome } = await gatewayRun('herd');
    say(`   ${savedLine(m)}`);
    say(
      `   ${m.outcomes.ok} request made the call, ${m.outcomes.joined} joined it while it was in flight, ${m.outcomes.cached} were answered from the recent-answer window.`,
    );
    say(
      `   Waits: p50 ${fmtMs(m.waitP50)}, p95 ${fmtMs(m.waitP95)}, slowest ${fmtMs(m.waitMax)}, for a provider that takes ${fmtMs(run.latencyMs)}.`,
    );
    failedCounts.push(
      ...outcome.checks.filter((c) => c.kind === 'count' && !c.pass).map((c) => `${c.scenario}: ${c.name}`),
    );
  }

  say();
  say('2) 20 different prompts at once.');
  {
    const { run, m, outcome } = await gatewayRun('distinct');
    say(`   ${savedLine(m)} Different prompts are never merged: each one is its own call.`);
    say(
      `   They ran in parallel: the slowest waited ${fmtMs(m.waitMax)} for a provider that takes ${fmtMs(run.latencyMs)} ` +
        `(${((m.waitMax ?? 0) / run.latencyMs).toFixed(2)}x); one at a time they would have taken ${fmtMs(20 * run.latencyMs)}.`,
    );
    failedCounts.push(
      ...outcome.checks.filter((c) => c.kind === 'count' && !c.pass).map((c) => `${c.scenario}: ${c.name}`),
    );
  }

  say();
  say(
    '3) An outage: one request (a different prompt each time) every 200 ms for 15 s; the provider answers 503 from 1.5 s to 7.5 s.',
  );
  say(
    "   The gateway runs pass-through (no provider key: the SDK's key goes upstream) and the provider's model list needs a key,",
  );
  say("   as OpenAI's does: the breaker's keyless health probe is answered 401, which is the provider serving.");
  {
    const { run, m, outcome } = await gatewayRun('outage503');
    const failure = run.failure;
    say(
      `   ${plural(m.requests, 'request')}; the provider received ${plural(m.providerCalls, 'call')}, only ${m.providerCallsFailing} of them while it was failing` +
        ` (and ${plural(m.probesFailing, 'health probe')} from the gateway's breaker).`,
    );
    if (m.outcomes.error > 0) {
      say(
        `   ${plural(m.outcomes.error, 'request')} got the provider's own 503 (after the gateway's single retry); then the breaker opened.`,
      );
    }
    if (m.outcomes.refused > 0) {
      say(
        `   The breaker opened ${fmtMs(m.breakerOpenedAfterMs)} into the outage. From then on the gateway refused ${plural(m.outcomes.refused, 'request')} ` +
          `itself, in ${fmtMs(m.refusalP50)} (p50, measured at the SDK), with x-should-retry: false: ` +
          `${m.refusalsRetried === 0 ? 'the SDK retried none of them' : `the SDK retried ${m.refusalsRetried} of them`}.`,
      );
    }
    say(
      `   The SDK made ${plural(m.sdkAttempts, 'attempt')} for ${plural(m.requests, 'request')} (${m.sdkRetries} retries).`,
    );
    if (failure && m.firstSuccessAfterRecoveryMs !== undefined) {
      say(
        `   The provider recovered at ${fmtMs(failure.switchedAt.end)}; the breaker's health probe noticed and the first answer came ` +
          `${fmtMs(m.recoveryLagMs)} later.`,
      );
    }
    say(`   Waits over the whole run: p50 ${fmtMs(m.waitP50)}, p95 ${fmtMs(m.waitP95)}, slowest ${fmtMs(m.waitMax)}.`);
    say(
      '   Straight to the provider, the SDK would retry each failing request twice: about 3 calls per request during the outage',
    );
    say('   (npm run bench -- outage503 measures both side by side).');
    failedCounts.push(
      ...outcome.checks.filter((c) => c.kind === 'count' && !c.pass).map((c) => `${c.scenario}: ${c.name}`),
    );
  }

  say();
  say(
    '4) The plugin in a Nest app of your own: the exchange-rates example (apps/example) as one hybrid app, with an HTTP route,',
  );
  say(
    "   a GraphQL resolver (Apollo) and a TCP microservice handler over one slow rates feed, all under the one breaker 'rates-feed'.",
  );
  failedCounts.push(...(await exampleSection(say)));

  say();
  if (failedCounts.length) say(`Note: these expected counts were not met: ${failedCounts.join('; ')}.`);
  say(
    `Done in ${fmtMs(performance.now() - started)}. Full benchmark: npm run bench -- all (or --scale 0.1 for a short run).`,
  );
  return 0;
}

void main()
  .then(
    (code) => code,
    (error: unknown) => {
      process.stderr.write(`demo: ${(error as Error)?.stack ?? String(error)}\n`);
      return 1;
    },
  )
  .then(async (code) => {
    await stopAllChildren();
    await closeControlConnections();
    process.exit(code);
  });
