import { computeMetrics, type RunMetrics } from './metrics.js';
import {
  planScenario,
  runScenario,
  type RunOptions,
  type ScenarioResult,
  type TargetChoice,
  type TimelineScenario,
  type Variant,
} from './scenarios.js';
import { checkScenario, type TargetCheck } from './targets.js';

/** A timeline scenario's runs, with the metrics of each run and the targets checked: what bench, demo and CI share. */
export interface TimelineOutcome {
  result: ScenarioResult;
  metrics: RunMetrics[];
  checks: TargetCheck[];
}

export async function runTimeline(
  name: TimelineScenario,
  scale: number,
  targets: TargetChoice = 'both',
  options: RunOptions & { roles?: Variant['role'][] } = {},
): Promise<TimelineOutcome> {
  const plan = planScenario(name, scale, targets);
  if (options.roles) plan.variants = plan.variants.filter((v) => options.roles?.includes(v.role));
  const result = await runScenario(plan, options);
  const metrics = result.runs.map(computeMetrics);
  const checks = checkScenario(result, (run) => metrics[result.runs.indexOf(run)]);
  return { result, metrics, checks };
}
