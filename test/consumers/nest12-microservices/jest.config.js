/** Jest in ESM mode: the @nestjs/* 12 packages are ESM-only. */
export default {
  testEnvironment: 'node',
  rootDir: '.',
  testRegex: '.e2e-spec.ts$',
  // 100 concurrent calls on a busy 2-core machine: room to finish, not a bound on how fast.
  testTimeout: 30_000,
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: { '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: '<rootDir>/tsconfig.spec.json' }] },
};
