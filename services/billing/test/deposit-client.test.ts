/**
 * A user's deposit with the client package's helper (`@gpu/client/solana`) and `pnpm wallet`, over HTTP against
 * billing and the real local chain: the public deposit instructions, proving the address with the keypair, the SPL
 * transferChecked to the treasury and the claim, credited exactly once however often it runs. Nothing is sent that
 * billing would not credit; a transfer sent but not credited (billing unreachable for the claim, through a proxy that
 * answers the claim itself) keeps its signature and is claimed later with `pnpm wallet claim`. A billing that lies
 * (the proxy rewriting its answers) gets neither a signature for another wallet nor tokens sent elsewhere.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { billingClient, staticToken, unwrap } from '@gpu/client';
import { claimDeposit, DepositClaimError, deposit, fromBaseUnits, proveAddress, toBaseUnits } from '@gpu/client/solana';
import { getAssociatedTokenAddressSync, TOKEN_PROGRAM_ID } from '@solana/spl-token';
import { Keypair } from '@solana/web3.js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type BillingProxy, startBillingProxy } from './support/billing-proxy.ts';
import { type Localnet, localnetRpc, setupLocalnet } from './support/localnet.ts';
import { type BillingHarness, setupBilling } from './support/setup.ts';
import { startPrivateLocalnet } from './support/solana-fixture.ts';

let L: Localnet;
let h: BillingHarness;
let baseUrl: string;
let middle: BillingProxy;
const dir = mkdtempSync(path.join(tmpdir(), 'deposit-client-'));

beforeAll(async () => {
  L = await setupLocalnet();
  h = await setupBilling({ chain: L.chain });
  baseUrl = await h.app.listen({ port: 0, host: '127.0.0.1' });
  middle = await startBillingProxy(baseUrl);
});
afterAll(async () => {
  await middle?.close();
  await h?.close();
  rmSync(dir, { recursive: true, force: true });
});
beforeEach(() => {
  middle.block = undefined;
  middle.rewrite = undefined;
  middle.seen.length = 0;
});

/** A renter with a wallet of the keypair's address (proven unless told), and their billing client (direct or not). */
async function renterWallet(keypair: Keypair, opts: { prove?: boolean; via?: string } = {}) {
  const user = await h.issuer.user(['renter']);
  const billing = billingClient({ baseUrl: opts.via ?? baseUrl, token: staticToken(user.token), retries: 0 });
  const opened = await billing.POST('/api/v1/wallet', {
    body: { owner_type: 'user', owner_id: user.id, solana_address: keypair.publicKey.toBase58() },
  });
  const walletId = unwrap(opened).id;
  if (opts.prove ?? true) await proveAddress(billing, walletId, keypair);
  return { user, billing, walletId };
}

/** Billing answering the deposit claims 503 itself, as when it cannot be reached for them. */
const blockClaims = (method: string, urlPath: string) =>
  method === 'POST' && urlPath.endsWith('/deposit')
    ? { status: 503, body: { status: 503, code: 'SERVICE_UNAVAILABLE', detail: 'billing is down' } }
    : undefined;

const tokens = (kp: Keypair) => L.chain.tokenBalance(kp.publicKey.toBase58());

/** `pnpm wallet ...` from the repository root, as the renter with `token`. */
function walletCli(args: string[], token: string) {
  const root = path.resolve(import.meta.dirname, '../../..');
  const { GPU_EMAIL: _e, GPU_PASSWORD: _p, ...env } = process.env;
  return promisify(execFile)('pnpm', ['--silent', 'wallet', ...args], {
    cwd: root,
    env: { ...env, GPU_TOKEN: token },
  }).then(
    (r) => ({ code: 0, ...r }),
    (e: { code: number; stdout: string; stderr: string }) => e,
  );
}

function keypairFile(kp: Keypair): string {
  const file = path.join(dir, `${kp.publicKey.toBase58()}.json`);
  writeFileSync(file, JSON.stringify(Array.from(kp.secretKey)));
  return file;
}

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
    // deposit() claims billing's form of the amount; claimDeposit sends the same for "12.5".
    const again = await billing.POST('/api/v1/wallet/{walletID}/deposit', {
      params: { path: { walletID: walletId }, header: { 'idempotency-key': `deposit:${done.signature}` } },
      body: { signature: done.signature, amount: '12.500000' },
    });
    expect(again.data?.id).toBe((done.transaction as { id: string }).id);
    const claimedAgain = await claimDeposit({ billing, walletId, signature: done.signature, amount: '12.5' });
    expect(claimedAgain.transaction.id).toBe(done.transaction.id);
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
    // What billing's amount rule refuses is refused before anything is sent.
    expect(() => toBaseUnits('0100', 6)).toThrow(/positive decimal number/);
    expect(() => toBaseUnits(' 7 ', 6)).toThrow(/positive decimal number/);
    expect(() => toBaseUnits('7.', 6)).toThrow(/positive decimal number/);
    expect(toBaseUnits('0.5', 6)).toBe(500_000n);
    expect(fromBaseUnits(100_000_000n, 6)).toBe('100.000000');
    expect(fromBaseUnits(1n, 6)).toBe('0.000001');
    expect(fromBaseUnits(7n, 0)).toBe('7');
  });

  it('sends nothing billing would not credit: a malformed amount, another address, an unproven wallet', async () => {
    const keypair = await L.user(100n);
    const { billing, walletId } = await renterWallet(keypair);
    const rpcUrl = L.conn.rpcEndpoint;

    for (const amount of ['0100', ' 7 ']) {
      await expect(deposit({ billing, rpcUrl, keypair, walletId, amount })).rejects.toThrow(/positive decimal number/);
    }
    expect(await tokens(keypair)).toBe('100');

    const stranger = await L.user(100n);
    await expect(deposit({ billing, rpcUrl, keypair: stranger, walletId, amount: '5' })).rejects.toThrow(
      /not the keypair's/,
    );
    expect(await tokens(stranger)).toBe('100');

    const unprovenKey = await L.user(100n);
    const unproven = await renterWallet(unprovenKey, { prove: false });
    await expect(
      deposit({ billing: unproven.billing, rpcUrl, keypair: unprovenKey, walletId: unproven.walletId, amount: '5' }),
    ).rejects.toThrow(/prove it first/);
    expect(await tokens(unprovenKey)).toBe('100');

    expect(await h.balanceOf(walletId)).toMatchObject({ available: '0.000000' });
    expect(await h.balanceOf(unproven.walletId)).toMatchObject({ available: '0.000000' });
  });

  it('keeps the signature of a transfer billing did not credit; claimDeposit credits it later, once', async () => {
    const keypair = await L.user(100n);
    const { billing, walletId } = await renterWallet(keypair, { via: middle.url });
    middle.block = blockClaims;
    const err = await deposit({ billing, rpcUrl: L.conn.rpcEndpoint, keypair, walletId, amount: '7.25' }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(DepositClaimError);
    const failed = err as DepositClaimError;
    expect(failed).toMatchObject({ walletId, amount: '7.250000' });
    expect(failed.signature).toMatch(/^[1-9A-HJ-NP-Za-km-z]{64,88}$/);
    expect(failed.message).toContain(`pnpm wallet claim --signature ${failed.signature} --amount 7.250000`);
    expect(failed.message).toMatch(/503 SERVICE_UNAVAILABLE/);
    expect(await tokens(keypair)).toBe('92.75');
    expect(await h.balanceOf(walletId)).toMatchObject({ available: '0.000000' });

    middle.block = undefined;
    const claimed = await claimDeposit({ billing, walletId, signature: failed.signature, amount: failed.amount });
    expect(claimed.transaction).toMatchObject({ amount: '7.250000', status: 'confirmed' });
    expect(await h.balanceOf(walletId)).toMatchObject({ available: '7.250000' });
    const again = await claimDeposit({ billing, walletId, signature: failed.signature, amount: '7.25' });
    expect(again.transaction.id).toBe(claimed.transaction.id);
    await expect(claimDeposit({ billing, walletId, signature: failed.signature })).rejects.toThrow(
      /claimed before with an amount: claim it with the same amount/,
    );
    expect(await h.balanceOf(walletId)).toMatchObject({ available: '7.250000' });
  });

  it('does not sign an address challenge that names another wallet', async () => {
    const keypair = await L.user(0n);
    const victim = await renterWallet(keypair, { prove: false, via: middle.url });
    // Someone else's wallet declaring the same address: a signature of its challenge would prove it for them.
    const other = await renterWallet(keypair, { prove: false });
    const theirs = unwrap(
      await other.billing.POST('/api/v1/wallet/{walletID}/address-challenge', {
        params: { path: { walletID: other.walletId } },
      }),
    );
    middle.rewrite = (method, urlPath, body) =>
      method === 'POST' && urlPath.endsWith('/address-challenge')
        ? { ...(body as object), message: theirs.message }
        : body;
    await expect(proveAddress(victim.billing, victim.walletId, keypair)).rejects.toThrow(/refusing to sign/);
    expect(middle.seen.filter((r) => r.path.endsWith('/address-proof'))).toEqual([]);

    middle.rewrite = undefined;
    await proveAddress(victim.billing, victim.walletId, keypair);
    const proven = unwrap(
      await victim.billing.GET('/api/v1/wallet/{walletID}', { params: { path: { walletID: victim.walletId } } }),
    );
    expect(proven.address_proven_at).not.toBeNull();
  });

  it("sends nothing to a token account billing names that is not the treasury's", async () => {
    const keypair = await L.user(100n);
    const { billing, walletId } = await renterWallet(keypair, { via: middle.url });
    const thief = await L.user(0n);
    middle.rewrite = (_method, urlPath, body) =>
      urlPath.endsWith('/deposits/instructions')
        ? {
            ...(body as object),
            treasury_token_account: getAssociatedTokenAddressSync(L.mint, thief.publicKey).toBase58(),
          }
        : body;
    await expect(deposit({ billing, rpcUrl: L.conn.rpcEndpoint, keypair, walletId, amount: '5' })).rejects.toThrow(
      /not the treasury's associated token account/,
    );
    middle.rewrite = (_method, urlPath, body) =>
      urlPath.endsWith('/deposits/instructions')
        ? { ...(body as object), token_program: Keypair.generate().publicKey.toBase58() }
        : body;
    await expect(deposit({ billing, rpcUrl: L.conn.rpcEndpoint, keypair, walletId, amount: '5' })).rejects.toThrow(
      /not an SPL token program/,
    );
    expect(await tokens(keypair)).toBe('100');
    expect(await tokens(thief)).toBe('0');
  });
});

describe('pnpm wallet claim', () => {
  it('pnpm wallet deposit prints the signature and the claim line; that line credits the transfer, once', async () => {
    const keypair = await L.user(100n);
    const { user, walletId } = await renterWallet(keypair);
    middle.block = blockClaims;
    const sent = await walletCli(
      [
        'deposit',
        '--keypair',
        keypairFile(keypair),
        '--amount',
        '3',
        '--wallet',
        walletId,
        '--url',
        middle.url,
        '--rpc',
        L.conn.rpcEndpoint,
      ],
      user.token,
    );
    expect(sent.code).toBe(1);
    // One line, as any failure: the signature, and the command that claims it later (gpu's, which pnpm wallet runs
    // too).
    expect(sent.stderr.trim().split('\n')).toHaveLength(1);
    const signature = /\(signature (\S+)\)/.exec(sent.stderr)?.[1];
    expect(signature).toBeDefined();
    const line = /claim them with gpu (wallet deposit [^)]*)\)$/m.exec(sent.stderr)?.[1];
    expect(line).toBe(
      `wallet deposit ${walletId} --signature ${signature} --amount 3.000000 --url ${middle.url.replace(/\/$/, '')}`,
    );
    expect(await tokens(keypair)).toBe('97');
    expect(await h.balanceOf(walletId)).toMatchObject({ available: '0.000000' });

    middle.block = undefined;
    const claimed = await walletCli(line!.split(' ').slice(1), user.token);
    expect(claimed).toMatchObject({ code: 0 });
    const first = JSON.parse(claimed.stdout);
    expect(first).toMatchObject({ signature, type: 'deposit', amount: '3.000000', status: 'confirmed' });
    expect(await h.balanceOf(walletId)).toMatchObject({ available: '3.000000' });

    // Again, with the keypair naming the wallet and the amount as typed: the same deposit, nothing more.
    const again = await walletCli(
      ['claim', '--signature', signature!, '--amount', '3', '--keypair', keypairFile(keypair), '--url', baseUrl],
      user.token,
    );
    expect(again).toMatchObject({ code: 0 });
    expect(JSON.parse(again.stdout).id).toBe(first.id);
    expect(await h.balanceOf(walletId)).toMatchObject({ available: '3.000000' });
  });

  it('says what it needs', async () => {
    const user = await h.issuer.user(['renter']);
    const res = await walletCli(['claim', '--wallet', crypto.randomUUID(), '--url', baseUrl], user.token);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/claim needs --signature SIG/);
  });
});

describe('a deposit the chain does not confirm in time (a private localnet, so its clock can be moved)', () => {
  let net: Awaited<ReturnType<typeof startPrivateLocalnet>>;
  let P: Localnet;
  let ph: BillingHarness;
  let privateUrl: string;
  beforeAll(async () => {
    net = await startPrivateLocalnet();
    P = await setupLocalnet(6, net.rpcUrl);
    ph = await setupBilling({ chain: P.chain });
    privateUrl = await ph.app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => {
    await ph?.close();
    await net?.stop();
  });

  it('keeps the signature of a transfer sent but not confirmed in time; claimed once it lands, once', async () => {
    const keypair = await P.user(100n);
    const user = await ph.issuer.user(['renter']);
    const billing = billingClient({ baseUrl: privateUrl, token: staticToken(user.token), retries: 0 });
    const walletId = unwrap(
      await billing.POST('/api/v1/wallet', {
        body: { owner_type: 'user', owner_id: user.id, solana_address: keypair.publicKey.toBase58() },
      }),
    ).id;
    await proveAddress(billing, walletId, keypair);
    // The chain processes the keypair's transfers but holds back their finality (billing's commitment).
    await localnetRpc(
      'localnet_setFinalityDelay',
      [{ slots: 1_000_000, address: keypair.publicKey.toBase58() }],
      net.rpcUrl,
    );
    const pending = deposit({ billing, rpcUrl: net.rpcUrl, keypair, walletId, amount: '3' }).catch((e: unknown) => e);
    const ata = getAssociatedTokenAddressSync(P.mint, keypair.publicKey);
    while ((await P.conn.getTokenAccountBalance(ata, 'confirmed')).value.uiAmountString !== '97') {
      await new Promise((r) => setTimeout(r, 100));
    }
    // Time passes on the chain until the transfer's blockhash has expired: the wait for finality gives up.
    await localnetRpc('localnet_warp', [400], net.rpcUrl);
    const err = await pending;
    expect(err).toBeInstanceOf(DepositClaimError);
    const late = err as DepositClaimError;
    expect(late).toMatchObject({ walletId, amount: '3.000000', stage: 'confirm' });
    expect(late.message).toContain('the chain did not confirm the transfer in time');
    expect(late.message).toContain(`pnpm wallet claim --signature ${late.signature} --amount 3.000000`);
    expect(await ph.balanceOf(walletId)).toMatchObject({ available: '0.000000' });

    // It lands after all: the signature it kept claims it, once.
    await localnetRpc('localnet_finalize', [late.signature], net.rpcUrl);
    const claimed = await claimDeposit({ billing, walletId, signature: late.signature, amount: late.amount });
    expect(claimed.transaction).toMatchObject({ amount: '3.000000', status: 'confirmed' });
    const again = await claimDeposit({ billing, walletId, signature: late.signature, amount: late.amount });
    expect(again.transaction.id).toBe(claimed.transaction.id);
    expect(await ph.balanceOf(walletId)).toMatchObject({ available: '3.000000' });
  });
});
