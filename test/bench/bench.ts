import { existsSync } from 'node:fs';
import { copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { renderTimelineSvg } from './chart.js';
import { capacityTable, renderLimitSvg, runCapacity } from './capacity.js';
import { keyCostTable, runKeyCost } from './keycost.js';
import { closeControlConnections } from './mock-control.js';
import { clusterTable, runCluster } from './cluster.js';
import { clusterLoadedTable, runClusterLoaded } from './cluster-loaded.js';
import { overheadTable, runOverhead, writeOverheadDocs, type OverheadResult } from './overhead.js';
import { repoRoot, requireBuild, stopAllChildren, stopChildrenOnSignals } from './processes.js';
import { checksTable, scenarioTable } from './report.js';
import { runScale, scaleTable } from './scale.js';
import { runSoak, soakTable } from './soak.js';
import { restTable, runRest } from './rest.js';
import { runTenants, tenantsTable } from './tenants.js';
import { TIMELINE_SCENARIOS, type TargetChoice, type TimelineScenario } from './scenarios.js';
import { REFERENCE, describeGatewayDefaults, fmtMs, type TargetCheck } from './targets.js';
import { runTimeline } from './timeline.js';
import { runTracingCost, tracingCostTable } from './tracing-cost.js';
import { herd10kTable, runHerd10k } from './herd10k.js';

const SCENARIOS = [
  ...TIMELINE_SCENARIOS,
  'overhead',
  'scale',
  'keycost',
  'cluster',
  'soak',
  'tenants',
  'capacity',
  'tracing',
  'rest',
  'herd10k',
] as const;
type Scenario = (typeof SCENARIOS)[number];

const USAGE = `Usage: npm run bench -- <scenario> [options]

Scenarios: ${SCENARIOS.join(', ')}, all
  (rest: spawn to first proxied answer, idle RSS and idle CPU of the gateway against the floor, in the same rounds;
  --rounds N, --duration S for the idle CPU window (default 10), --loaded beside two busy processes)

Options:
  --scale F             compress every duration of the timeline by F (latencies, request interval, failure
                        window, run length, and the gateway --timeout a scenario sets); default 1.
                        The SDK's own retry back-off is not compressed.
  --target T            direct | gateway | both (default both) for herd, distinct, outage503, outagehang
  --out DIR             where JSON results and SVG charts go (default bench-results)
  --docs                also copy the charts to docs/benchmarks/ (overhead: write its table into docs/benchmarks.md,
                        and its --profile summaries to docs/benchmarks/DATE-overhead-profiles.md)
  --strict              exit non-zero when a timing target is missed too (default: count targets only)
  --duration S          overhead: seconds per measured stretch (default 3); soak: length of the run (default 120)
  --rounds N            overhead: interleaved rounds of every row, floor and gateway (default 5, at least 2);
                        herd10k: rounds of 10,000 identical requests on new connections, direct then gateway
  --only IDS            overhead: a comma list of rows (small32, quiet32, traced32, nowindow32, small200, hits, kb10,
                        kb100, kb1000, big, bighit, stream, express, spaced, nginxhits, nodehits, herd, limit;
                        nginxhits, nodehits (node:http alone, a reference) and the herd's nginx figures
                        need nginx on the PATH, else skipped)
  --herd N              overhead: requests in the herd row (default 1000)
  --warm-up S           overhead: seconds of unmeasured load before each measured stretch (default 3)
  --profile             overhead: also take a CPU profile of the gateway on the small and 200 KB rows
                        (V8's sampler: wall time of the main thread, waiting for a core included)
  --perf-profile        overhead: the same profile taken with perf (CPU time of every thread, the
                        kernel's included; needs perf and the right to record the gateway)
  --before FILE         overhead: a JSON result of an earlier run, shown as the "before" column
  --against DIR         overhead: the gateway of another built checkout (DIR/dist/gateway/main.js, e.g. a
                        worktree of the previous commit) measured as a third side in the same rounds (A/B column)
  --loaded              cluster: the fleet's promises with two busy processes taking the cores (herds of 300 over 4
                        replicas, Redis frozen under a herd, a leader killed mid-stream); overhead: the same rows
                        with two busy processes beside them, from the first warm-up to the end; rest: the same
                        rounds beside two busy processes
  --help                this text
`;

class UsageError extends Error {}

interface Cli {
  scenarios: Scenario[];
  scale: number;
  target: TargetChoice;
  out: string;
  docs: boolean;
  strict: boolean;
  durationSec: number;
  soakSec: number;
  restWindowSec: number;
  rounds: number;
  only: string[];
  herd: number;
  profile: boolean;
  perfProfile: boolean;
  loaded: boolean;
  warmUpSec?: number;
  before?: string;
  against?: string;
}

/** The gateway entry of another built checkout (`--against DIR`). */
function againstEntry(dir: string): string {
  // A checkout from before the gateway was bundled runs tsc's output.
  const entry = [resolve(dir, 'dist/gateway/main.js'), resolve(dir, 'dist/apps/gateway/src/main.js')].find((file) =>
    existsSync(file),
  );
  if (!entry) throw new UsageError(`--against: no built gateway in ${dir}/dist (run npm run build there)`);
  return entry;
}

function parseCli(argv: string[]): Cli | undefined {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        scale: { type: 'string', default: '1' },
        target: { type: 'string', default: 'both' },
        out: { type: 'string', default: 'bench-results' },
        docs: { type: 'boolean', default: false },
        strict: { type: 'boolean', default: false },
        duration: { type: 'string' },
        rounds: { type: 'string', default: '5' },
        only: { type: 'string', default: '' },
        herd: { type: 'string', default: '1000' },
        profile: { type: 'boolean', default: false },
        'perf-profile': { type: 'boolean', default: false },
        loaded: { type: 'boolean', default: false },
        'warm-up': { type: 'string' },
        before: { type: 'string' },
        against: { type: 'string' },
        help: { type: 'boolean', default: false },
      },
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const { values, positionals } = parsed;
  if (values.help) return undefined;
  if (positionals.length !== 1) throw new UsageError('name one scenario (or all)');
  const name = positionals[0];
  if (name !== 'all' && !(SCENARIOS as readonly string[]).includes(name))
    throw new UsageError(`unknown scenario "${name}"`);
  const scale = Number(values.scale);
  if (!Number.isFinite(scale) || scale <= 0 || scale > 10)
    throw new UsageError(`--scale must be a number in (0, 10], got "${values.scale}"`);
  const target = values.target as TargetChoice;
  if (!['direct', 'gateway', 'both'].includes(target))
    throw new UsageError(`--target must be direct, gateway or both, got "${values.target}"`);
  const durationSec = values.duration === undefined ? 3 : Number(values.duration);
  if (!Number.isFinite(durationSec) || durationSec < 1 || durationSec > 600)
    throw new UsageError('--duration must be 1..600 seconds');
  const rounds = Number(values.rounds);
  if (!Number.isInteger(rounds) || rounds < 2 || rounds > 20)
    throw new UsageError('--rounds must be a whole number 2..20');
  const herd = Number(values.herd);
  if (!Number.isInteger(herd) || herd < 1 || herd > 20_000)
    throw new UsageError('--herd must be a whole number 1..20000');
  const warmUpSec = values['warm-up'] === undefined ? undefined : Number(values['warm-up']);
  if (warmUpSec !== undefined && (!Number.isFinite(warmUpSec) || warmUpSec < 0 || warmUpSec > 600))
    throw new UsageError('--warm-up must be 0..600 seconds');
  const only = (values.only ?? '')
    .split(',')
    .map((id) => id.trim())
    .filter(Boolean);
  return {
    // herd10k needs a raised `ulimit -n`: run on its own.
    scenarios: name === 'all' ? SCENARIOS.filter((s) => s !== 'herd10k') : [name as Scenario],
    scale,
    target,
    out: resolve(values.out ?? 'bench-results'),
    docs: values.docs ?? false,
    strict: values.strict ?? false,
    durationSec,
    soakSec: values.duration === undefined ? 120 : durationSec,
    restWindowSec: values.duration === undefined ? 10 : durationSec,
    rounds,
    only,
    herd,
    profile: (values.profile ?? false) || (values['perf-profile'] ?? false),
    perfProfile: values['perf-profile'] ?? false,
    loaded: values.loaded ?? false,
    warmUpSec,
    before: values.before,
    against: values.against === undefined ? undefined : againstEntry(values.against),
  };
}

const log = (line: string) => process.stdout.write(`${line}\n`);
// A reader that went away (e.g. `| head`) must not crash the run and leave it without its clean-up.
process.stdout.on('error', () => undefined);

function stamp(): string {
  return new Date().toISOString().replace(/[:.]/g, '-').replace('Z', '');
}

function machine() {
  return { node: process.version, platform: process.platform, cpus: cpus().length, cpuModel: cpus()[0]?.model };
}

async function main(): Promise<number> {
  let cli: Cli | undefined;
  try {
    cli = parseCli(process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`bench: ${error.message}\n\n${USAGE}`);
    return 2;
  }
  if (!cli) {
    process.stdout.write(USAGE);
    return 0;
  }
  requireBuild();
  stopChildrenOnSignals();
  await mkdir(cli.out, { recursive: true });
  const docsDir = join(repoRoot(), 'docs', 'benchmarks');
  if (cli.docs) await mkdir(docsDir, { recursive: true });

  const allChecks: TargetCheck[] = [];
  const timings: Array<[string, number]> = [];
  const written: string[] = [];
  const runStamp = stamp();
  const started = performance.now();
  log(
    `bench: ${cli.scenarios.join(', ')} at scale ${cli.scale} (node ${process.version}, ${cpus().length} CPUs); results in ${cli.out}`,
  );
  log(`  ${describeGatewayDefaults()}; every request through the official openai SDK, defaults untouched`);
  if (cli.scale !== 1) {
    log(
      `  scale ${cli.scale}: latencies, request interval, failure window, run length and the gateway --timeout a scenario sets are` +
        ` multiplied by ${cli.scale}; so are the time targets, except the 2 ms refusal target and targets bounded by delays` +
        ` --scale does not compress (the SDK's retry back-off, the gateway's own defaults such as its 0.5 s health-probe interval).` +
        ` Overhead allowances (50 ms, 200 ms) are scaled too, so they are stricter than at scale 1.`,
    );
  }

  for (const scenario of cli.scenarios) {
    const t0 = performance.now();
    log(`\n-- ${scenario}`);
    const file = (ext: string) => join(cli.out, `${scenario}-${runStamp}.${ext}`);
    // A scenario's table and target checks, printed; its whole result kept as JSON.
    const report = async (result: { checks: TargetCheck[] }, text: string, extra: Record<string, unknown> = {}) => {
      log('');
      log(text);
      log(checksTable(result.checks));
      allChecks.push(...result.checks);
      await writeFile(file('json'), JSON.stringify({ scenario, ...extra, machine: machine(), ...result }, null, 1));
      written.push(file('json'));
    };
    if ((TIMELINE_SCENARIOS as readonly string[]).includes(scenario)) {
      const outcome = await runTimeline(scenario as TimelineScenario, cli.scale, cli.target, { log });
      log('');
      log(scenarioTable(outcome.result, outcome.metrics));
      if (outcome.checks.length) log(checksTable(outcome.checks));
      allChecks.push(...outcome.checks);
      await writeFile(
        file('json'),
        JSON.stringify(
          {
            scenario,
            scale: cli.scale,
            generatedAt: new Date().toISOString(),
            machine: machine(),
            plan: outcome.result.plan,
            reference: REFERENCE[scenario as TimelineScenario],
            metrics: outcome.result.runs.map((run, i) => ({ run: run.variant.label, ...outcome.metrics[i] })),
            checks: outcome.checks,
            runs: outcome.result.runs,
          },
          null,
          1,
        ),
      );
      const svg = renderTimelineSvg(outcome.result);
      await writeFile(file('svg'), svg);
      written.push(file('json'), file('svg'));
      if (cli.docs) {
        const target = join(docsDir, `${scenario}.svg`);
        await copyFile(file('svg'), target);
        written.push(target);
      }
    } else if (scenario === 'overhead') {
      const before = cli.before ? (JSON.parse(await readFile(cli.before, 'utf8')) as OverheadResult) : undefined;
      const result = await runOverhead({
        durationSec: cli.durationSec,
        rounds: cli.rounds,
        herd: cli.herd,
        only: cli.only,
        profile: cli.profile,
        perfProfile: cli.perfProfile,
        out: cli.out,
        burners: cli.loaded ? 2 : 0,
        warmUpSec: cli.warmUpSec,
        againstEntry: cli.against,
        log,
      });
      await report(result, overheadTable(result));
      if (cli.docs)
        written.push(
          ...(await writeOverheadDocs(result, before, `npm run bench -- ${process.argv.slice(2).join(' ')}`)),
        );
    } else if (scenario === 'scale') {
      const result = await runScale(cli.scale, log);
      await report(result, scaleTable(result, cli.scale), { scale: cli.scale });
    } else if (scenario === 'tenants') {
      const result = await runTenants(log);
      await report(result, tenantsTable(result));
    } else if (scenario === 'capacity') {
      const result = await runCapacity(log);
      await report(result, capacityTable(result));
      await writeFile(file('svg'), renderLimitSvg(result));
      written.push(file('svg'));
      if (cli.docs) {
        await copyFile(file('svg'), join(docsDir, 'capacity-limit.svg'));
        written.push(join(docsDir, 'capacity-limit.svg'));
      }
    } else if (scenario === 'soak') {
      const result = await runSoak({ durationSec: cli.soakSec, log });
      await report(result, soakTable(result));
    } else if (scenario === 'cluster' && cli.loaded) {
      const result = await runClusterLoaded(log);
      await report(result, clusterLoadedTable(result));
    } else if (scenario === 'cluster') {
      const result = await runCluster(log);
      await report(result, clusterTable(result));
    } else if (scenario === 'rest') {
      const result = await runRest({ rounds: cli.rounds, windowSec: cli.restWindowSec, loaded: cli.loaded, log });
      await report(result, restTable(result));
    } else if (scenario === 'herd10k') {
      const result = await runHerd10k({ rounds: cli.rounds, log });
      await report(result, herd10kTable(result));
    } else if (scenario === 'tracing') {
      const result = await runTracingCost();
      log(tracingCostTable(result));
      await writeFile(file('json'), JSON.stringify({ scenario, machine: machine(), ...result }, null, 1));
      written.push(file('json'));
    } else {
      const result = runKeyCost();
      log(keyCostTable(result));
      await writeFile(file('json'), JSON.stringify({ scenario, machine: machine(), ...result }, null, 1));
      written.push(file('json'));
    }
    timings.push([scenario, performance.now() - t0]);
    log(`   (${scenario} took ${fmtMs(performance.now() - t0)})`);
  }

  log('\n== summary');
  if (allChecks.length) log(checksTable(allChecks));
  const countMissed = allChecks.filter((c) => c.kind === 'count' && !c.pass);
  const timingMissed = allChecks.filter((c) => c.kind === 'timing' && !c.pass);
  log(
    `count targets: ${allChecks.filter((c) => c.kind === 'count').length - countMissed.length} passed, ${countMissed.length} missed` +
      `; timing targets: ${allChecks.filter((c) => c.kind === 'timing').length - timingMissed.length} passed, ${timingMissed.length} missed` +
      (cli.strict ? ' (--strict: timing targets enforced)' : ' (reported, not enforced; --strict enforces them)'),
  );
  log(
    `time: ${timings.map(([name, ms]) => `${name} ${fmtMs(ms)}`).join(', ')}; total ${fmtMs(performance.now() - started)}`,
  );
  log(`files:\n${written.map((f) => `  ${f}`).join('\n')}`);
  return countMissed.length > 0 || (cli.strict && timingMissed.length > 0) ? 1 : 0;
}

void main()
  .then(
    (code) => code,
    (error: unknown) => {
      process.stderr.write(`bench: ${(error as Error)?.stack ?? String(error)}\n`);
      return 1;
    },
  )
  .then(async (code) => {
    await stopAllChildren();
    await closeControlConnections();
    process.exit(code);
  });
