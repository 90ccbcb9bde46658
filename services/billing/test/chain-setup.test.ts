/**
 * Connecting the chain at start-up from the development localnet's file (`blockchain.localnet_file`), as `pnpm start`
 * does: the localnet and billing start at once, so billing waits up to `blockchain.localnet_wait` for the file the
 * localnet's setup writes; without the wait, or when it runs out, billing runs without a chain (chain operations
 * answer 503) rather than failing to start. Against the test localnet, with a mint made for the test.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createLogger } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { beforeAll, describe, expect, it } from 'vitest';
import { connectChain } from '../src/chain-setup.ts';
import { billingConfigSchema } from '../src/config.ts';
import { createSolanaFixture, type SolanaFixture } from './support/solana-fixture.ts';

const logger = createLogger({ service: 'billing-test', instanceId: 'chain-setup', level: 'silent' });
let fx: SolanaFixture;
let dir: string;

beforeAll(async () => {
  fx = await createSolanaFixture();
  dir = mkdtempSync(path.join(tmpdir(), 'billing-chain-setup-'));
});

/** The configuration `pnpm start` gives billing: no mint, the localnet's file and a wait. */
function config(file: string, wait: string) {
  return billingConfigSchema.parse({
    log_level: 'silent',
    blockchain: {
      rpc_url: testEnv.solanaRpcUrl,
      ws_url: testEnv.solanaRpcUrl.replace(/^http/, 'ws'),
      localnet_file: file,
      localnet_wait: wait,
      commitment: 'confirmed',
    },
  });
}

/** What the localnet's setup writes once its mint and treasury exist. */
function writeLocalnetFile(file: string) {
  writeFileSync(
    file,
    JSON.stringify({
      mint: fx.mint.toBase58(),
      treasury: fx.treasury.publicKey.toBase58(),
      treasury_keypair_file: fx.treasuryKeypairFile,
    }),
  );
}

describe('connecting the chain from the localnet file', () => {
  it('waits for a file written after billing started, then uses its mint and treasury', async () => {
    const file = path.join(dir, 'late.json');
    const started = Date.now();
    const writer = setTimeout(() => writeLocalnetFile(file), 600);
    const chain = await connectChain(config(file, '20s'), logger);
    clearTimeout(writer);
    expect(chain).not.toBeNull();
    expect(Date.now() - started).toBeGreaterThanOrEqual(550);
    expect(chain?.mintAddress()).toBe(fx.mint.toBase58());
    expect(chain?.treasuryAddress()).toBe(fx.treasury.publicKey.toBase58());
  });

  it('runs without a chain when no wait is set and the file is not there', async () => {
    const started = Date.now();
    expect(await connectChain(config(path.join(dir, 'absent.json'), '0s'), logger)).toBeNull();
    expect(Date.now() - started).toBeLessThan(500);
  });

  it('runs without a chain when the wait runs out', async () => {
    const started = Date.now();
    expect(await connectChain(config(path.join(dir, 'never.json'), '700ms'), logger)).toBeNull();
    expect(Date.now() - started).toBeGreaterThanOrEqual(650);
  });
});
