/**
 * Proof of reserves against the real local chain: the treasury covers what the ledger owes while every token moves
 * through billing (deposits credited, a withdrawal sent), and a transfer out of the treasury that the ledger does not
 * know about makes the check fail and name the gap. Admins only.
 */
import { Keypair } from '@solana/web3.js';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { createHold } from '../src/domain/ledger/holds.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import { recordIntent } from '../src/domain/wallets/payouts.ts';
import { type Localnet, setupLocalnet } from './support/localnet.ts';
import { type BillingHarness, setupBilling } from './support/setup.ts';

let h: BillingHarness;
let L: Localnet;

beforeAll(async () => {
  L = await setupLocalnet(6);
  h = await setupBilling({ chain: L.chain });
});
afterAll(() => h?.close());

const reserves = async (headers?: Record<string, string>) => {
  const res = await h.app.inject({ url: '/api/v1/billing/reserves', ...(headers ? { headers } : {}) });
  expect(res.statusCode, res.body).toBe(200);
  return res.json();
};

describe('GET /api/v1/billing/reserves', () => {
  it('covers the ledger while tokens move through billing, and names the gap of a transfer it does not know', async () => {
    // The treasury holds the 1,000,000 tokens the set-up minted to it, and the ledger owes nothing yet.
    expect(await reserves()).toMatchObject({
      treasury: L.treasury.publicKey.toBase58(),
      treasury_balance: '1000000.000000',
      required: '0.000000',
      ratio: null,
      covered: true,
    });
    const solBefore = (await reserves()).treasury_sol;
    // Every one of them owed to a wallet (as deposits credit them), some held by a session.
    const w = await h.fundedWallet('1000000', 'user', Keypair.generate().publicKey.toBase58());
    await h.db.transaction().execute((trx) => createHold(trx, w.id, new Dec('100'), null, { now: new Date() }));
    expect(await reserves()).toMatchObject({
      owed: { available: '999900.000000', locked: '100.000000', total: '1000000.000000' },
      required: '1000000.000000',
      ratio: '1.000000',
      covered: true,
      gap: '0.000000',
    });
    // A withdrawal leaves the treasury and the ledger alike.
    const sent = await h.app.inject({
      method: 'POST',
      url: `/api/v1/wallet/${w.id}/withdraw`,
      payload: { amount: '40' },
    });
    expect(sent.statusCode, sent.body).toBe(200);
    const after = await reserves();
    expect(after).toMatchObject({ treasury_balance: '999960.000000', ratio: '1.000000', covered: true });
    // The treasury's SOL as the chain has it: the withdrawal paid its fee and the new token account's rent from it.
    const lamports = await L.conn.getBalance(L.treasury.publicKey, 'finalized');
    expect(new Dec(after.treasury_sol).times(1e9).toFixed()).toBe(String(lamports));
    expect(new Dec(solBefore).minus(after.treasury_sol).toNumber()).toBeGreaterThan(0.002);
    // Tokens leave the treasury behind the ledger's back: the check fails by exactly that much.
    const elsewhere = await L.user(0n);
    await L.transfer(L.treasury, elsewhere.publicKey, 25n * L.unit);
    expect(await reserves()).toMatchObject({
      treasury_balance: '999935.000000',
      required: '999960.000000',
      ratio: '0.999974',
      covered: false,
      gap: '25.000000',
    });
  });

  it("counts a landed payout's token account fee as still held until it is settled", async () => {
    // A platform of its own: the test above leaves payouts paused.
    const L2 = await setupLocalnet(6);
    const h2 = await setupBilling({ chain: L2.chain });
    onTestFinished(() => h2.close());
    const reserves = async () => (await h2.app.inject({ url: '/api/v1/billing/reserves' })).json();
    const address = Keypair.generate().publicKey.toBase58();
    const w = await h2.fundedWallet('5', 'user', address);
    const before = await reserves();
    const prepared = await L2.chain.prepareTransfer(address, '5', { accountFee: '0.5' });
    const intent = { wallet: w, type: 'withdrawal' as const, amount: new Dec('5'), destination: address };
    await recordIntent(h2.ctx, intent, prepared, null);
    expect(await L2.chain.sendAndConfirm(prepared)).toBe('finalized');
    // Landed, not settled: 4.5 left the treasury, the 0.5 fee is still in it and still owed (the platform's, once
    // settled).
    const landed = await reserves();
    expect(new Dec(landed.in_flight).minus(before.in_flight).toFixed()).toBe('5');
    expect(new Dec(landed.in_flight_unsent).minus(before.in_flight_unsent).toFixed()).toBe('0.5');
    expect(new Dec(before.treasury_balance).minus(landed.treasury_balance).toFixed()).toBe('4.5');
    expect(new Dec(landed.required).minus(before.required).toFixed()).toBe('-4.5');
  });

  it('is for admins only', async () => {
    const renter = await h.issuer.user(['renter']);
    const res = await h.app.inject({ url: '/api/v1/billing/reserves', headers: renter.headers });
    expect(res.statusCode).toBe(403);
    expect(res.json().code).toBe('ROLE_REQUIRED');
  });
});
