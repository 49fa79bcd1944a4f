// ESLint flat config: typescript-eslint's type-checked recommended rules over the TypeScript sources, the plain
// recommended rules over the JavaScript scripts. Formatting is Prettier's (npm run lint runs both).
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

const untyped = {
  ...tseslint.configs.disableTypeChecked,
  languageOptions: { ...tseslint.configs.disableTypeChecked.languageOptions, globals: { ...globals.node } },
};

export default tseslint.config(
  { ignores: ['**/dist/**', '**/node_modules/**', 'coverage/**', 'bench-results/**', 'docs/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      // An async method without await still implements a promise-returning contract; dropping `async` would turn
      // its throws into synchronous ones.
      '@typescript-eslint/require-await': 'off',
      // An underscore marks a binding kept on purpose (a rest sibling dropped from an object, a parameter's place).
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none', ignoreRestSiblings: true },
      ],
      // Every hit is String() over a JSON field of unknown type (`String(body.id ?? '')`, narrowed to `{}`): the
      // deliberate coercion of untrusted input, which the rule cannot tell from stringifying a real object.
      '@typescript-eslint/no-base-to-string': 'off',
      // A `let` that a closure reads before its one assignment (an unsubscribe called when the client leaves early)
      // must stay a `let`: as a const it would be in its temporal dead zone there.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      // Input checks refuse control characters in names by matching them: the one use of such a pattern.
      'no-control-regex': 'off',
      // Passing on a caught error (unknown by type) as the rejection is the point of those call sites.
      '@typescript-eslint/prefer-promise-reject-errors': [
        'error',
        { allowThrowingAny: true, allowThrowingUnknown: true },
      ],
    },
  },
  {
    // Tests read JSON bodies (supertest's body, parsed events, SDK results) as `any` on purpose and assert on them;
    // the unsafe-any rules fire on nearly every such read (over 200 times).
    files: ['test/**/*.ts', '**/*.spec.ts', '**/*.e2e-spec.ts', '**/*.slow-spec.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
  // The scripts are plain JavaScript run by Node.
  { files: ['**/*.js', '**/*.mjs', '**/*.cjs'], ...untyped },
  // The consumer fixtures are separate apps that compile against their own installs (npm run test:consumers), which
  // this checkout does not have: without their types every rule that reads types fires on every call.
  { files: ['test/consumers/**'], ...untyped },
);
