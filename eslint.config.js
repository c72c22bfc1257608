import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist/**',
      'packages/*/dist/**',
      'node_modules/**',
      // Build outputs and the Python test tools' venv (scripts/pytools.sh).
      '.build/**',
      'bench/results/**',
      'images/**/rootfs/**',
      'src/server/e2b/envd/gen/**',
      'src/runtime/remote/gen/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
  // Typed rules: a promise nobody awaits or catches is an unhandled rejection waiting to end the server.
  // Every .ts file here is in tsconfig.json's include, which the project service finds.
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      // node:test's test()/describe() record their outcome in the runner; their promise is only for sequencing. The
      // name also matches a TestContext's t.test: a subtest its parent does not await fails as cancelled, not silently.
      '@typescript-eslint/no-floating-promises': [
        'error',
        { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite'] }] },
      ],
      '@typescript-eslint/no-misused-promises': 'error',
    },
  },
  // The web console runs in the browser, typed by its own tsconfig (console/tsconfig.json).
  {
    files: ['console/**/*.ts', 'console/**/*.tsx'],
    languageOptions: {
      globals: globals.browser,
      parserOptions: { projectService: false, project: './console/tsconfig.json', tsconfigRootDir: import.meta.dirname },
    },
  },
  // Plain JavaScript here runs on Node (the in-box test services, config files) and has no type information.
  {
    files: ['**/*.mjs', '**/*.js'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: { globals: globals.node },
  },
);
