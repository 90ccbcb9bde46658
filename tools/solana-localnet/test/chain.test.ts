/**
 * Validator behaviour of the localnet: duplicate sends, blockhash expiry,
 * commitment levels and finality holds, airdrops, the RPC envelope, saved
 * state across restarts, and the setup script.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { getAccount } from '@solana/spl-token';
import { type Connection, Keypair, LAMPORTS_PER_SOL, PublicKey, SystemProgram, Transaction } from '@solana/web3.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalnet } from '../src/server.ts';
import { devKeypair, readKeypair, runSetup } from '../src/setup.ts';
import { connect, fundedKeypair, rawRpc, rpcUrl } from './helpers.ts';

let conn: Connection;
let payer: Keypair;

beforeAll(async () => {
  conn = connect();
  payer = await fundedKeypair(conn);
});

async function signedTransfer(lamports: number) {
  const { blockhash } = await conn.getLatestBlockhash();
  const tx = new Transaction({ feePayer: payer.publicKey, recentBlockhash: blockhash }).add(
    SystemProgram.transfer({ fromPubkey: payer.publicKey, toPubkey: Keypair.generate().publicKey, lamports }),
  );
  tx.sign(payer);
  return tx.serialize();
}

describe('RPC basics', () => {
  it('answers health, version, slot, block height, epoch info and genesis hash', async () => {
    expect((await rawRpc('getHealth')).result).toBe('ok');
    expect((await conn.getVersion())['solana-core']).toMatch(/^\d+\.\d+\.\d+/);
    const slot = await conn.getSlot();
    expect(slot).toBeGreaterThan(0);
    expect(await conn.getBlockHeight()).toBeGreaterThanOrEqual(slot);
    expect((await conn.getEpochInfo()).absoluteSlot).toBeGreaterThanOrEqual(slot);
    expect(await conn.getGenesisHash()).toMatch(/^[1-9A-HJ-NP-Za-km-z]{32,44}$/);
    const { lastValidBlockHeight } = await conn.getLatestBlockhash();
    expect(lastValidBlockHeight).toBeGreaterThanOrEqual(slot + 150);
  });

  it('answers JSON-RPC errors for unknown methods, bad params and bad JSON, and serves batches', async () => {
    expect((await rawRpc('noSuchMethod')).error?.code).toBe(-32601);
    expect((await rawRpc('getBalance', ['not-an-address'])).error?.code).toBe(-32602);
    const bad = await fetch(rpcUrl(), { method: 'POST', body: '{nope' });
    expect(((await bad.json()) as { error: { code: number } }).error.code).toBe(-32700);
    const batch = await fetch(rpcUrl(), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify([
        { jsonrpc: '2.0', id: 1, method: 'getSlot' },
        { jsonrpc: '2.0', id: 2, method: 'getHealth' },
      ]),
    });
    const replies = (await batch.json()) as { id: number; result: unknown }[];
    expect(replies.map((r) => r.id)).toEqual([1, 2]);
    expect(replies[1]?.result).toBe('ok');
  });

  it('airdrops lamports in a real transaction and reports rent and fees', async () => {
    const kp = Keypair.generate();
    const sig = await conn.requestAirdrop(kp.publicKey, 2 * LAMPORTS_PER_SOL);
    const status = (await conn.getSignatureStatuses([sig])).value[0];
    expect(status?.err).toBeNull();
    expect(await conn.getBalance(kp.publicKey)).toBe(2 * LAMPORTS_PER_SOL);
    expect(await conn.getMinimumBalanceForRentExemption(165)).toBe(2_039_280);
    const { blockhash } = await conn.getLatestBlockhash();
    const msg = new Transaction({ feePayer: kp.publicKey, recentBlockhash: blockhash })
      .add(SystemProgram.transfer({ fromPubkey: kp.publicKey, toPubkey: payer.publicKey, lamports: 1 }))
      .compileMessage();
    expect((await conn.getFeeForMessage(msg)).value).toBe(5000);
  });
});

describe('duplicates and expiry', () => {
  it('executes a transaction once however often it is sent', async () => {
    const wire = await signedTransfer(1_000_000);
    const before = await conn.getBalance(payer.publicKey);
    const sig = await conn.sendRawTransaction(wire);
    const again = await conn.sendRawTransaction(wire, { skipPreflight: true });
    expect(again).toBe(sig);
    const refused = await conn.sendRawTransaction(wire).catch((e: Error) => e);
    expect(String(refused)).toMatch(/already been processed/);
    expect(await conn.getBalance(payer.publicKey)).toBe(before - 1_000_000 - 5000);
  });

  it('refuses an expired blockhash at preflight and drops it without preflight', async () => {
    // a private chain: warping the shared one would expire other test files' blockhashes
    const net = await startLocalnet({ port: 0, wsPort: 0, slotMs: 0 });
    try {
      const c = connect(net.rpcUrl);
      const kp = Keypair.generate();
      const airdrop = await c.requestAirdrop(kp.publicKey, LAMPORTS_PER_SOL);
      expect((await c.getSignatureStatuses([airdrop])).value[0]?.err).toBeNull();
      const { blockhash } = await c.getLatestBlockhash();
      const tx = new Transaction({ feePayer: kp.publicKey, recentBlockhash: blockhash }).add(
        SystemProgram.transfer({ fromPubkey: kp.publicKey, toPubkey: payer.publicKey, lamports: 1234 }),
      );
      tx.sign(kp);
      const wire = tx.serialize();
      expect((await rawRpc('isBlockhashValid', [blockhash], net.rpcUrl)).result).toMatchObject({ value: true });
      await rawRpc('localnet_warp', [150], net.rpcUrl);
      expect((await rawRpc('isBlockhashValid', [blockhash], net.rpcUrl)).result).toMatchObject({ value: true });
      await rawRpc('localnet_warp', [1], net.rpcUrl);
      expect((await rawRpc('isBlockhashValid', [blockhash], net.rpcUrl)).result).toMatchObject({ value: false });
      expect(String(await c.sendRawTransaction(wire).catch((e: Error) => e))).toMatch(/Blockhash not found/);
      const sig = await c.sendRawTransaction(wire, { skipPreflight: true });
      expect((await c.getSignatureStatuses([sig], { searchTransactionHistory: true })).value[0]).toBeNull();
      expect(await c.getBalance(kp.publicKey)).toBe(LAMPORTS_PER_SOL);
    } finally {
      await net.close();
    }
  });
});

describe('commitment and finality holds', () => {
  it('keeps transactions of a held address confirmed, not finalized, until finalized', async () => {
    const held = await fundedKeypair(conn);
    await rawRpc('localnet_setFinalityDelay', [{ address: held.publicKey.toBase58(), slots: 1_000_000 }]);
    const { blockhash } = await conn.getLatestBlockhash();
    const tx = new Transaction({ feePayer: held.publicKey, recentBlockhash: blockhash }).add(
      SystemProgram.transfer({ fromPubkey: held.publicKey, toPubkey: payer.publicKey, lamports: 5 }),
    );
    tx.sign(held);
    const sig = await conn.sendRawTransaction(tx.serialize());
    const status = (await conn.getSignatureStatuses([sig])).value[0];
    expect(status?.confirmationStatus).toBe('confirmed');
    expect(status?.confirmations).toBeGreaterThanOrEqual(1);
    const opts = { maxSupportedTransactionVersion: 0 } as const;
    expect(await conn.getTransaction(sig, { ...opts, commitment: 'finalized' })).toBeNull();
    expect(await conn.getTransaction(sig, { ...opts, commitment: 'confirmed' })).not.toBeNull();

    expect((await rawRpc('localnet_finalize', [sig])).result).toEqual({ finalized: 1 });
    expect((await conn.getSignatureStatuses([sig])).value[0]?.confirmationStatus).toBe('finalized');
    expect(await conn.getTransaction(sig, { ...opts, commitment: 'finalized' })).not.toBeNull();
    await rawRpc('localnet_setFinalityDelay', [{ address: held.publicKey.toBase58(), slots: 0 }]);
  });

  it('finalizes after the global finality delay as slots pass', async () => {
    const net = await startLocalnet({ port: 0, wsPort: 0, slotMs: 0, finalityDelaySlots: 5 });
    try {
      const c = connect(net.rpcUrl);
      const sig = await c.requestAirdrop(Keypair.generate().publicKey, LAMPORTS_PER_SOL);
      expect((await c.getSignatureStatuses([sig])).value[0]?.confirmationStatus).toBe('confirmed');
      await rawRpc('localnet_warp', [4], net.rpcUrl);
      expect((await c.getSignatureStatuses([sig])).value[0]?.confirmationStatus).toBe('confirmed');
      await rawRpc('localnet_warp', [1], net.rpcUrl);
      expect((await c.getSignatureStatuses([sig])).value[0]?.confirmationStatus).toBe('finalized');
    } finally {
      await net.close();
    }
  });
});

describe('saved state and setup', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'localnet-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('sets up mint, treasury and wallets idempotently, and keeps them across a restart with --state', async () => {
    const stateFile = join(dir, 'chain.json');
    let net = await startLocalnet({ port: 0, slotMs: 50, stateFile });
    const first = await runSetup({ rpcUrl: net.rpcUrl, wsUrl: net.wsUrl, dir, wallets: 2, randomKeys: true });
    const second = await runSetup({ rpcUrl: net.rpcUrl, wsUrl: net.wsUrl, dir, wallets: 2, randomKeys: true });
    expect(second).toEqual(first);
    let c = connect(net.rpcUrl);
    const mintFile = JSON.parse(readFileSync(join(dir, 'mint.json'), 'utf8'));
    expect(mintFile).toMatchObject({ mint: first.mint, decimals: 6, treasury: first.treasury });
    expect(readKeypair(join(dir, 'treasury-keypair.json')).publicKey.toBase58()).toBe(first.treasury);
    const w = first.wallets[0]!;
    expect((await getAccount(c, new PublicKey(w.tokenAccount))).amount).toBe(10_000_000_000n); // not minted twice
    const sig = (await c.getSignaturesForAddress(new PublicKey(w.address), { limit: 1 }, 'confirmed'))[0]?.signature;
    expect(sig).toBeDefined();
    await net.close();

    net = await startLocalnet({ port: 0, slotMs: 50, stateFile });
    try {
      c = connect(net.rpcUrl);
      expect((await c.getTokenAccountBalance(new PublicKey(first.treasuryTokenAccount))).value.uiAmountString).toBe(
        '1000000',
      );
      expect(
        await c.getTransaction(sig!, { commitment: 'confirmed', maxSupportedTransactionVersion: 0 }),
      ).not.toBeNull();
    } finally {
      await net.close();
    }
  });

  it('derives the same development keys everywhere unless asked for random ones', () => {
    expect(devKeypair('mint').publicKey.toBase58()).toBe(devKeypair('mint').publicKey.toBase58());
    expect(devKeypair('mint', true).publicKey.toBase58()).not.toBe(devKeypair('mint').publicKey.toBase58());
  });
});
