/**
 * Money never leaves the books for the platform itself: a withdrawal, a payout or an automatic payout to an address
 * the platform controls (the treasury, its token account, the mint and its authorities), to a well-known program or
 * to a burn address is refused with 400 INVALID_DESTINATION before anything is debited or sent, on the real local
 * chain. The mint here has its own mint and freeze authorities (not the treasury), as a production mint may.
 */
import {
  ASSOCIATED_TOKEN_PROGRAM_ID,
  createMint,
  getAssociatedTokenAddressSync,
  getOrCreateAssociatedTokenAccount,
  mintTo,
  TOKEN_2022_PROGRAM_ID,
  TOKEN_PROGRAM_ID,
} from '@solana/spl-token';
import { Connection, Keypair, LAMPORTS_PER_SOL, PublicKey, SystemProgram } from '@solana/web3.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SolanaChain } from '../src/adapters/solana-chain.ts';
import { payOutEarnings, settleAutoPayouts, sweepAutoPayouts } from '../src/domain/wallets/auto-payout.ts';
import { rpcUrl } from './support/localnet.ts';
import { type BillingHarness, setupBilling } from './support/setup.ts';

let h: BillingHarness;
let chain: SolanaChain;
let conn: Connection;
const treasury = Keypair.generate();
const mintAuthority = Keypair.generate();
const freezeAuthority = Keypair.generate();
let mint: PublicKey;

beforeAll(async () => {
  conn = new Connection(rpcUrl(), { commitment: 'confirmed', wsEndpoint: rpcUrl().replace(/^http/, 'ws') });
  for (const who of [treasury, mintAuthority]) {
    const sig = await conn.requestAirdrop(who.publicKey, 10 * LAMPORTS_PER_SOL);
    await conn.confirmTransaction({ signature: sig, ...(await conn.getLatestBlockhash()) }, 'confirmed');
  }
  mint = await createMint(conn, mintAuthority, mintAuthority.publicKey, freezeAuthority.publicKey, 6);
  const ata = await getOrCreateAssociatedTokenAccount(conn, treasury, mint, treasury.publicKey);
  await mintTo(conn, mintAuthority, mint, ata.address, mintAuthority, 1_000_000n * 10n ** 6n);
  chain = await SolanaChain.connect({
    rpcUrl: rpcUrl(),
    mint: mint.toBase58(),
    treasuryKeypair: treasury,
    commitment: 'finalized',
    decimals: 6,
    confirmTimeoutMs: 15_000,
    pollIntervalMs: 100,
  });
  h = await setupBilling({ chain });
});
afterAll(async () => {
  await h?.close();
});

const INCINERATOR = '1nc1nerator11111111111111111111111111111111';

/** Every kind of address the platform controls or nobody can spend from, with the reason the refusal gives. */
function unfitDestinations(): [what: string, address: string, reason: string][] {
  return [
    [
      "the treasury's owner address (its token account is the treasury)",
      treasury.publicKey.toBase58(),
      'platform_address',
    ],
    ["the treasury's token account", chain.treasuryTokenAccount(), 'platform_address'],
    ['the mint', mint.toBase58(), 'platform_address'],
    ["the mint's mint authority", mintAuthority.publicKey.toBase58(), 'platform_address'],
    ["the mint's freeze authority", freezeAuthority.publicKey.toBase58(), 'platform_address'],
    ['the system program', SystemProgram.programId.toBase58(), 'system_address'],
    ['the token program', TOKEN_PROGRAM_ID.toBase58(), 'program'],
    ['the token-2022 program', TOKEN_2022_PROGRAM_ID.toBase58(), 'program'],
    ['the associated token account program', ASSOCIATED_TOKEN_PROGRAM_ID.toBase58(), 'program'],
    ['the incinerator', INCINERATOR, 'burn_address'],
  ];
}

const treasuryBalance = () => chain.tokenBalance(treasury.publicKey.toBase58());
const post = (url: string, payload: object, headers?: Record<string, string>) =>
  h.app.inject({ method: 'POST', url, payload, ...(headers ? { headers } : {}) });
const put = (url: string, payload: object, headers?: Record<string, string>) =>
  h.app.inject({ method: 'PUT', url, payload, ...(headers ? { headers } : {}) });

/** A provider wallet holding `funds`, and its holder's headers (only the holder names a destination of its own). */
async function providerWallet(funds: string) {
  const owner = await h.issuer.user(['provider']);
  return { provider: await h.fundedWallet(funds, 'provider', undefined, { holderId: owner.id }), owner: owner.headers };
}
const transactionsOf = (walletId: string) =>
  h.db.selectFrom('transactions').select(['type', 'status']).where('wallet_id', '=', walletId).execute();

/** Nothing was debited, recorded or sent for the wallet, and the treasury still holds what it held. */
async function expectNothingMoved(walletId: string, available: string, treasuryBefore: string) {
  expect(await h.balanceOf(walletId)).toMatchObject({ available, pending: '0.000000' });
  expect(await transactionsOf(walletId)).toEqual([]);
  expect(await treasuryBalance()).toBe(treasuryBefore);
  expect((await h.assertLedgerConsistent()).problems).toEqual([]);
}

describe('destinations the platform controls', () => {
  it('refuses a withdrawal to each of them with 400 INVALID_DESTINATION, debiting and sending nothing', async () => {
    const w = await h.fundedWallet('50', 'user');
    const holder = await h.holderHeaders(w);
    const before = await treasuryBalance();
    for (const [what, destination, reason] of unfitDestinations()) {
      const res = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '5', destination }, holder);
      expect(res.statusCode, `${what}: ${res.body}`).toBe(400);
      expect(res.headers['content-type']).toContain('application/problem+json');
      expect(res.json(), what).toMatchObject({ code: 'INVALID_DESTINATION', reason });
      expect(res.json().errors[0].path).toBe('body.destination');
    }
    await expectNothingMoved(w.id, '50.000000', before);
    // The mint authority's token account was never made (nothing was sent its way).
    expect(await conn.getAccountInfo(getAssociatedTokenAddressSync(mint, mintAuthority.publicKey))).toBeNull();
  });

  it("refuses a withdrawal to a wallet's own address when that is the treasury (the default destination)", async () => {
    // A wallet opened before addresses were checked, registered at the treasury's address.
    const w = await h.fundedWallet('20', 'user', treasury.publicKey.toBase58());
    const before = await treasuryBalance();
    const res = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '7' });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json()).toMatchObject({ code: 'INVALID_DESTINATION', reason: 'platform_address' });
    await expectNothingMoved(w.id, '20.000000', before);
  });

  it('refuses a provider payout to each of them, and the automatic payout setting too', async () => {
    const { provider, owner } = await providerWallet('40');
    const before = await treasuryBalance();
    for (const [what, destination, reason] of unfitDestinations()) {
      const paid = await post(`/api/v1/provider/${provider.ownerId}/payout`, { amount: '10', destination }, owner);
      expect(paid.statusCode, `${what}: ${paid.body}`).toBe(400);
      expect(paid.json(), what).toMatchObject({ code: 'INVALID_DESTINATION', reason });
      const whole = await post(`/api/v1/provider/${provider.ownerId}/payout`, { destination }, owner);
      expect(whole.statusCode, what).toBe(400);
      const setting = await put(
        `/api/v1/provider/${provider.ownerId}/payout-settings`,
        { auto_payout: true, destination },
        owner,
      );
      expect(setting.statusCode, `${what}: ${setting.body}`).toBe(400);
      expect(setting.json(), what).toMatchObject({ code: 'INVALID_DESTINATION', reason });
    }
    const settings = await h.app.inject({
      method: 'GET',
      url: `/api/v1/provider/${provider.ownerId}/payout-settings`,
    });
    expect(settings.json()).toMatchObject({ auto_payout: false, destination: null });
    await expectNothingMoved(provider.id, '40.000000', before);
  });

  it('never pays an automatic payout saved earlier to the treasury: refused at pay time, backed off, reason kept', async () => {
    const { provider, owner: ownerHeaders } = await providerWallet('25');
    // A setting saved before destinations were checked.
    await h.db
      .updateTable('wallets')
      .set({ auto_payout_to: treasury.publicKey.toBase58() })
      .where('id', '=', provider.id)
      .execute();
    const before = await treasuryBalance();
    expect(await payOutEarnings(h.ctx, provider.id)).toBe('failed');
    await expectNothingMoved(provider.id, '25.000000', before);
    const settings = (
      await h.app.inject({ method: 'GET', url: `/api/v1/provider/${provider.ownerId}/payout-settings` })
    ).json();
    expect(settings).toMatchObject({ auto_payout: true, destination: treasury.publicKey.toBase58() });
    expect(settings.last_failure).toMatch(/platform/);
    expect(Date.parse(settings.next_attempt_at)).toBeGreaterThan(Date.now());
    // Waiting out its backoff, neither the sweep nor a prompt tries again.
    expect(await sweepAutoPayouts(h.ctx)).toBe(0);
    expect(await payOutEarnings(h.ctx, provider.id)).toBeNull();
    await expectNothingMoved(provider.id, '25.000000', before);
    // Saving a good setting clears the failure and pays.
    const owner = Keypair.generate().publicKey.toBase58();
    const fixed = await put(
      `/api/v1/provider/${provider.ownerId}/payout-settings`,
      { auto_payout: true, destination: owner },
      ownerHeaders,
    );
    expect(fixed.json()).toMatchObject({ destination: owner, last_failure: null, next_attempt_at: null });
    await settleAutoPayouts(h.ctx); // saving it pays what is due at once
    expect(await chain.tokenBalance(owner)).toBe('25');
    expect(await transactionsOf(provider.id)).toEqual([{ type: 'payout', status: 'confirmed' }]);
  });

  it('refuses to open a wallet at an address the platform controls', async () => {
    const wallets = async () =>
      (
        await h.db
          .selectFrom('wallets')
          .select((eb) => eb.fn.countAll<string>().as('n'))
          .executeTakeFirstOrThrow()
      ).n;
    const before = await wallets();
    for (const [what, address, reason] of unfitDestinations()) {
      const res = await post('/api/v1/wallet', {
        owner_type: 'user',
        owner_id: crypto.randomUUID(),
        solana_address: address,
      });
      expect(res.statusCode, `${what}: ${res.body}`).toBe(400);
      expect(res.json(), what).toMatchObject({ code: 'INVALID_DESTINATION', reason });
      expect(res.json().errors[0].path).toBe('body.solana_address');
    }
    expect(await wallets()).toBe(before);
  });

  it('still pays an address off the curve (a program-derived vault), which can own a token account', async () => {
    const [vault] = PublicKey.findProgramAddressSync(
      [Buffer.from('vault'), Keypair.generate().publicKey.toBuffer()],
      TOKEN_PROGRAM_ID,
    );
    const w = await h.fundedWallet('10', 'user');
    const res = await post(
      `/api/v1/wallet/${w.id}/withdraw`,
      { amount: '3', destination: vault.toBase58() },
      await h.holderHeaders(w),
    );
    expect(res.statusCode, res.body).toBe(200);
    expect(await chain.tokenBalance(vault.toBase58())).toBe('3');
  });
});
