/**
 * Stored bytes, billed (issue #28): the storage service's report of a user's bytes over a period is charged once,
 * exactly (GB-hours × the platform rate, one rounding), from the user's available balance to the platform's revenue,
 * never more than the balance holds; repeats (retries, other storage instances, concurrent reports) charge nothing
 * again, overlapping periods are refused, only platform services report, and a user reads their own charges. Against
 * real PostgreSQL, the ledger checked after each.
 */
import { uninjected } from '@gpu/common/testing';
import { describe, expect, it } from 'vitest';
import { SYSTEM_ACCOUNT_IDS } from '../src/db/system-accounts.ts';
import { Dec as Decimal } from '../src/domain/ledger/money.ts';
import { useBillingHarness } from './support/setup.ts';

const h = useBillingHarness();
const GIB = 2 ** 30;

/** An hour of storage, starting `hoursAgo` hours before a fixed moment (periods in the past, on hour boundaries). */
function hour(hoursAgo: number) {
  const end = Date.UTC(2026, 10, 1) - hoursAgo * 3_600_000;
  return { period_start: new Date(end - 3_600_000).toISOString(), period_end: new Date(end).toISOString() };
}

const report = (payload: unknown, headers?: Record<string, string>) =>
  h.app.inject({ method: 'POST', url: '/api/v1/billing/storage-usage', payload: payload as object, headers });

async function platformRevenue() {
  const row = await h.db
    .selectFrom('ledger_accounts')
    .select('balance')
    .where('id', '=', SYSTEM_ACCOUNT_IDS.platform_fees)
    .executeTakeFirstOrThrow();
  return row.balance;
}

describe('storage charges', () => {
  it("charge a period's GB-hours at the platform rate from the user's balance, to the platform's revenue", async () => {
    const user = crypto.randomUUID();
    const wallet = await h.fundedWallet('10', 'user', undefined, { ownerId: user });
    const before = await platformRevenue();
    // 5 GiB for an hour at 0.0001 per GB-hour (the default rate): 0.0005.
    const res = await report({ user_id: user, ...hour(1), bytes: 5 * GIB });
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json()).toMatchObject({
      user_id: user,
      wallet_id: wallet.id,
      bytes: 5 * GIB,
      gb_hours: '5',
      rate_per_gb_hour: '0.000100',
      cost: '0.000500',
      charged: '0.000500',
      unpaid: '0.000000',
    });
    expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '9.999500', locked: '0.000000' });
    expect(Number(await platformRevenue()) - Number(before)).toBeCloseTo(0.0005, 9);
    // The payment is in the wallet's history.
    const history = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${wallet.id}/transactions` });
    const payment = history.json().find((t: { id: string }) => t.id === res.json().transaction_id);
    expect(payment).toMatchObject({ type: 'payment', status: 'confirmed', amount: '0.000500' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('round once, half-even, from the exact GB-hours (a third of an hour of 3 GiB is exactly one GB-hour)', async () => {
    const user = crypto.randomUUID();
    await h.fundedWallet('1', 'user', undefined, { ownerId: user });
    const end = Date.UTC(2026, 9, 1);
    const twentyMinutes = {
      period_start: new Date(end - 20 * 60_000).toISOString(),
      period_end: new Date(end).toISOString(),
    };
    const exact = (await report({ user_id: user, ...twentyMinutes, bytes: 3 * GIB })).json();
    expect(exact).toMatchObject({ gb_hours: '1', cost: '0.000100' });
    // 1 MiB for an hour: 0.0000000976… rounds to 0: recorded, nothing moved.
    const tiny = (await report({ user_id: user, ...hour(30), bytes: 1 << 20 })).json();
    expect(tiny).toMatchObject({
      gb_hours: '0.0009765625',
      cost: '0.000000',
      charged: '0.000000',
      transaction_id: null,
    });
  });

  it('charge a period once, whatever repeats it, concurrent reports included', async () => {
    const user = crypto.randomUUID();
    const wallet = await h.fundedWallet('1', 'user', undefined, { ownerId: user });
    const period = hour(2);
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) => report({ user_id: user, ...period, bytes: 10 * GIB + i })),
    );
    const statuses = answers.map((r) => r.statusCode).sort();
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200, 201]);
    expect(new Set(answers.map((r) => r.json().id)).size).toBe(1);
    expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '0.999000' });
    const rows = await h.db.selectFrom('storage_charges').select('id').where('user_id', '=', user).execute();
    expect(rows).toHaveLength(1);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('refuse a period overlapping one charged, and write nothing', async () => {
    const user = crypto.randomUUID();
    const wallet = await h.fundedWallet('1', 'user', undefined, { ownerId: user });
    expect((await report({ user_id: user, ...hour(3), bytes: GIB })).statusCode).toBe(201);
    const { period_start } = hour(3);
    const shifted = {
      period_start: new Date(Date.parse(period_start) + 30 * 60_000).toISOString(),
      period_end: new Date(Date.parse(period_start) + 90 * 60_000).toISOString(),
    };
    const res = await report({ user_id: user, ...shifted, bytes: GIB });
    expect(res.statusCode).toBe(409);
    expect(res.json().code).toBe('STORAGE_PERIOD_OVERLAPS');
    expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '0.999900' });
    // The next hour, adjacent, is its own period.
    expect((await report({ user_id: user, ...hour(2), bytes: GIB })).statusCode).toBe(201);
  });

  it('refuse overlapping periods sent at once, the user ID spelt in either case: one charged', async () => {
    for (let round = 0; round < 3; round++) {
      const user = crypto.randomUUID();
      const wallet = await h.fundedWallet('1', 'user', undefined, { ownerId: user });
      const { period_start } = hour(5);
      const later = {
        period_start: new Date(Date.parse(period_start) + 30 * 60_000).toISOString(),
        period_end: new Date(Date.parse(period_start) + 90 * 60_000).toISOString(),
      };
      const answers = await Promise.all([
        report({ user_id: user, ...hour(5), bytes: GIB }),
        report({ user_id: user.toUpperCase(), ...later, bytes: GIB }),
      ]);
      expect(answers.map((r) => r.statusCode).sort()).toEqual([201, 409]);
      expect(answers.find((r) => r.statusCode === 201)!.json().user_id).toBe(user);
      expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '0.999900' });
    }
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('take no more than the available balance (the rest unpaid), and all unpaid from a user without a wallet', async () => {
    const user = crypto.randomUUID();
    const wallet = await h.fundedWallet('0.0002', 'user', undefined, { ownerId: user });
    const short = (await report({ user_id: user, ...hour(1), bytes: 5 * GIB })).json();
    expect(short).toMatchObject({ cost: '0.000500', charged: '0.000200', unpaid: '0.000300' });
    expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '0.000000' });
    const broke = (await report({ user_id: user, ...hour(0), bytes: 5 * GIB })).json();
    expect(broke).toMatchObject({ charged: '0.000000', unpaid: '0.000500', transaction_id: null });

    const nobody = (await report({ user_id: crypto.randomUUID(), ...hour(1), bytes: GIB })).json();
    expect(nobody).toMatchObject({ wallet_id: null, cost: '0.000100', charged: '0.000000', unpaid: '0.000100' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('collect what earlier periods left unpaid, oldest first, before the new cost, in one payment', async () => {
    const user = crypto.randomUUID();
    const wallet = await h.fundedWallet('0', 'user', undefined, { ownerId: user });
    const first = (await report({ user_id: user, ...hour(3), bytes: 5 * GIB })).json();
    const second = (await report({ user_id: user, ...hour(2), bytes: 3 * GIB })).json();
    expect([first.unpaid, second.unpaid]).toEqual(['0.000500', '0.000300']);
    const revenue = await platformRevenue();

    // Enough for the oldest debt and part of the next: nothing of the new period's cost.
    await h.credit(wallet.id, '0.0006');
    const third = (await report({ user_id: user, ...hour(1), bytes: GIB })).json();
    expect(third).toMatchObject({ cost: '0.000100', charged: '0.000000', unpaid: '0.000100' });
    const payment = (await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${wallet.id}/transactions` }))
      .json()
      .find((t: { id: string }) => t.id === third.transaction_id);
    expect(payment).toMatchObject({ type: 'payment', amount: '0.000600' });
    const charges = async () =>
      Object.fromEntries(
        (
          await h.db
            .selectFrom('storage_charges')
            .select(['id', 'charged', 'unpaid'])
            .where('user_id', '=', user)
            .execute()
        ).map((c) => [c.id, [new Decimal(c.charged).toFixed(6), new Decimal(c.unpaid).toFixed(6)]]),
      );
    expect(await charges()).toEqual({
      [first.id]: ['0.000500', '0.000000'],
      [second.id]: ['0.000100', '0.000200'],
      [third.id]: ['0.000000', '0.000100'],
    });
    expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '0.000000' });
    expect(new Decimal(await platformRevenue()).minus(revenue).toFixed(6)).toBe('0.000600');

    // Funds for everything: the rest of the debt and the new period, and a repeat of a period collects nothing more.
    await h.credit(wallet.id, '1');
    const fourth = (await report({ user_id: user, ...hour(0), bytes: GIB })).json();
    expect(fourth).toMatchObject({ charged: '0.000100', unpaid: '0.000000' });
    expect((await report({ user_id: user, ...hour(0), bytes: GIB })).statusCode).toBe(200);
    expect(Object.values(await charges()).map(([, unpaid]) => unpaid)).toEqual(Array(4).fill('0.000000'));
    expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '0.999600' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('refuse malformed reports with the field named, a 400 problem, nothing written', async () => {
    const user = crypto.randomUUID();
    const bad: [string, unknown][] = [
      ['bytes', { user_id: user, ...hour(1), bytes: -1 }],
      ['bytes', { user_id: user, ...hour(1), bytes: 1.5 }],
      ['bytes', { user_id: user, ...hour(1), bytes: '5' }],
      ['user_id', { user_id: 'me', ...hour(1), bytes: 1 }],
      ['period_end', { user_id: user, period_start: hour(1).period_end, period_end: hour(1).period_start, bytes: 1 }],
      ['period_end', { user_id: user, period_start: hour(30).period_start, period_end: hour(1).period_end, bytes: 1 }],
      [
        'period_start',
        { user_id: user, period_start: '0000-01-01T00:00:00Z', period_end: hour(1).period_end, bytes: 1 },
      ],
    ];
    // A period that has not ended yet cannot have been measured: refused, whoever reports it.
    const later = Date.now() + 3_600_000;
    bad.push([
      'period_end',
      {
        user_id: user,
        period_start: new Date(later - 3_600_000).toISOString(),
        period_end: new Date(later).toISOString(),
        bytes: 1,
      },
    ]);
    for (const [field, payload] of bad) {
      const res = await report(payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(JSON.stringify(res.json().errors), JSON.stringify(payload)).toContain(field);
    }
    expect(await h.db.selectFrom('storage_charges').select('id').where('user_id', '=', user).execute()).toEqual([]);
  });

  it('are reported by platform services only, and read by their user (and the privileged), page by page', async () => {
    const call = uninjected(h.app);
    const renter = await h.issuer.user(['renter']);
    const other = await h.issuer.user(['renter']);
    const service = await h.issuer.client('service');
    const daemon = await h.issuer.client('daemon', renter.id);
    await h.fundedWallet('1', 'user', undefined, { ownerId: renter.id });
    const body = (hoursAgo: number) => ({ user_id: renter.id, ...hour(hoursAgo), bytes: GIB });
    // A user (or their daemon) cannot bill anyone's storage, their own included.
    for (const who of [renter, daemon]) {
      const res = await call({
        method: 'POST',
        url: '/api/v1/billing/storage-usage',
        headers: who.headers,
        payload: body(5),
      });
      expect(res.statusCode).toBe(403);
    }
    for (const hoursAgo of [5, 4, 3]) {
      const res = await call({
        method: 'POST',
        url: '/api/v1/billing/storage-usage',
        headers: service.headers,
        payload: body(hoursAgo),
      });
      expect(res.statusCode).toBe(201);
    }
    const list = (headers: Record<string, string>, query = '') =>
      call({ method: 'GET', url: `/api/v1/billing/storage-usage?${query}`, headers });
    const first = await list(renter.headers, 'limit=2');
    expect(first.statusCode).toBe(200);
    expect(first.json().map((c: { period_start: string }) => c.period_start)).toEqual([
      hour(3).period_start,
      hour(4).period_start,
    ]);
    const next = first.headers['x-next-cursor'] as string;
    expect(next).toBeTruthy();
    const second = await list(renter.headers, `limit=2&cursor=${encodeURIComponent(next)}`);
    expect(second.json()).toMatchObject([{ period_start: hour(5).period_start }]);
    expect(second.headers['x-next-cursor']).toBeUndefined();
    // Another user sees none of it, and may not ask for it.
    expect((await list(other.headers)).json()).toEqual([]);
    expect((await list(other.headers, `user_id=${renter.id}`)).statusCode).toBe(403);
    expect((await list(daemon.headers)).statusCode).toBe(403);
    // The privileged read anyone's.
    expect((await list(service.headers, `user_id=${renter.id}`)).json()).toHaveLength(3);
  });
});
