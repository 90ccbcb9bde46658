import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['{packages,services,tools}/*/test/**/*.test.ts', 'tests/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // expect.poll waits for something to happen: on a busy machine that can take far longer than vitest's 1 s
    // default, and a poll that finds its condition stops at once, so a generous bound costs a passing test nothing.
    expect: { poll: { timeout: 20_000 } },
    pool: 'forks',
    maxWorkers: 2,
    reporters: ['default'],
  },
});
