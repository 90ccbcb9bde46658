/** Deposits against the real local chain: verification, crediting once, every rejection, idempotency. */
import { lockWaiters } from '@gpu/common/testing';
import { Keypair } from '@solana/web3.js';
import { describe, expect, it } from 'vitest';
import { base58Encode } from '../src/domain/chain/base58.ts';
import { createWallet, type Wallet } from '../src/domain/wallets/wallets.ts';
import { type Localnet, localnetRpc, setupLocalnet } from './support/localnet.ts';
import { setupBilling, signMessage, useBillingHarness } from './support/setup.ts';

let L: Localnet;
const h = useBillingHarness(async () => {
  L = await setupLocalnet();
  return { chain: L.chain };
});

/** A wallet of the keypair's address, proven by its holder (deposits need a proven address). */
async function walletFor(kp: Keypair): Promise<Wallet> {
  const wallet = await createWallet(h.db, {
    ownerType: 'user',
    ownerId: crypto.randomUUID(),
    solanaAddress: kp.publicKey.toBase58(),
  });
  await h.proveAddress(wallet.id, kp);
  return wallet;
}

const deposit = (walletId: string, payload: object, headers: Record<string, string> = {}) =>
  h.app.inject({ method: 'POST', url: `/api/v1/wallet/${walletId}/deposit`, payload, headers });

describe('proving a wallet address before deposits', () => {
  it("credits nothing to a wallet that declared someone else's address: it cannot prove it", async () => {
    const victim = await L.user(100n);
    const attacker = Keypair.generate();
    // The attacker registers the victim's address and tries to claim the victim's deposit first.
    const stolen = await createWallet(h.db, {
      ownerType: 'user',
      ownerId: crypto.randomUUID(),
      solanaAddress: victim.publicKey.toBase58(),
    });
    const signature = await L.transfer(victim, L.treasury.publicKey, 3n * L.unit);
    const early = await deposit(stolen.id, { signature });
    expect(early.statusCode).toBe(409);
    expect(early.json().code).toBe('ADDRESS_NOT_PROVEN');
    // A signature by any other key does not prove the address.
    const challenge = await h.app.inject({ method: 'POST', url: `/api/v1/wallet/${stolen.id}/address-challenge` });
    expect(challenge.statusCode).toBe(201);
    expect(challenge.json().message).toContain(victim.publicKey.toBase58());
    const forged = await h.app.inject({
      method: 'POST',
      url: `/api/v1/wallet/${stolen.id}/address-proof`,
      payload: { signature: signMessage(attacker, challenge.json().message) },
    });
    expect(forged.statusCode).toBe(422);
    expect(forged.json().code).toBe('ADDRESS_PROOF_INVALID');
    expect((await deposit(stolen.id, { signature })).statusCode).toBe(409);

    // The victim proves their own wallet and is credited.
    const own = await walletFor(victim);
    expect((await deposit(own.id, { signature })).statusCode).toBe(201);
    expect(await h.balanceOf(stolen.id)).toMatchObject({ available: '0.000000' });
    // Claimed again from the attacker's wallet: refused, without naming the victim's wallet or record.
    const again = await deposit(stolen.id, { signature });
    expect(again.statusCode).toBe(409);
    // (the attacker's address is not proven: that refusal comes first)
    expect(again.json().code).toBe('ADDRESS_NOT_PROVEN');

    // Even a victim tricked into signing the attacker's challenge does not prove the address for the attacker: it
    // is proven by the victim's own wallet already.
    const lure = await h.app.inject({ method: 'POST', url: `/api/v1/wallet/${stolen.id}/address-challenge` });
    const tricked = await h.app.inject({
      method: 'POST',
      url: `/api/v1/wallet/${stolen.id}/address-proof`,
      payload: { signature: signMessage(victim, lure.json().message) },
    });
    expect(tricked.statusCode).toBe(409);
    expect(tricked.json().code).toBe('ADDRESS_PROVEN_ELSEWHERE');
  });

  it('lets one holder prove an address when two prove it at once: the other is refused', async () => {
    const kp = Keypair.generate();
    const wallets = await Promise.all(
      [0, 1].map(() =>
        createWallet(h.db, { ownerType: 'user', ownerId: crypto.randomUUID(), solanaAddress: kp.publicKey.toBase58() }),
      ),
    );
    const signed = await Promise.all(
      wallets.map(async (w) => {
        const c = await h.app.inject({ method: 'POST', url: `/api/v1/wallet/${w.id}/address-challenge` });
        expect(c.statusCode, c.body).toBe(201);
        return { id: w.id, signature: signMessage(kp, c.json().message) };
      }),
    );
    // Both wallets' rows held until both proofs wait (each checked its signature; one waits to mark its wallet, the
    // other for the address): then they go together.
    let answers: Promise<{ statusCode: number; body: string; json: () => { code: string } }>[] = [];
    await h.db.transaction().execute(async (trx) => {
      await trx
        .selectFrom('wallets')
        .select('id')
        .where(
          'id',
          'in',
          signed.map((w) => w.id),
        )
        .forUpdate()
        .execute();
      answers = signed.map((w) =>
        h.app.inject({
          method: 'POST',
          url: `/api/v1/wallet/${w.id}/address-proof`,
          payload: { signature: w.signature },
        }),
      );
      await lockWaiters(h.db, 2);
    });
    const done = await Promise.all(answers);
    expect(done.map((a) => a.statusCode).sort(), done.map((a) => a.body).join('\n')).toEqual([200, 409]);
    expect(done.find((a) => a.statusCode === 409)!.json().code).toBe('ADDRESS_PROVEN_ELSEWHERE');
  });

  it('uses a challenge once, refuses a signature of another message, and keeps a proof', async () => {
    const kp = Keypair.generate();
    const wallet = await createWallet(h.db, {
      ownerType: 'user',
      ownerId: crypto.randomUUID(),
      solanaAddress: kp.publicKey.toBase58(),
    });
    const prove = (signature: string) =>
      h.app.inject({ method: 'POST', url: `/api/v1/wallet/${wallet.id}/address-proof`, payload: { signature } });
    const none = await prove(signMessage(kp, 'anything'));
    expect(none.statusCode).toBe(409);
    expect(none.json().code).toBe('NO_ADDRESS_CHALLENGE');
    const first = (await h.app.inject({ method: 'POST', url: `/api/v1/wallet/${wallet.id}/address-challenge` })).json();
    const second = (
      await h.app.inject({ method: 'POST', url: `/api/v1/wallet/${wallet.id}/address-challenge` })
    ).json();
    expect(second.message).not.toBe(first.message);
    // The older challenge was replaced.
    expect((await prove(signMessage(kp, first.message))).statusCode).toBe(422);
    expect((await prove('1'.repeat(64))).statusCode).toBe(422);
    const ok = await prove(signMessage(kp, second.message));
    expect(ok.statusCode).toBe(200);
    expect(ok.json().address_proven_at).toEqual(expect.any(String));
    const wallet2 = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${wallet.id}` });
    expect(wallet2.json().address_proven_at).toBe(ok.json().address_proven_at);
    // Proven stays proven; a malformed signature is a 400.
    expect((await prove(signMessage(kp, second.message))).statusCode).toBe(200);
    expect((await prove('not base58 0OIl')).statusCode).toBe(400);
  });
});

describe('POST /api/v1/wallet/{id}/deposit', () => {
  it('credits exactly the verified amount, once, and records a confirmed deposit with an event', async () => {
    const kp = await L.user(100n);
    const wallet = await walletFor(kp);
    const signature = await L.transfer(kp, L.treasury.publicKey, 25_500_001n); // 25.500001 tokens
    const res = await deposit(wallet.id, { signature });
    expect(res.statusCode).toBe(201);
    expect(res.json()).toMatchObject({
      wallet_id: wallet.id,
      type: 'deposit',
      status: 'confirmed',
      amount: '25.500001',
      fee: '0.000000',
      signature,
    });
    expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '25.500001', total: '25.500001' });

    const again = await deposit(wallet.id, { signature });
    expect(again.statusCode).toBe(409);
    expect(again.json()).toMatchObject({ code: 'DEPOSIT_ALREADY_CREDITED', transaction_id: res.json().id });
    // Another proven wallet claiming it learns nothing of the wallet it went to.
    const other = await walletFor(await L.user(0n));
    const elsewhere = await deposit(other.id, { signature });
    expect(elsewhere.statusCode).toBe(409);
    expect(elsewhere.json().code).toBe('DEPOSIT_ALREADY_CREDITED');
    expect(elsewhere.json().transaction_id).toBeUndefined();
    expect(elsewhere.json().wallet_id).toBeUndefined();
    expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '25.500001' });

    const events = await h.db.selectFrom('outbox_events').selectAll().where('kind', '=', 'deposit.confirmed').execute();
    expect(
      events.some((e) => (e.payload as { transaction: { signature: string } }).transaction.signature === signature),
    ).toBe(true);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('credits a signature once when claimed in parallel by two wallets of the same address', async () => {
    const kp = await L.user(50n);
    const a = await walletFor(kp);
    // One user's user wallet and provider wallet may share (and both prove) an address.
    const b = await createWallet(h.db, {
      ownerType: 'provider',
      ownerId: crypto.randomUUID(),
      holderId: a.ownerId,
      solanaAddress: kp.publicKey.toBase58(),
    });
    await h.proveAddress(b.id, kp);
    const signature = await L.transfer(kp, L.treasury.publicKey, 7n * L.unit);
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) => deposit(i % 2 ? a.id : b.id, { signature })),
    );
    const codes = answers.map((r) => r.statusCode).sort();
    expect(codes.filter((c) => c === 201)).toHaveLength(1);
    expect(codes.filter((c) => c === 409)).toHaveLength(11);
    for (const r of answers.filter((x) => x.statusCode === 409)) expect(r.json().code).toBe('DEPOSIT_ALREADY_CREDITED');
    const [ba, bb] = [await h.balanceOf(a.id), await h.balanceOf(b.id)];
    expect(Number(ba.available) + Number(bb.available)).toBe(7);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('refuses unknown, failed, wrong-mint, wrong-recipient, wrong-source, too-small and not-final transactions', async () => {
    const kp = await L.user(100n);
    const wallet = await walletFor(kp);
    const expectRejected = async (payload: object, status: number, code: string) => {
      const res = await deposit(wallet.id, payload);
      expect(res.statusCode, `${code}: ${res.body}`).toBe(status);
      expect(res.headers['content-type']).toContain('application/problem+json');
      expect(res.json().code).toBe(code);
    };

    await expectRejected(
      { signature: base58Encode(crypto.getRandomValues(new Uint8Array(64))) },
      404,
      'DEPOSIT_TRANSACTION_NOT_FOUND',
    );

    const failed = await L.transfer(kp, L.treasury.publicKey, 1_000n * L.unit, { skipPreflight: true });
    await expectRejected({ signature: failed }, 422, 'DEPOSIT_TRANSACTION_FAILED');

    const otherMint = await L.otherMint();
    const holder = await L.user(10n, otherMint);
    const holderWallet = await walletFor(holder);
    const wrongMint = await L.transfer(holder, L.treasury.publicKey, L.unit, { tokenMint: otherMint });
    const res = await deposit(holderWallet.id, { signature: wrongMint });
    expect(res.statusCode).toBe(422);
    expect(res.json().code).toBe('DEPOSIT_WRONG_MINT');

    const friend = await L.user(0n);
    const wrongRecipient = await L.transfer(kp, friend.publicKey, L.unit);
    await expectRejected({ signature: wrongRecipient }, 422, 'DEPOSIT_WRONG_RECIPIENT');

    const stranger = await L.user(10n);
    const wrongSource = await L.transfer(stranger, L.treasury.publicKey, L.unit);
    await expectRejected({ signature: wrongSource }, 422, 'DEPOSIT_WRONG_SOURCE');

    const small = await L.transfer(kp, L.treasury.publicKey, 2n * L.unit);
    await expectRejected({ signature: small, amount: '2.000001' }, 422, 'DEPOSIT_AMOUNT_TOO_LOW');
    await expectRejected({ signature: small, amount: '2.0000001' }, 400, 'VALIDATION_ERROR');

    await localnetRpc('localnet_setFinalityDelay', [{ slots: 1_000_000, address: kp.publicKey.toBase58() }]);
    const slow = await L.transfer(kp, L.treasury.publicKey, 3n * L.unit, { waitFor: 'confirmed' });
    const notFinal = await deposit(wallet.id, { signature: slow });
    expect(notFinal.statusCode).toBe(409);
    expect(notFinal.json().code).toBe('DEPOSIT_NOT_FINAL');
    expect(notFinal.headers['retry-after']).toBeDefined();
    expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '0.000000' });

    // Once final, the same signature is credited (nothing was recorded by the refusals).
    await localnetRpc('localnet_finalize', [slow]);
    const later = await deposit(wallet.id, { signature: slow });
    expect(later.statusCode).toBe(201);
    expect(later.json().amount).toBe('3.000000');
    // The small transfer can still be claimed without an amount, or with one it meets.
    expect((await deposit(wallet.id, { signature: small, amount: '2' })).statusCode).toBe(201);
    expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '5.000000' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('replays the first answer for a repeated Idempotency-Key and refuses the key with other parameters', async () => {
    const kp = await L.user(20n);
    const wallet = await walletFor(kp);
    const signature = await L.transfer(kp, L.treasury.publicKey, 4n * L.unit);
    const key = crypto.randomUUID();
    const first = await deposit(wallet.id, { signature }, { 'idempotency-key': key });
    expect(first.statusCode).toBe(201);
    const replay = await deposit(wallet.id, { signature }, { 'idempotency-key': key });
    expect(replay.statusCode).toBe(201);
    expect(replay.json()).toEqual(first.json());
    expect(replay.headers['idempotent-replayed']).toBe('true');
    const other = await deposit(wallet.id, { signature, amount: '4' }, { 'idempotency-key': key });
    expect(other.statusCode).toBe(409);
    expect(other.json().code).toBe('IDEMPOTENCY_KEY_REUSED');
    // A definitive refusal is replayed too: a key used for an unknown wallet keeps answering 404.
    const missingKey = crypto.randomUUID();
    const ghost = crypto.randomUUID();
    expect((await deposit(ghost, { signature }, { 'idempotency-key': missingKey })).statusCode).toBe(404);
    const ghostReplay = await deposit(ghost, { signature }, { 'idempotency-key': missingKey });
    expect(ghostReplay.statusCode).toBe(404);
    expect(ghostReplay.headers['idempotent-replayed']).toBe('true');
    expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '4.000000' });
  });

  it('answers 503 SOLANA_UNAVAILABLE when the chain cannot be reached, crediting nothing', async () => {
    const { app, close, proveAddress } = await setupBillingWithDeadChain();
    try {
      const kp = Keypair.generate();
      const created = await app.inject({
        method: 'POST',
        url: '/api/v1/wallet',
        payload: { owner_type: 'user', owner_id: crypto.randomUUID(), solana_address: kp.publicKey.toBase58() },
      });
      await proveAddress(created.json().id, kp);
      const res = await app.inject({
        method: 'POST',
        url: `/api/v1/wallet/${created.json().id}/deposit`,
        payload: { signature: base58Encode(crypto.getRandomValues(new Uint8Array(64))) },
      });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toMatchObject({ code: 'SOLANA_UNAVAILABLE', dependency: 'solana' });
    } finally {
      await close();
    }
  });
});

/** The billing app over a chain adapter whose RPC node went away (a real TCP proxy, then closed). */
async function setupBillingWithDeadChain() {
  const { createServer, connect } = await import('node:net');
  const target = new URL(L.conn.rpcEndpoint);
  const sockets = new Set<import('node:net').Socket>();
  const proxy = createServer((client) => {
    const upstream = connect(Number(target.port), target.hostname);
    sockets.add(client).add(upstream);
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  const port = (proxy.address() as { port: number }).port;
  const { SolanaChain } = await import('../src/adapters/solana-chain.ts');
  const chain = await SolanaChain.connect({
    rpcUrl: `http://127.0.0.1:${port}`,
    mint: L.mint.toBase58(),
    treasuryKeypair: L.treasury,
    requestTimeoutMs: 2000,
  });
  await new Promise<void>((r) => {
    proxy.close(() => r());
    for (const s of sockets) s.destroy();
  });
  const harness = await setupBilling({ chain });
  return harness;
}
