/**
 * SPL Token flows through the running localnet with plain web3.js + spl-token:
 * mint, associated token accounts, transferChecked, balances, token balance
 * deltas in getTransaction, and failed transactions.
 */

import { getBase58Decoder } from '@solana/kit';
import {
  createAssociatedTokenAccountIdempotentInstruction,
  createTransferCheckedInstruction,
  getAccount,
  getAssociatedTokenAddressSync,
  getMint,
  getOrCreateAssociatedTokenAccount,
  mintTo,
  transferChecked,
} from '@solana/spl-token';
import {
  type Connection,
  Keypair,
  type PublicKey,
  sendAndConfirmTransaction,
  type TokenBalance,
  Transaction,
} from '@solana/web3.js';
import { beforeAll, describe, expect, it } from 'vitest';
import { connect, freshMint, fundedKeypair, rawRpc } from './helpers.ts';

let conn: Connection;
let authority: Keypair;
let mint: PublicKey;
let aliceAta: PublicKey;

beforeAll(async () => {
  conn = connect();
  authority = await fundedKeypair(conn);
  mint = await freshMint(conn, authority);
  aliceAta = (await getOrCreateAssociatedTokenAccount(conn, authority, mint, authority.publicKey)).address;
  await mintTo(conn, authority, mint, aliceAta, authority, 1_000_000_000n); // 1000 tokens
});

describe('mint and token accounts', () => {
  it('creates a mint with its decimals and supply', async () => {
    const info = await getMint(conn, mint);
    expect(info.decimals).toBe(6);
    expect(info.supply).toBe(1_000_000_000n);
    expect(info.mintAuthority?.toBase58()).toBe(authority.publicKey.toBase58());
    const supply = await conn.getTokenSupply(mint);
    expect(supply.value.uiAmountString).toBe('1000');
  });

  it('reports token balances through getTokenAccountBalance and jsonParsed accounts', async () => {
    const bal = await conn.getTokenAccountBalance(aliceAta);
    expect(bal.value).toMatchObject({ amount: '1000000000', decimals: 6, uiAmountString: '1000' });
    const parsed = await conn.getParsedAccountInfo(aliceAta);
    const data = parsed.value?.data as { program: string; parsed: { info: { owner: string; mint: string } } };
    expect(data.program).toBe('spl-token');
    expect(data.parsed.info).toMatchObject({ owner: authority.publicKey.toBase58(), mint: mint.toBase58() });
    const byOwner = await conn.getTokenAccountsByOwner(authority.publicKey, { mint });
    expect(byOwner.value.map((v) => v.pubkey.toBase58())).toEqual([aliceAta.toBase58()]);
  });

  it('rejects getTokenAccountBalance of an account that is not a token account', async () => {
    await expect(conn.getTokenAccountBalance(authority.publicKey)).rejects.toThrow(/not a token account/);
  });
});

describe('transferChecked', () => {
  it('moves tokens, creating the recipient ATA in the same transaction, with pre/post token balances', async () => {
    const bob = Keypair.generate();
    const bobAta = getAssociatedTokenAddressSync(mint, bob.publicKey);
    const tx = new Transaction().add(
      createAssociatedTokenAccountIdempotentInstruction(authority.publicKey, bobAta, bob.publicKey, mint),
      createTransferCheckedInstruction(aliceAta, mint, bobAta, authority.publicKey, 12_500_000n, 6),
    );
    const before = (await getAccount(conn, aliceAta)).amount;
    const sig = await sendAndConfirmTransaction(conn, tx, [authority], { commitment: 'confirmed' });
    expect((await getAccount(conn, bobAta)).amount).toBe(12_500_000n);
    expect((await getAccount(conn, aliceAta)).amount).toBe(before - 12_500_000n);

    const got = await conn.getTransaction(sig, { commitment: 'confirmed', maxSupportedTransactionVersion: 0 });
    expect(got?.meta?.err).toBeNull();
    expect(got?.slot).toBeGreaterThan(0);
    expect(got?.blockTime).toBeGreaterThan(1_600_000_000);
    const keys = got!.transaction.message.staticAccountKeys.map((k) => k.toBase58());
    const find = (list: TokenBalance[] | null | undefined, account: PublicKey) =>
      list?.find((b) => keys[b.accountIndex] === account.toBase58());
    // the new ATA did not exist before: only a post balance
    expect(find(got!.meta!.preTokenBalances, bobAta)).toBeUndefined();
    expect(find(got!.meta!.postTokenBalances, bobAta)).toMatchObject({
      mint: mint.toBase58(),
      owner: bob.publicKey.toBase58(),
      uiTokenAmount: { amount: '12500000', decimals: 6, uiAmountString: '12.5' },
    });
    const pre = find(got!.meta!.preTokenBalances, aliceAta)!;
    const post = find(got!.meta!.postTokenBalances, aliceAta)!;
    expect(BigInt(pre.uiTokenAmount.amount) - BigInt(post.uiTokenAmount.amount)).toBe(12_500_000n);
    expect(got!.meta!.fee).toBe(5000);
    expect(got!.meta!.logMessages).toContain('Program TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA success');

    const parsed = await conn.getParsedTransaction(sig, { commitment: 'confirmed', maxSupportedTransactionVersion: 0 });
    expect(parsed?.meta?.postTokenBalances?.length).toBe(2);
    expect(parsed?.transaction.message.accountKeys[0]?.signer).toBe(true);
  });

  it('works through the spl-token transferChecked helper (websocket confirmation)', async () => {
    const carol = Keypair.generate();
    const carolAta = await getOrCreateAssociatedTokenAccount(conn, authority, mint, carol.publicKey);
    await transferChecked(conn, authority, aliceAta, mint, carolAta.address, authority, 1n, 6);
    expect((await conn.getTokenAccountBalance(carolAta.address)).value.uiAmountString).toBe('0.000001');
  });
});

describe('failed transactions', () => {
  it('lands a failing transfer sent without preflight as failed: err in status and meta, fee charged, tokens kept', async () => {
    const dave = Keypair.generate();
    const daveAta = await getOrCreateAssociatedTokenAccount(conn, authority, mint, dave.publicKey);
    const tooMuch = (await getAccount(conn, aliceAta)).amount + 1n;
    const { blockhash, lastValidBlockHeight } = await conn.getLatestBlockhash();
    const tx = new Transaction({ feePayer: authority.publicKey, blockhash, lastValidBlockHeight }).add(
      createTransferCheckedInstruction(aliceAta, mint, daveAta.address, authority.publicKey, tooMuch, 6),
    );
    tx.sign(authority);
    const lamportsBefore = await conn.getBalance(authority.publicKey);
    const sig = await conn.sendRawTransaction(tx.serialize(), { skipPreflight: true });
    const conf = await conn.confirmTransaction({ signature: sig, blockhash, lastValidBlockHeight }, 'confirmed');
    expect(conf.value.err).toEqual({ InstructionError: [0, { Custom: 1 }] }); // spl-token InsufficientFunds

    const status = (await conn.getSignatureStatuses([sig])).value[0];
    expect(status?.err).toEqual({ InstructionError: [0, { Custom: 1 }] });
    const got = await conn.getTransaction(sig, { commitment: 'confirmed', maxSupportedTransactionVersion: 0 });
    expect(got?.meta?.err).toEqual({ InstructionError: [0, { Custom: 1 }] });
    expect(got?.meta?.preTokenBalances).toEqual(got?.meta?.postTokenBalances);
    expect(await conn.getBalance(authority.publicKey)).toBe(lamportsBefore - 5000);
    expect((await getAccount(conn, daveAta.address)).amount).toBe(0n);
  });

  it('refuses a failing transaction at preflight with its logs, and nothing lands', async () => {
    const tx = new Transaction().add(
      createTransferCheckedInstruction(aliceAta, mint, aliceAta, authority.publicKey, 10n ** 15n, 6),
    );
    const err = await sendAndConfirmTransaction(conn, tx, [authority]).catch((e: unknown) => e);
    expect(String(err)).toMatch(/Simulation failed|simulation failed/i);
    expect(String((err as { logs?: string[] }).logs)).toMatch(/insufficient funds/i);
    const sig = getBase58Decoder().decode(tx.signature!);
    expect((await conn.getSignatureStatuses([sig], { searchTransactionHistory: true })).value[0]).toBeNull();
  });

  it('refuses a wrongly signed transaction', async () => {
    const { blockhash } = await conn.getLatestBlockhash();
    const tx = new Transaction({ feePayer: authority.publicKey, recentBlockhash: blockhash }).add(
      createTransferCheckedInstruction(aliceAta, mint, aliceAta, authority.publicKey, 1n, 6),
    );
    tx.sign(authority);
    const wire = tx.serialize();
    wire[10] = (wire[10] ?? 0) ^ 0xff; // corrupt the signature
    const reply = await rawRpc('sendTransaction', [Buffer.from(wire).toString('base64'), { encoding: 'base64' }]);
    expect(reply.error?.code).toBe(-32003);
  });
});
