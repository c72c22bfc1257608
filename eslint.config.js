import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'packages/*/dist/**', 'node_modules/**', 'bench/results/**', 'images/**/rootfs/**', 'src/server/e2b/envd/gen/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
  // Plain JavaScript here runs on Node (the in-box test services, config files).
  { files: ['**/*.mjs', '**/*.js'], languageOptions: { globals: globals.node } },
);
