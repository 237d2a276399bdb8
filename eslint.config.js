import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
      'no-console': ['error', { allow: ['error'] }],
    },
  },
  {
    // Programs that run inside guests, with the guest's own node (CommonJS): the tests' and the
    // code interpreter's JavaScript kernel.
    files: ['test/e2e/fixtures/**/*.cjs', 'src/adapters/code-interpreter/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
    rules: { '@typescript-eslint/no-require-imports': 'off', 'no-console': 'off' },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts', 'examples/**/*.ts', 'src/bin/**/*.ts', 'src/adapters/cli/**/*.ts'],
    rules: { 'no-console': 'off', '@typescript-eslint/no-unused-expressions': 'off' },
  },
);
