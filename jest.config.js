/** Jest runs in ESM mode: the @nestjs/* 12 packages are ESM-only. */
export default {
  // Node's, plus a registry that kills whatever processes a suite started when it ends, however it ended.
  testEnvironment: '<rootDir>/test/support/jest-environment.mjs',
  extensionsToTreatAsEsm: ['.ts'],
  roots: ['<rootDir>/libs', '<rootDir>/apps', '<rootDir>/test'],
  // *.slow-spec.ts: the scenario, CLI and memory suites, run by `npm run test:slow` (and by `npm test`).
  testMatch: ['**/*.spec.ts', '**/*.e2e-spec.ts', '**/*.slow-spec.ts'],
  // The consumer fixtures are separate apps with their own installs and test setups (npm run test:consumers);
  // the library's build output is not source.
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/consumers/'],
  modulePathIgnorePatterns: ['<rootDir>/test/consumers/', '<rootDir>/libs/orchestrator/dist/'],
  moduleNameMapper: {
    '^nest-prompt-orchestrator$': '<rootDir>/libs/orchestrator/src/index.ts',
    '^nest-prompt-orchestrator/throttler$': '<rootDir>/libs/orchestrator/src/throttler/index.ts',
    '^nest-prompt-orchestrator/core$': '<rootDir>/libs/orchestrator/src/core/index.ts',
    '^nest-prompt-orchestrator/low-level$': '<rootDir>/libs/orchestrator/src/low-level.ts',
    '^nest-prompt-orchestrator/fastify$': '<rootDir>/libs/orchestrator/src/fastify/index.ts',
    '^nest-prompt-orchestrator/express$': '<rootDir>/libs/orchestrator/src/express/index.ts',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
  transform: {
    '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: '<rootDir>/tsconfig.spec.json' }],
  },
  // A timeout bounds how long a hung test takes to fail, not the behaviour under test: generous, since the suites must
  // hold on a saturated machine.
  testTimeout: 120000,
  // The suites that start the built gateway need dist/: built here once, never inside a test.
  globalSetup: '<rootDir>/test/support/global-setup.mjs',
  // Kills any process a test started that is still running at the end of the run (recorded by the registry above).
  globalTeardown: '<rootDir>/test/support/global-teardown.mjs',
};
