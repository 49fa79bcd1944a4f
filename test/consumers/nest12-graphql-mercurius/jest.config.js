/**
 * Jest in ESM mode: the @nestjs/* 12 packages are ESM-only. @fastify/static (which mercurius loads) require()s the
 * ESM-only content-disposition 3, which Jest's module runtime cannot do below Node 24.9: ts-jest compiles that one
 * package to CommonJS.
 */
export default {
  testEnvironment: 'node',
  rootDir: '.',
  testRegex: '.e2e-spec.ts$',
  // 100 concurrent calls on a busy 2-core machine: room to finish, not a bound on how fast.
  testTimeout: 30_000,
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: {
    '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: '<rootDir>/tsconfig.spec.json' }],
    '/node_modules/content-disposition/.+\\.js$': [
      'ts-jest',
      { tsconfig: { allowJs: true, module: 'commonjs', isolatedModules: true } },
    ],
  },
  transformIgnorePatterns: ['/node_modules/(?!content-disposition/)'],
};
