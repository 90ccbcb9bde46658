import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['{packages,services,tools}/*/test/**/*.test.ts', 'tests/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    maxWorkers: 2,
    reporters: ['default'],
  },
});
