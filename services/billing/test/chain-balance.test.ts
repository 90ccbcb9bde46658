/** Reading a wallet's on-chain token balance through the API, against the real local chain. */
import { Keypair } from '@solana/web3.js';
import { describe, expect, it } from 'vitest';
import { createWallet } from '../src/domain/wallets/wallets.ts';
import { type Localnet, setupLocalnet } from './support/localnet.ts';
import { setupBilling, useBillingHarness } from './support/setup.ts';

let L: Localnet;
const h = useBillingHarness(async () => {
  L = await setupLocalnet();
  return { chain: L.chain };
});

const walletOf = (address: string) =>
  createWallet(h.db, { ownerType: 'user', ownerId: crypto.randomUUID(), solanaAddress: address });

describe('GET /api/v1/wallet/{id}/chain-balance', () => {
  it("reads the platform-token balance of the wallet's address on chain, and follows transfers", async () => {
    const kp = await L.user(40n);
    const wallet = await walletOf(kp.publicKey.toBase58());
    const read = () => h.app.inject({ method: 'GET', url: `/api/v1/wallet/${wallet.id}/chain-balance` });
    const res = await read();
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      wallet_id: wallet.id,
      solana_address: kp.publicKey.toBase58(),
      mint: L.mint.toBase58(),
      token_balance: '40.000000',
      decimals: 6,
    });
    await L.transfer(kp, L.treasury.publicKey, 2_500_000n); // 2.5 tokens
    expect((await read()).json().token_balance).toBe('37.500000');
  });

  it('answers "0" for an address without a token account', async () => {
    const wallet = await walletOf(Keypair.generate().publicKey.toBase58());
    const res = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${wallet.id}/chain-balance` });
    expect(res.json().token_balance).toBe('0.000000');
  });

  it('answers 404 for an unknown wallet and 400 for a malformed ID', async () => {
    const missing = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${crypto.randomUUID()}/chain-balance` });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().code).toBe('WALLET_NOT_FOUND');
    const bad = await h.app.inject({ method: 'GET', url: '/api/v1/wallet/not-a-uuid/chain-balance' });
    expect(bad.statusCode).toBe(400);
  });

  it('answers 503 when no chain is configured', async () => {
    const bare = await setupBilling({ chain: null });
    try {
      const wallet = await createWallet(bare.db, {
        ownerType: 'user',
        ownerId: crypto.randomUUID(),
        solanaAddress: Keypair.generate().publicKey.toBase58(),
      });
      const res = await bare.app.inject({ method: 'GET', url: `/api/v1/wallet/${wallet.id}/chain-balance` });
      expect(res.statusCode).toBe(503);
    } finally {
      await bare.close();
    }
  });
});
