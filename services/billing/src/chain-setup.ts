/**
 * Connecting the Solana adapter from the configuration. When no mint is
 * configured, the file written by the development localnet's setup is used
 * (so `pnpm start` runs on embedded defaults); when neither exists, the
 * service runs without a chain and chain operations answer 503.
 */
import { existsSync, readFileSync } from 'node:fs';
import { durationMs, type Logger } from '@gpu/common';
import { SolanaChain } from './adapters/solana-chain.ts';
import type { BillingConfig } from './config.ts';
import type { Chain } from './domain/chain/index.ts';

interface ChainSettings {
  mint: string;
  treasuryAddress?: string;
  keypairFile: string;
}

function settings(config: BillingConfig): ChainSettings | null {
  const b = config.blockchain;
  if (b.token_mint) {
    if (!b.private_key_path)
      throw new Error('blockchain.private_key_path is required when blockchain.token_mint is set');
    return { mint: b.token_mint, treasuryAddress: b.treasury_address || undefined, keypairFile: b.private_key_path };
  }
  if (!b.localnet_file || !existsSync(b.localnet_file)) return null;
  const local = JSON.parse(readFileSync(b.localnet_file, 'utf8')) as {
    mint: string;
    treasury: string;
    treasury_keypair_file: string;
  };
  return { mint: local.mint, treasuryAddress: local.treasury, keypairFile: local.treasury_keypair_file };
}

/** Waits up to `blockchain.localnet_wait` for the localnet file when one is named, no mint is and it is not there yet. */
async function awaitLocalnetFile(config: BillingConfig, logger: Logger): Promise<void> {
  const b = config.blockchain;
  const waitMs = durationMs(b.localnet_wait);
  if (b.token_mint || !b.localnet_file || waitMs === 0 || existsSync(b.localnet_file)) return;
  logger.info({ file: b.localnet_file, wait: b.localnet_wait }, 'waiting for the localnet setup to write its file');
  const deadline = Date.now() + waitMs;
  while (!existsSync(b.localnet_file) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
}

/** Connects to the configured chain, retrying until `blockchain.connect_timeout`; null when none is configured. */
export async function connectChain(config: BillingConfig, logger: Logger): Promise<Chain | null> {
  await awaitLocalnetFile(config, logger);
  const s = settings(config);
  const b = config.blockchain;
  if (!s) {
    logger.warn('no blockchain configured (blockchain.token_mint): deposits, withdrawals and payouts answer 503');
    return null;
  }
  const deadline = Date.now() + durationMs(b.connect_timeout);
  for (let delay = 250; ; delay = Math.min(delay * 2, 4000)) {
    try {
      const chain = await SolanaChain.connect({
        rpcUrl: b.rpc_url,
        wsUrl: b.ws_url || undefined,
        mint: s.mint,
        treasuryKeypairFile: s.keypairFile,
        treasuryAddress: s.treasuryAddress,
        decimals: b.token_decimals,
        commitment: b.commitment,
        confirmTimeoutMs: durationMs(b.confirm_timeout),
      });
      logger.info({ rpc_url: b.rpc_url, mint: s.mint, treasury: chain.treasuryAddress() }, 'connected to Solana');
      return chain;
    } catch (err) {
      if (Date.now() + delay > deadline) {
        throw new Error(`cannot use the Solana chain at ${b.rpc_url}: ${(err as Error).message}`, { cause: err });
      }
      logger.warn({ err: (err as Error).message, retry_in_ms: delay }, 'Solana RPC not usable yet, retrying');
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}
