/**
 * A user's deposit with the client package's helper (`@gpu/client/solana`), over HTTP against billing and the real
 * local chain: the public deposit instructions, proving the address with the keypair, the SPL transferChecked to the
 * treasury and the claim, credited exactly once however often it runs.
 */
import { billingClient, staticToken } from '@gpu/client';
import { deposit, proveAddress, toBaseUnits } from '@gpu/client/solana';
import { TOKEN_PROGRAM_ID } from '@solana/spl-token';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Localnet, setupLocalnet } from './support/localnet.ts';
import { type BillingHarness, setupBilling } from './support/setup.ts';

let L: Localnet;
let h: BillingHarness;
let baseUrl: string;

beforeAll(async () => {
  L = await setupLocalnet();
  h = await setupBilling({ chain: L.chain });
  baseUrl = await h.app.listen({ port: 0, host: '127.0.0.1' });
});
afterAll(async () => {
  await h?.close();
});

describe('deposits with @gpu/client/solana', () => {
  it('publishes where deposits go, to anyone', async () => {
    const res = await fetch(`${baseUrl}/api/v1/deposits/instructions`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      mint: L.mint.toBase58(),
      decimals: 6,
      token_program: TOKEN_PROGRAM_ID.toBase58(),
      treasury: L.treasury.publicKey.toBase58(),
      treasury_token_account: L.chain.treasuryTokenAccount(),
      commitment: 'finalized',
    });
  });

  it('proves the address, sends the tokens and has them credited, once', async () => {
    const keypair = await L.user(100n);
    const user = await h.issuer.user(['renter']);
    const billing = billingClient({ baseUrl, token: staticToken(user.token) });
    const opened = await billing.POST('/api/v1/wallet', {
      body: { owner_type: 'user', owner_id: user.id, solana_address: keypair.publicKey.toBase58() },
    });
    expect(opened.response.status).toBe(201);
    const walletId = opened.data!.id;
    await proveAddress(billing, walletId, keypair);
    await proveAddress(billing, walletId, keypair); // already proven: nothing to do

    const done = await deposit({ billing, rpcUrl: L.conn.rpcEndpoint, keypair, walletId, amount: '12.5' });
    expect(done.transaction).toMatchObject({ amount: '12.500000', status: 'confirmed' });
    expect(await L.chain.tokenBalance(keypair.publicKey.toBase58())).toBe('87.5');
    expect(await h.balanceOf(walletId)).toMatchObject({ available: '12.500000' });
    // The same signature claimed again (a retried claim): the first answer, nothing more credited.
    const again = await billing.POST('/api/v1/wallet/{walletID}/deposit', {
      params: { path: { walletID: walletId }, header: { 'idempotency-key': `deposit:${done.signature}` } },
      body: { signature: done.signature, amount: '12.5' },
    });
    expect(again.data?.id).toBe((done.transaction as { id: string }).id);
    expect(await h.balanceOf(walletId)).toMatchObject({ available: '12.500000' });

    // More than the keypair holds fails on chain before anything is claimed.
    await expect(deposit({ billing, rpcUrl: L.conn.rpcEndpoint, keypair, walletId, amount: '1000' })).rejects.toThrow();
    expect(await h.balanceOf(walletId)).toMatchObject({ available: '12.500000' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('refuses amounts it cannot send exactly', () => {
    expect(toBaseUnits('12.5', 6)).toBe(12_500_000n);
    expect(toBaseUnits('0.000001', 6)).toBe(1n);
    expect(() => toBaseUnits('0.0000001', 6)).toThrow(/more than 6 decimals/);
    expect(() => toBaseUnits('-1', 6)).toThrow();
    expect(() => toBaseUnits('0', 6)).toThrow();
    expect(() => toBaseUnits('1e3', 6)).toThrow();
  });
});
