/**
 * The Solana chain adapter against the local chain (a real SVM running the
 * SPL Token program): deposit verification and every rejection, transfers out
 * of the treasury with ATA creation, idempotent re-sends, signature states and
 * expiry, token balances, and an unreachable RPC.
 */
import {
  createAccount,
  createTransferCheckedInstruction,
  getAccount,
  getAssociatedTokenAddressSync,
} from '@solana/spl-token';
import { Keypair, PublicKey, sendAndConfirmTransaction, Transaction } from '@solana/web3.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SolanaChain } from '../src/adapters/solana-chain.ts';
import { base58Encode } from '../src/domain/chain/base58.ts';
import { ChainRejection, ChainUnavailable, type DepositRejection } from '../src/domain/chain/chain.ts';
import {
  createSolanaFixture,
  localnetRpc,
  type SolanaFixture,
  startPrivateLocalnet,
} from './support/solana-fixture.ts';

const T = 1_000_000n; // base units per token (6 decimals)
let fx: SolanaFixture;
let chain: SolanaChain;

beforeAll(async () => {
  fx = await createSolanaFixture();
  chain = await SolanaChain.connect(fx.chainOptions());
});

async function rejection(p: Promise<unknown>): Promise<DepositRejection> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ChainRejection);
  return (err as ChainRejection).reason;
}

async function treasuryUnits(): Promise<bigint> {
  const ata = getAssociatedTokenAddressSync(fx.mint, fx.treasury.publicKey);
  return (await getAccount(fx.connection, ata, 'confirmed')).amount;
}

describe('connect', () => {
  it('reads the mint and the treasury key', async () => {
    expect(chain.decimals()).toBe(6);
    expect(chain.mintAddress()).toBe(fx.mint.toBase58());
    expect(chain.treasuryAddress()).toBe(fx.treasury.publicKey.toBase58());
    await expect(chain.ping()).resolves.toBeUndefined();
  });

  it('refuses a mint whose decimals differ from the configuration, or a key of another address', async () => {
    await expect(SolanaChain.connect(fx.chainOptions({ decimals: 9 }))).rejects.toThrow(/6 decimals, configured 9/);
    const other = Keypair.generate().publicKey.toBase58();
    await expect(SolanaChain.connect(fx.chainOptions({ treasuryAddress: other }))).rejects.toThrow(/not /);
  });

  it('answers ChainUnavailable when the RPC cannot be reached', async () => {
    await expect(SolanaChain.connect(fx.chainOptions({ rpcUrl: 'http://127.0.0.1:9' }))).rejects.toBeInstanceOf(
      ChainUnavailable,
    );
  });
});

describe('verifyDeposit', () => {
  it('verifies a deposit and credits post minus pre of the treasury account', async () => {
    const user = await fx.wallet(100n);
    const before = await treasuryUnits();
    const sig = await fx.transfer(user, fx.treasury.publicKey, 12n * T + T / 2n);
    const d = await chain.verifyDeposit(sig, user.publicKey.toBase58(), '12.5');
    expect(d).toMatchObject({ signature: sig, amount: '12.5', sourceOwner: user.publicKey.toBase58() });
    expect(d.slot).toBeGreaterThan(0);
    expect(d.blockTime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    expect(await treasuryUnits()).toBe(before + 12n * T + T / 2n);
  });

  it('sums several transfers into the treasury in one transaction', async () => {
    const user = await fx.wallet(100n);
    const second = await fx.transfer(user, fx.treasury.publicKey, 5n * T, {
      // a second transferChecked of 7.25 tokens in the same transaction
      extra: [
        createTransferCheckedInstruction(
          getAssociatedTokenAddressSync(fx.mint, user.publicKey),
          fx.mint,
          getAssociatedTokenAddressSync(fx.mint, fx.treasury.publicKey),
          user.publicKey,
          7_250_000n,
          6,
        ),
      ],
    });
    expect((await chain.verifyDeposit(second, user.publicKey.toBase58())).amount).toBe('12.25');
  });

  it('rejects an unknown or malformed signature as NOT_FOUND', async () => {
    const unknown = base58Encode(Keypair.generate().secretKey); // 64 random bytes
    expect(await rejection(chain.verifyDeposit(unknown, fx.treasury.publicKey.toBase58()))).toBe('NOT_FOUND');
    expect(await rejection(chain.verifyDeposit('not-a-signature', fx.treasury.publicKey.toBase58()))).toBe('NOT_FOUND');
  });

  it('rejects a failed transaction as FAILED', async () => {
    const user = await fx.wallet(1n);
    const sig = await fx.transfer(user, fx.treasury.publicKey, 5n * T, { skipPreflight: true });
    expect(await rejection(chain.verifyDeposit(sig, user.publicKey.toBase58()))).toBe('FAILED');
  });

  it('rejects tokens of another mint as WRONG_MINT', async () => {
    const other = await fx.otherMint();
    const user = await fx.wallet(50n, other);
    const sig = await fx.transfer(user, fx.treasury.publicKey, 10n * T, { mint: other });
    expect(await rejection(chain.verifyDeposit(sig, user.publicKey.toBase58()))).toBe('WRONG_MINT');
  });

  it('rejects platform tokens sent elsewhere as WRONG_RECIPIENT', async () => {
    const user = await fx.wallet(50n);
    const sig = await fx.transfer(user, Keypair.generate().publicKey, 10n * T);
    expect(await rejection(chain.verifyDeposit(sig, user.publicKey.toBase58()))).toBe('WRONG_RECIPIENT');
  });

  it("rejects tokens sent to another token account the treasury owns as WRONG_RECIPIENT: reserves read the treasury's own", async () => {
    const user = await fx.wallet(50n);
    // Anyone may open a token account of the mint owned by the treasury: no signature of the treasury's is needed.
    const stray = await createAccount(fx.connection, user, fx.mint, fx.treasury.publicKey, Keypair.generate());
    const source = getAssociatedTokenAddressSync(fx.mint, user.publicKey);
    const sig = await sendAndConfirmTransaction(
      fx.connection,
      new Transaction().add(createTransferCheckedInstruction(source, fx.mint, stray, user.publicKey, 10n * T, 6)),
      [user],
      { commitment: 'confirmed' },
    );
    expect(await rejection(chain.verifyDeposit(sig, user.publicKey.toBase58()))).toBe('WRONG_RECIPIENT');
  });

  it('rejects a deposit claimed by another wallet, or partly paid by another wallet, as WRONG_SOURCE', async () => {
    const payer = await fx.wallet(50n);
    const claimant = await fx.wallet(50n);
    const sig = await fx.transfer(payer, fx.treasury.publicKey, 10n * T);
    expect(await rejection(chain.verifyDeposit(sig, claimant.publicKey.toBase58()))).toBe('WRONG_SOURCE');
    expect((await chain.verifyDeposit(sig, payer.publicKey.toBase58())).amount).toBe('10');

    // claimant pays 10 and payer 5 into the treasury in one transaction: the claimant cannot claim 15
    const treasuryAta = getAssociatedTokenAddressSync(fx.mint, fx.treasury.publicKey);
    const payerAta = getAssociatedTokenAddressSync(fx.mint, payer.publicKey);
    const mixed = await fx.transfer(claimant, fx.treasury.publicKey, 10n * T, {
      extra: [createTransferCheckedInstruction(payerAta, fx.mint, treasuryAta, payer.publicKey, 5n * T, 6)],
      signers: [payer],
    });
    expect(await rejection(chain.verifyDeposit(mixed, claimant.publicKey.toBase58()))).toBe('WRONG_SOURCE');
  });

  it('rejects less than the claimed amount as AMOUNT_TOO_LOW', async () => {
    const user = await fx.wallet(50n);
    const sig = await fx.transfer(user, fx.treasury.publicKey, 10n * T);
    expect(await rejection(chain.verifyDeposit(sig, user.publicKey.toBase58(), '10.000001'))).toBe('AMOUNT_TOO_LOW');
    expect((await chain.verifyDeposit(sig, user.publicKey.toBase58(), '10')).amount).toBe('10');
  });

  it('rejects a confirmed but not yet finalized deposit as NOT_FINAL, and accepts it once final', async () => {
    const user = await fx.wallet(50n);
    await localnetRpc('localnet_setFinalityDelay', [{ address: user.publicKey.toBase58(), slots: 1_000_000 }]);
    const sig = await fx.transfer(user, fx.treasury.publicKey, 3n * T);
    expect(await rejection(chain.verifyDeposit(sig, user.publicKey.toBase58()))).toBe('NOT_FINAL');
    const atConfirmed = await SolanaChain.connect(fx.chainOptions({ commitment: 'confirmed' }));
    expect((await atConfirmed.verifyDeposit(sig, user.publicKey.toBase58())).amount).toBe('3');
    expect(await chain.signatureState(sig)).toEqual({ state: 'confirmed', expired: false });

    await localnetRpc('localnet_finalize', [sig]);
    expect((await chain.verifyDeposit(sig, user.publicKey.toBase58())).amount).toBe('3');
  });
});

describe('transfers out of the treasury', () => {
  it('creates the missing token account and transfers exactly once, however often it is re-sent', async () => {
    const dest = Keypair.generate().publicKey;
    expect(await chain.tokenBalance(dest.toBase58())).toBe('0');
    const before = await treasuryUnits();
    const prepared = await chain.prepareTransfer(dest.toBase58(), '7.654321');
    expect(await chain.signatureState(prepared.signature, prepared.lastValidBlockHeight)).toEqual({
      state: 'unknown',
      expired: false,
    });
    expect(await chain.sendAndConfirm(prepared)).toBe('finalized');
    expect(await chain.tokenBalance(dest.toBase58())).toBe('7.654321');

    expect(await chain.sendAndConfirm(prepared)).toBe('finalized');
    await fx.connection.sendRawTransaction(Buffer.from(prepared.serialized, 'base64'), { skipPreflight: true });
    expect(await chain.tokenBalance(dest.toBase58())).toBe('7.654321');
    expect(await treasuryUnits()).toBe(before - 7_654_321n);
    expect(await chain.signatureState(prepared.signature)).toEqual({ state: 'finalized', expired: false });
  });

  it('pays an owner that already has a token account, and keeps identical transfers distinct', async () => {
    const user = await fx.wallet(1n);
    const a = await chain.prepareTransfer(user.publicKey.toBase58(), '2');
    const b = await chain.prepareTransfer(user.publicKey.toBase58(), '2');
    expect(a.signature).not.toBe(b.signature);
    expect(await chain.sendAndConfirm(a)).toBe('finalized');
    expect(await chain.sendAndConfirm(b)).toBe('finalized');
    expect(await chain.tokenBalance(user.publicKey.toBase58())).toBe('5');
  });

  it('withholds the account fee only from a transfer that creates the account, and refuses one it would consume', async () => {
    const dest = Keypair.generate().publicKey.toBase58();
    const before = await treasuryUnits();
    await expect(chain.prepareTransfer(dest, '0.5', { accountFee: '0.5' })).rejects.toThrow(/no token account/);
    const first = await chain.prepareTransfer(dest, '2', { accountFee: '0.5' });
    expect(first).toMatchObject({ createsAccount: true, sent: '1.5' });
    expect(await chain.sendAndConfirm(first)).toBe('finalized');
    expect(await chain.tokenBalance(dest)).toBe('1.5');
    expect(await treasuryUnits()).toBe(before - 1_500_000n);
    const second = await chain.prepareTransfer(dest, '0.5', { accountFee: '0.5' });
    expect(second).toMatchObject({ createsAccount: false, sent: '0.5' });
    expect(await chain.sendAndConfirm(second)).toBe('finalized');
    expect(await chain.tokenBalance(dest)).toBe('2');
  });

  it('reports a transfer that fails on chain as failed, moving nothing', async () => {
    const dest = Keypair.generate().publicKey.toBase58();
    const before = await treasuryUnits();
    const prepared = await chain.prepareTransfer(dest, (before / T + 1n).toString());
    expect(await chain.sendAndConfirm(prepared)).toBe('failed');
    expect(await chain.signatureState(prepared.signature)).toEqual({ state: 'failed', expired: false });
    expect(await treasuryUnits()).toBe(before);
  });

  it('calls a failed transfer failed only once its failure is as final as the commitment', async () => {
    // A failure seen on a fork that is dropped could still land on another: until it is final it is in progress.
    const dest = Keypair.generate().publicKey.toBase58();
    await localnetRpc('localnet_setFinalityDelay', [{ address: dest, slots: 1_000_000 }]);
    const before = await treasuryUnits();
    const prepared = await chain.prepareTransfer(dest, (before / T + 1n).toString());
    await fx.connection.sendRawTransaction(Buffer.from(prepared.serialized, 'base64'), { skipPreflight: true });
    await expect.poll(async () => (await chain.signatureState(prepared.signature)).state).not.toBe('unknown');
    expect(await chain.signatureState(prepared.signature, prepared.lastValidBlockHeight)).toEqual({
      state: 'confirmed',
      expired: false,
    });
    expect(await chain.signatureStates([prepared.signature])).toEqual(['confirmed']);
    const atConfirmed = await SolanaChain.connect(fx.chainOptions({ commitment: 'confirmed' }));
    expect(await atConfirmed.signatureStates([prepared.signature])).toEqual(['failed']);
    await localnetRpc('localnet_finalize', [prepared.signature]);
    expect(await chain.signatureState(prepared.signature)).toEqual({ state: 'failed', expired: false });
    expect(await chain.sendAndConfirm(prepared)).toBe('failed');
    expect(await treasuryUnits()).toBe(before);
  });

  it('refuses bad amounts and addresses before touching the chain', async () => {
    const dest = Keypair.generate().publicKey.toBase58();
    await expect(chain.prepareTransfer(dest, '1.0000001')).rejects.toThrow(RangeError);
    await expect(chain.prepareTransfer(dest, '0')).rejects.toThrow(RangeError);
    await expect(chain.prepareTransfer(dest, '-1')).rejects.toThrow(RangeError);
    await expect(chain.prepareTransfer('nope', '1')).rejects.toThrow(TypeError);
  });

  it('reads token balances in whole tokens', async () => {
    const user = await fx.wallet(42n);
    expect(await chain.tokenBalance(user.publicKey.toBase58())).toBe('42');
    expect(await chain.tokenBalance(new PublicKey(Keypair.generate().publicKey).toBase58())).toBe('0');
  });
});

describe('signature states and expiry (private localnet)', () => {
  let net: Awaited<ReturnType<typeof startPrivateLocalnet>>;
  let pfx: SolanaFixture;
  let pchain: SolanaChain;
  beforeAll(async () => {
    net = await startPrivateLocalnet();
    pfx = await createSolanaFixture(net.rpcUrl);
    pchain = await SolanaChain.connect(pfx.chainOptions());
  });
  afterAll(async () => net?.stop());

  it('says unknown for a signature never seen, and expired once its blockhash can no longer land', async () => {
    const unknown = base58Encode(Keypair.generate().secretKey);
    expect(await pchain.signatureState(unknown)).toEqual({ state: 'unknown', expired: false });

    const dest = Keypair.generate().publicKey.toBase58();
    const prepared = await pchain.prepareTransfer(dest, '1');
    expect(await pchain.signatureState(prepared.signature, prepared.lastValidBlockHeight)).toEqual({
      state: 'unknown',
      expired: false,
    });
    await localnetRpc('localnet_warp', [151], net.rpcUrl);
    expect(await pchain.signatureState(prepared.signature, prepared.lastValidBlockHeight)).toEqual({
      state: 'unknown',
      expired: true,
    });
    // Unknown to a node behind the finalized slot the expiry was read at (one of several behind one address): not
    // expired, since that node may not have the transfer yet.
    const connection = pchain.connection;
    const statuses = connection.getSignatureStatuses.bind(connection);
    connection.getSignatureStatuses = async (...args) => {
      const res = await statuses(...args);
      return { ...res, context: { slot: res.context.slot - 200 } };
    };
    try {
      expect(await pchain.signatureState(prepared.signature, prepared.lastValidBlockHeight)).toEqual({
        state: 'unknown',
        expired: false,
      });
    } finally {
      connection.getSignatureStatuses = statuses;
    }
    // never sent before expiry: sending now cannot land it
    expect(await pchain.sendAndConfirm(prepared)).toBe('failed');
    expect(await pchain.tokenBalance(dest)).toBe('0');
  });
});
