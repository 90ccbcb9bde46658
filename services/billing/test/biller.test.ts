/** The background biller: silent daemons still pay, grace to termination, several instances at once. */
import { describe, expect, it } from 'vitest';
import { runBillingCycle } from '../src/domain/sessions/biller.ts';
import { H100_X1, manualClock, parties, start, startBody } from './support/sessions.ts';
import { useBillingHarness } from './support/setup.ts';

const clock = manualClock();
const h = useBillingHarness({ now: clock.now });

const session = (id: string) =>
  h.db.selectFrom('rental_sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

describe('the biller', () => {
  it('bills sessions without usage updates, through grace to termination', async () => {
    const p = await parties(h, '5.2');
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    clock.advance(30 * 60_000 + 59_000);
    await runBillingCycle(h.ctx);
    expect(await session(id)).toMatchObject({ status: 'active', billed_minutes: 30, total_cost: '2.550000' });

    clock.advance(30 * 60_000 + 1_000); // 61 min
    await runBillingCycle(h.ctx);
    const grace = await session(id);
    expect(grace).toMatchObject({ status: 'grace_period', billed_minutes: 61, total_cost: '5.185000' });

    clock.advance(4 * 60_000);
    await runBillingCycle(h.ctx);
    expect((await session(id)).status).toBe('grace_period');

    clock.advance(60_000); // grace over
    const cycle = await runBillingCycle(h.ctx);
    expect(cycle.terminated).toBe(1);
    expect(await session(id)).toMatchObject({
      status: 'terminated',
      end_reason: 'insufficient_funds',
      billed_minutes: 61,
      total_cost: '5.185000',
    });
    const record = await h.db
      .selectFrom('billing_records')
      .selectAll()
      .where('session_id', '=', id)
      .executeTakeFirstOrThrow();
    expect(record).toMatchObject({ status: 'terminated', total_cost: '5.185000', platform_fee: '0.259250' });
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '0.015000', locked: '0.000000' });
    expect(await h.balanceOf(p.provider.id)).toMatchObject({ available: '4.925750' });
    expect((await runBillingCycle(h.ctx)).billed).toBe(0);
  });

  it('bills every session exactly right with several instances running at once', async () => {
    const ids: string[] = [];
    const wallets: string[] = [];
    for (let i = 0; i < 20; i++) {
      const p = await parties(h, '20');
      ids.push((await start(h, startBody(p, H100_X1))).json().session.id);
      wallets.push(p.renter.id);
    }
    clock.advance(30 * 60_000);
    const results = await Promise.all([runBillingCycle(h.ctx), runBillingCycle(h.ctx), runBillingCycle(h.ctx)]);
    expect(results.reduce((n, r) => n + r.failed, 0)).toBe(0);
    expect(results.reduce((n, r) => n + r.billed, 0)).toBeGreaterThanOrEqual(20);
    for (const id of ids) expect(await session(id)).toMatchObject({ billed_minutes: 30, total_cost: '2.550000' });
    clock.advance(25 * 60_000); // 55 min: every hold is topped up once, by one instance
    await Promise.all([runBillingCycle(h.ctx), runBillingCycle(h.ctx)]);
    for (const w of wallets) {
      expect(await h.balanceOf(w)).toMatchObject({ available: '10.225000', locked: '9.775000' });
    }
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });
});
