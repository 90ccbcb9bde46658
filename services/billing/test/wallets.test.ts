import { Keypair } from '@solana/web3.js';
import { describe, expect, it } from 'vitest';
import { createHold } from '../src/domain/ledger/holds.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import { useBillingHarness } from './support/setup.ts';

const h = useBillingHarness();

const address = () => Keypair.generate().publicKey.toBase58();

describe('POST /api/v1/wallet', () => {
  it('creates one wallet per owner and type, with zero balances', async () => {
    const owner = crypto.randomUUID();
    const res = await h.app.inject({
      method: 'POST',
      url: '/api/v1/wallet',
      payload: { owner_type: 'user', owner_id: owner, solana_address: address() },
    });
    expect(res.statusCode).toBe(201);
    const wallet = res.json();
    expect(wallet).toMatchObject({ owner_type: 'user', owner_id: owner });
    expect(wallet.created_at).toMatch(/Z$/);

    const dup = await h.app.inject({
      method: 'POST',
      url: '/api/v1/wallet',
      payload: { owner_type: 'user', owner_id: owner, solana_address: address() },
    });
    expect(dup.statusCode).toBe(409);
    expect(dup.json()).toMatchObject({ code: 'WALLET_ALREADY_EXISTS', wallet_id: wallet.id });

    const provider = await h.app.inject({
      method: 'POST',
      url: '/api/v1/wallet',
      payload: { owner_type: 'provider', owner_id: owner, solana_address: address() },
    });
    expect(provider.statusCode).toBe(201);

    const balance = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${wallet.id}/balance` });
    expect(balance.statusCode).toBe(200);
    expect(balance.json()).toEqual({
      wallet_id: wallet.id,
      total: '0.000000',
      available: '0.000000',
      locked: '0.000000',
      pending: '0.000000',
      decimals: 6,
    });
  });

  it('answers bad input with 400 problem bodies naming the fields', async () => {
    const res = await h.app.inject({
      method: 'POST',
      url: '/api/v1/wallet',
      payload: { owner_type: 'admin', owner_id: 'nope', solana_address: '0OIl' + 'x'.repeat(40) },
    });
    expect(res.statusCode).toBe(400);
    expect(res.headers['content-type']).toContain('application/problem+json');
    const paths = res
      .json()
      .errors.map((e: { path: string }) => e.path)
      .sort();
    expect(paths).toEqual(['body.owner_id', 'body.owner_type', 'body.solana_address']);
    // 31 bytes of base58: valid alphabet, wrong length
    const short = await h.app.inject({
      method: 'POST',
      url: '/api/v1/wallet',
      payload: { owner_type: 'user', owner_id: crypto.randomUUID(), solana_address: '1111111111111111111111111111111' },
    });
    expect(short.statusCode).toBe(400);
  });

  it('answers 404 WALLET_NOT_FOUND for unknown wallets and 400 for malformed IDs', async () => {
    const missing = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${crypto.randomUUID()}/balance` });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().code).toBe('WALLET_NOT_FOUND');
    const bad = await h.app.inject({ method: 'GET', url: '/api/v1/wallet/not-a-uuid/balance' });
    expect(bad.statusCode).toBe(400);
  });
});

describe('service surface', () => {
  it('reports health with the database check and documents every route', async () => {
    const health = await h.app.inject({ method: 'GET', url: '/health' });
    expect(health.statusCode).toBe(200);
    expect(health.json()).toMatchObject({
      status: 'UP',
      service: 'billing-service',
      checks: { database: { status: 'UP' } },
    });
    const doc = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    for (const path of [
      '/api/v1/wallet',
      '/api/v1/wallet/{walletID}/balance',
      '/api/v1/wallet/{walletID}/deposit',
      '/api/v1/wallet/{walletID}/withdraw',
      '/api/v1/wallet/{walletID}/transactions',
      '/api/v1/provider/{providerID}/earnings',
      '/api/v1/provider/{providerID}/payout',
    ]) {
      expect(Object.keys(doc.paths)).toContain(path);
    }
    expect(Object.keys(doc.paths['/api/v1/wallet/{walletID}/withdraw'].post.responses).sort()).toEqual(
      // 401 and 403: every billing route needs an access token; 413, 415 and 500: the platform's own answers to
      // any JSON body; 429: the wallet's withdrawals of the hour made.
      ['200', '202', '400', '401', '402', '403', '404', '409', '413', '415', '429', '500', '502', '503'].sort(),
    );
  });
});

describe('GET /api/v1/wallet/{id}/transactions', () => {
  it('pages newest first without gaps or repeats and filters by type, status and time', async () => {
    const w = await h.fundedWallet('100');
    const holds = [];
    for (let i = 1; i <= 7; i++) {
      holds.push(
        await h.db.transaction().execute((trx) => createHold(trx, w.id, new Dec(i), null, { now: new Date() })),
      );
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const url: string = `/api/v1/wallet/${w.id}/transactions?limit=3${cursor ? `&cursor=${cursor}` : ''}`;
      const res = await h.app.inject({ method: 'GET', url });
      expect(res.statusCode).toBe(200);
      seen.push(...res.json().map((t: { amount: string }) => t.amount));
      cursor = (res.headers['x-next-cursor'] as string | undefined) ?? null;
      pages++;
    } while (cursor);
    expect(pages).toBe(3);
    expect(seen).toEqual(['7.000000', '6.000000', '5.000000', '4.000000', '3.000000', '2.000000', '1.000000']);

    const locks = await h.app.inject({
      method: 'GET',
      url: `/api/v1/wallet/${w.id}/transactions?type=lock&status=confirmed`,
    });
    expect(locks.json()).toHaveLength(7);
    const none = await h.app.inject({
      method: 'GET',
      url: `/api/v1/wallet/${w.id}/transactions?type=deposit,withdrawal`,
    });
    expect(none.json()).toHaveLength(0);
    const future = new Date(Date.now() + 60_000).toISOString();
    const later = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${w.id}/transactions?from=${future}` });
    expect(later.json()).toHaveLength(0);
    const before = await h.app.inject({
      method: 'GET',
      url: `/api/v1/wallet/${w.id}/transactions?to=${future}&limit=1000`,
    });
    expect(before.json()).toHaveLength(7);
    const tx = before.json()[0];
    expect(tx).toMatchObject({ type: 'lock', status: 'confirmed', fee: '0.000000', hold_id: holds[6]!.id });

    const badType = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${w.id}/transactions?type=gift` });
    expect(badType.statusCode).toBe(400);
    const badCursor = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${w.id}/transactions?cursor=abc` });
    expect(badCursor.statusCode).toBe(400);
  });

  it('follows the one paging contract: an array, X-Next-Cursor and a Link to the next page; INVALID_CURSOR', async () => {
    const w = await h.fundedWallet('100');
    for (let i = 1; i <= 3; i++)
      await h.db.transaction().execute((trx) => createHold(trx, w.id, new Dec(i), null, { now: new Date() }));
    const first = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${w.id}/transactions?limit=2&type=lock` });
    expect(first.json()).toHaveLength(2);
    const next = first.headers['x-next-cursor'] as string;
    expect(next).toBeTruthy();
    expect(first.headers.link).toBe(
      `</api/v1/wallet/${w.id}/transactions?limit=2&type=lock&cursor=${next}>; rel="next"`,
    );
    const last = await h.app.inject({
      method: 'GET',
      url: `/api/v1/wallet/${w.id}/transactions?limit=2&type=lock&cursor=${next}`,
    });
    expect(last.json()).toHaveLength(1);
    expect(last.headers['x-next-cursor']).toBeUndefined();
    expect(last.headers.link).toBeUndefined();
    const bad = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${w.id}/transactions?cursor=abc` });
    expect(bad.json()).toMatchObject({ code: 'INVALID_CURSOR', errors: [{ path: 'querystring.cursor' }] });
  });
});

describe('GET /api/v1/wallet', () => {
  it("lists the caller's own wallets, oldest first, page by page; nobody else's", async () => {
    const user = await h.issuer.user(['renter', 'provider']);
    const stranger = await h.issuer.user(['renter']);
    const own = await h.fundedWallet('0', 'user', undefined, { ownerId: user.id });
    const machines = [];
    for (let i = 0; i < 2; i++) machines.push(await h.fundedWallet('0', 'provider', undefined, { holderId: user.id }));
    await h.fundedWallet('0', 'user', undefined, { ownerId: stranger.id });

    const first = await h.app.inject({ method: 'GET', url: '/api/v1/wallet?limit=2', headers: user.headers });
    expect(first.statusCode, first.body).toBe(200);
    expect(first.json().map((w: { id: string }) => w.id)).toEqual([own.id, machines[0]!.id]);
    expect(first.json()[0]).toMatchObject({ owner_type: 'user', owner_id: user.id, holder_id: user.id });
    const next = first.headers['x-next-cursor'] as string;
    expect(next).toBeTruthy();
    const last = await h.app.inject({
      method: 'GET',
      url: `/api/v1/wallet?limit=2&cursor=${next}`,
      headers: user.headers,
    });
    expect(last.json()).toMatchObject([{ id: machines[1]!.id, owner_type: 'provider', holder_id: user.id }]);
    expect(last.headers['x-next-cursor']).toBeUndefined();

    const theirs = await h.app.inject({ method: 'GET', url: '/api/v1/wallet', headers: stranger.headers });
    expect(theirs.json()).toHaveLength(1);
    expect(theirs.json()[0].owner_id).toBe(stranger.id);
    const bad = await h.app.inject({ method: 'GET', url: '/api/v1/wallet?cursor=abc', headers: user.headers });
    expect(bad.json()).toMatchObject({ code: 'INVALID_CURSOR' });
  });
});
