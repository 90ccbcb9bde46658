/**
 * What a newcomer sees after `pnpm install`: the project's own Node (the pinned `node` devDependency, a Node LTS from
 * the package registry) runs what pnpm runs, whatever Node the machine came with, and the dependencies whose build
 * scripts the platform needs are built (`pnpm.onlyBuiltDependencies` in the root package.json), so none falls back
 * with a warning at start-up.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const billing = fileURLToPath(new URL('../services/billing', import.meta.url));

const root = fileURLToPath(new URL('..', import.meta.url));
const rootPackage = JSON.parse(readFileSync(`${root}/package.json`, 'utf8')) as {
  devDependencies: Record<string, string>;
  pnpm: { onlyBuiltDependencies: string[] };
};

describe('the installed dependencies', () => {
  it("run on the project's own Node LTS: pnpm's scripts, and what they start", () => {
    const pinned = rootPackage.devDependencies.node;
    expect(pinned, 'an exact version').toMatch(/^\d+\.\d+\.\d+$/);
    expect(Number(pinned!.split('.')[0]) % 2, 'an even major: an LTS line').toBe(0);
    expect(rootPackage.pnpm.onlyBuiltDependencies, "the node package's install script fetches its binary").toContain(
      'node',
    );
    // This test runs under `pnpm test`: its Node, and a process it starts, are the pinned one.
    expect(process.version).toBe(`v${pinned}`);
    const child = spawnSync('node', ['-p', 'process.version'], { encoding: 'utf8', env: process.env });
    expect(child.stdout.trim()).toBe(`v${pinned}`);
    // And no dependency warns about the Node it runs on (the AWS SDK did on Node 20).
    const sdk = spawnSync(process.execPath, ['-e', "require('@aws-sdk/client-s3')"], {
      cwd: fileURLToPath(new URL('../services/storage', import.meta.url)),
      encoding: 'utf8',
    });
    expect(sdk.status).toBe(0);
    expect(sdk.stderr).not.toContain('NodeVersionSupportWarning');
  });

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
