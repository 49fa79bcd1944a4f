import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { TestingModule } from '@nestjs/testing';
import { Test } from '@nestjs/testing';
import { OrchestratorModule, OrchestratorService } from 'nest-prompt-orchestrator';
import { waitFor } from '../support/platforms.js';

const KEYS = 100_000;
const MAX_ENTRIES = 1_000;
/** Calls started together: many flights open at once, yet small enough to stay fast. */
const BATCH = 100;
/** How many of the older keys are probed (evenly spread), and how many of the newest. */
const OLD_SAMPLE = 2_000;
const RECENT = 2 * MAX_ENTRIES;

class ProbeMiss extends Error {}

/**
 * Memory stays bounded under many distinct keys. Driven through `OrchestratorService.run()`
 * (100 000 HTTP requests would take minutes), so it does not depend on the HTTP platform
 * and runs once, in a Nest module like any user's.
 */
describe('memory bounds of dedup', () => {
  let moduleRef: TestingModule;
  let orchestrator: OrchestratorService;

  beforeAll(async () => {
    moduleRef = await Test.createTestingModule({
      imports: [OrchestratorModule.forRoot({ dedup: { maxEntries: MAX_ENTRIES } })],
    }).compile();
    orchestrator = moduleRef.get(OrchestratorService);
  });
  afterAll(async () => {
    await moduleRef.close();
  });

  /**
   * Whether the window holds key `i`'s answer, seen from outside: a kept answer is returned without
   * running the work; otherwise the work runs and fails, and a failure is never stored, so probing
   * adds nothing to the window.
   */
  const isKept = (i: number) =>
    orchestrator
      .run<number>({ key: `key-${i}`, dedup: true }, () => Promise.reject(new ProbeMiss()))
      .then(
        (value) => {
          expect(value).toBe(i);
          return true;
        },
        (error: unknown) => {
          if (error instanceof ProbeMiss) return false;
          throw error;
        },
      );

  it(`keeps no flight and at most ${MAX_ENTRIES} window entries after ${KEYS} distinct keys`, async () => {
    let runs = 0;
    for (let start = 0; start < KEYS; start += BATCH) {
      const batch: Promise<number>[] = [];
      for (let i = start; i < Math.min(KEYS, start + BATCH); i++) {
        batch.push(
          orchestrator.run({ key: `key-${i}`, dedup: true }, async () => {
            runs++;
            return i;
          }),
        );
      }
      const values = await Promise.all(batch);
      if (values[0] !== start) throw new Error(`key-${start} answered ${values[0]}`);
    }
    expect(runs).toBe(KEYS);
    await waitFor(() => orchestrator.health().inFlight === 0, 10_000, 'every flight to be forgotten');
    expect(orchestrator.health()).toMatchObject({ inFlight: 0, dedup: { miss: KEYS, joined: 0, cached: 0 } });

    const recent = Array.from({ length: RECENT }, (_, n) => KEYS - RECENT + n);
    const stride = Math.floor((KEYS - RECENT) / OLD_SAMPLE);
    const old = Array.from({ length: OLD_SAMPLE }, (_, n) => n * stride);
    const keptRecent = (await Promise.all(recent.map(isKept))).filter(Boolean).length;
    const keptOld = (await Promise.all(old.map(isKept))).filter(Boolean).length;

    // Of the newest 2 000 answers at most 1 000 are kept (all 2 000 if the window were unbounded),
    // and none of the older ones.
    expect(keptRecent).toBeGreaterThan(0);
    expect(keptRecent).toBeLessThanOrEqual(MAX_ENTRIES);
    expect(keptOld).toBe(0);
    await waitFor(() => orchestrator.health().inFlight === 0, 10_000, 'every probe to be forgotten');
    expect(runs).toBe(KEYS);
    // About 15 s of CPU under jest; the margin is for a busy machine, not for the plugin.
  }, 120_000);
});
