/**
 * What a newcomer sees after `pnpm install`: the dependencies whose build scripts the platform needs are built
 * (`pnpm.onlyBuiltDependencies` in the root package.json), so none falls back with a warning at start-up.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const billing = fileURLToPath(new URL('../services/billing', import.meta.url));

describe('the installed dependencies', () => {
  it("load bigint-buffer's native bindings (under Solana's web3.js): no 'bigint: Failed to load bindings'", () => {
    const script = `
      const web3 = require.resolve('@solana/web3.js');
      require(require.resolve('bigint-buffer', { paths: [web3] }));
      console.log('loaded');
    `;
    const run = spawnSync(process.execPath, ['-e', script], { cwd: billing, encoding: 'utf8' });
    expect(run.stdout.trim()).toBe('loaded');
    expect(run.stderr).not.toContain('Failed to load bindings');
  });
});
