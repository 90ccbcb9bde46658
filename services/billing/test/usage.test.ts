/** Usage updates over HTTP: records, per-minute billing, duplicates, out-of-order, hold top-ups, grace, termination. */
import { describe, expect, it } from 'vitest';
import { end, H100_X1, manualClock, parties, start, startBody, usage } from './support/sessions.ts';
import { useBillingHarness } from './support/setup.ts';

const clock = manualClock();
const h = useBillingHarness({ now: clock.now });

const update = (body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  h.app.inject({ method: 'POST', url: '/api/v1/billing/usage-update', payload: body, headers });

const report = (sessionId: string, extra: Record<string, unknown> = {}) => ({
  session_id: sessionId,
  timestamp: clock.now().toISOString(),
  gpu_utilization: 87.5,
  power_draw_w: 280.5,
  ...extra,
});

const outboxKinds = async (sessionId: string) =>
  (await h.db.selectFrom('outbox_events').select(['kind', 'payload']).orderBy('created_at').execute())
    .filter((e) => JSON.stringify(e.payload).includes(sessionId))
    .map((e) => e.kind);

describe('POST /api/v1/billing/usage-update', () => {
  it('bills full minutes once per message, in any order', async () => {
    const p = await parties(h, '10');
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    clock.advance(150_000); // 2 min 30 s
    const first = await update(report(id, { message_id: 'm-1', metrics: { temperature_c: 71 } }));
    expect(first.statusCode).toBe(201);
    expect(first.json()).toMatchObject({
      duplicate: false,
      usage: { message_id: 'm-1', billed_minutes: 2, cost: '0.170000', metrics: { temperature_c: 71 } },
      session: { billed_minutes: 2, total_cost: '0.170000', actual_power_w: '280.5' },
    });
    const sentAt = first.json().usage.timestamp;

    const dup = await update(report(id, { message_id: 'm-1', power_draw_w: 999 }));
    expect(dup.statusCode).toBe(200);
    expect(dup.json().duplicate).toBe(true);
    expect(dup.json().usage.id).toBe(first.json().usage.id);
    expect(dup.json().session.actual_power_w).toBe('280.5');

    clock.advance(60_000); // 3 min 30 s; a late report measured before the previous one
    const late = await update(
      report(id, {
        message_id: 'm-0',
        timestamp: new Date(Date.parse(sentAt) - 30_000).toISOString(),
        power_draw_w: 100,
      }),
    );
    expect(late.statusCode).toBe(201);
    expect(late.json()).toMatchObject({
      usage: { billed_minutes: 3, cost: '0.085000', power_draw_w: 100 },
      session: { billed_minutes: 3, total_cost: '0.255000', actual_power_w: '280.5' },
    });

    // The Idempotency-Key header names the message when the body has no message_id.
    const keyed = await update(report(id, { power_draw_w: 300 }), { 'idempotency-key': 'k-1' });
    const keyedAgain = await update(report(id, { power_draw_w: 300 }), { 'idempotency-key': 'k-1' });
    expect([keyed.statusCode, keyedAgain.statusCode]).toEqual([201, 200]);
    expect(keyed.json()).toMatchObject({
      usage: { message_id: 'k-1', cost: '0.000000' },
      session: { actual_power_w: '300' },
    });
    const records = await h.db.selectFrom('usage_records').select('id').where('session_id', '=', id).execute();
    expect(records).toHaveLength(3);

    // End: 3.5 min → 4 started minutes = 0.34.
    const ended = (await end(h, id)).json();
    expect(ended.billing_record).toMatchObject({ billed_minutes: 4, total_cost: '0.340000', platform_fee: '0.017000' });
    const after = await update(report(id, { message_id: 'm-9' }));
    expect(after.statusCode).toBe(409);
    expect(after.json().code).toBe('SESSION_NOT_ACTIVE');
    expect((await update(report(id, { message_id: 'm-1' }))).json().duplicate).toBe(true);
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '9.660000', locked: '0.000000' });
  });

  it('keeps message IDs and metrics as sent, whatever characters they hold', async () => {
    const p = await parties(h, '10');
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    const odd = ['a,"b"\\{c}', 'NULL', ' padded ', 'ünï {x}'];
    for (const [i, messageId] of odd.entries()) {
      const metrics = i === 0 ? { quote: '"}\\', nested: { list: [1, null, 'NULL'] } } : undefined;
      const res = await update(report(id, { message_id: messageId, ...(metrics ? { metrics } : {}) }));
      expect(res.statusCode).toBe(201);
      expect(res.json().usage).toMatchObject({ message_id: messageId, metrics: metrics ?? null });
      expect((await update(report(id, { message_id: messageId }))).json()).toMatchObject({
        duplicate: true,
        usage: { id: res.json().usage.id, message_id: messageId, metrics: metrics ?? null },
      });
    }
  });

  it('refuses fields billing does not know (a sender never sets the cost), alone or in a batch; metrics stay free', async () => {
    const p = await parties(h, '10');
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    for (const extra of [{ cost: '0' }, { billed_minutes: 0 }, { fan_rpm: 3000 }]) {
      const res = await update({ ...report(id, { message_id: `extra-${Object.keys(extra)[0]}` }), ...extra });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json().errors).toEqual([{ path: `body.${Object.keys(extra)[0]}`, message: 'unknown field' }]);
    }
    const batch = await h.app.inject({
      method: 'POST',
      url: '/api/v1/billing/usage-updates',
      payload: { reports: [{ ...report(id, { message_id: 'batch-cost' }), cost: '0' }] },
    });
    expect(batch.statusCode, batch.body).toBe(400);
    expect(batch.json().errors[0].path).toBe('body.reports.0.cost');
    // Nothing of the refused reports was recorded.
    const stored = await h.db.selectFrom('usage_records').select('message_id').where('session_id', '=', id).execute();
    expect(stored).toEqual([]);
    // What a newer daemon measures goes in metrics, which stays free-form.
    const newer = await update(report(id, { message_id: 'newer-1', metrics: { fan_rpm: 3000 } }));
    expect(newer.statusCode, newer.body).toBe(201);
    expect(newer.json().usage.metrics).toEqual({ fan_rpm: 3000 });
  });

  it('refuses unknown sessions and bad reports', async () => {
    expect((await update(report(crypto.randomUUID()))).statusCode).toBe(404);
    const p = await parties(h, '10');
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    for (const bad of [
      report(id, { gpu_utilization: 101 }),
      report(id, { power_draw_w: -1 }),
      report(id, { timestamp: 'yesterday' }),
      { session_id: id },
      report(id, { metrics: { a: { b: { c: { d: { e: { f: { g: { h: { i: 1 } } } } } } } } } }),
    ]) {
      const res = await update(bad);
      expect(res.statusCode, JSON.stringify(bad)).toBe(400);
      expect(res.json().code).toBe('VALIDATION_ERROR');
    }
    // Nested a hundred thousand deep: a 400 as well, never a stack overflow's 500.
    const deep = `{"session_id":"${id}","timestamp":"${clock.now().toISOString()}","gpu_utilization":1,"power_draw_w":1,"metrics":{"a":${'['.repeat(100_000)}${']'.repeat(100_000)}}}`;
    const res = await h.app.inject({
      method: 'POST',
      url: '/api/v1/billing/usage-update',
      payload: deep,
      headers: { 'content-type': 'application/json' },
    });
    expect(res.statusCode).toBe(400);
  });

  it('tops the hold up from the available balance when the billed cost approaches it', async () => {
    const p = await parties(h, '20');
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    clock.advance(55 * 60_000); // 4.675 billed; the 5.10 hold covers < 10 min more
    const res = await update(report(id, { message_id: 'a' }));
    expect(res.json().session).toMatchObject({ status: 'active', total_cost: '4.675000' });
    // Topped up to 4.675 + one more hour (5.10) = 9.775.
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '10.225000', locked: '9.775000' });
    expect((await usage(h, id)).json()).toMatchObject({ hold_amount: '9.775000', hold_remaining: '5.100000' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });
});

describe('running out of funds', () => {
  it('enters the grace period, then terminates billed to the last full minute the funds cover', async () => {
    const p = await parties(h, '5.2'); // the hour (5.10) plus 0.10
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    clock.advance(55 * 60_000);
    expect((await update(report(id, { message_id: 'a' }))).json().session.status).toBe('active');
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '0.000000', locked: '5.200000' });

    clock.advance(6 * 60_000); // 61 min: 5.185 billed, 5.20 held: the next minute is not covered
    const grace = (await update(report(id, { message_id: 'b' }))).json().session;
    expect(grace).toMatchObject({ status: 'grace_period', total_cost: '5.185000' });
    expect(grace.grace_until).toBe(new Date(clock.now().getTime() + 5 * 60_000).toISOString());

    clock.advance(5 * 60_000); // grace over
    const done = await update(report(id, { message_id: 'c' }));
    expect(done.statusCode).toBe(201);
    expect(done.json().session).toMatchObject({ status: 'terminated', end_reason: 'insufficient_funds' });
    const record = (await end(h, id)).json().billing_record;
    // 66 min elapsed; 5.20 pays 61 full minutes: 5.185, fee 0.25925, provider 4.92575; 0.015 released.
    expect(record).toMatchObject({
      status: 'terminated',
      end_reason: 'insufficient_funds',
      billed_minutes: 61,
      total_cost: '5.185000',
      platform_fee: '0.259250',
      provider_earnings: '4.925750',
    });
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '0.015000', locked: '0.000000' });
    expect(await h.balanceOf(p.provider.id)).toMatchObject({ available: '4.925750' });
    // The renter was warned of the low balance as the grace period started (the same billing pass here: events of
    // one transaction share their time, so the two come in either order).
    const kinds = await outboxKinds(id);
    expect([kinds[0], kinds.slice(1, 3).sort(), kinds[3]]).toEqual([
      'session.started',
      ['session.grace_period', 'session.low_balance'],
      'session.terminated',
    ]);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('returns to active when funds arrive during the grace period', async () => {
    const p = await parties(h, '5.2');
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    clock.advance(61 * 60_000);
    expect((await update(report(id, { message_id: 'a' }))).json().session.status).toBe('grace_period');
    await h.credit(p.renter.id, '10');
    clock.advance(60_000);
    const back = (await update(report(id, { message_id: 'b' }))).json().session;
    expect(back).toMatchObject({ status: 'active', grace_until: null, total_cost: '5.270000' });
    // Held: 5.27 + 5.10 = 10.37; available 15.2 - 10.37 = 4.83.
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '4.830000', locked: '10.370000' });
    const kinds = await outboxKinds(id);
    expect([kinds[0], kinds.slice(1, 3).sort(), kinds[3]]).toEqual([
      'session.started',
      ['session.grace_period', 'session.low_balance'],
      'session.resumed',
    ]);
  });
});
