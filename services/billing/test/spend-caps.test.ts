/**
 * Spend caps and low-balance warnings (issue #28): a session with `spend_cap` holds no more than its cap and
 * ends at it (`completed`, `end_reason: spend_cap`), billed exactly to it, whether the biller or a usage report finds
 * it there, once under concurrency; a renter whose funds come to pay for less than `billing.low_balance_warning` is
 * warned once (`session.low_balance`, `low_balance_since`) before the grace period starts, and again only after funds
 * came and ran low anew. Against real PostgreSQL, the ledger checked after each.
 */
import { NoopPublisher } from '@gpu/common';
import { describe, expect, it } from 'vitest';
import { startBackground } from '../src/background.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import { endSessionsAtCap, runBillingCycle } from '../src/domain/sessions/biller.ts';
import { end, H100_X1, manualClock, ownedParties, parties, RTX4090_X2, start, startBody } from './support/sessions.ts';
import { setupBilling, useBillingHarness } from './support/setup.ts';

const clock = manualClock();
const h = useBillingHarness({ now: clock.now });

const minutes = (n: number) => clock.advance(n * 60_000);

/** The session as its renter reads it, with what it has used so far (GET current-usage). */
async function session(id: string) {
  const res = await h.app.inject({ method: 'GET', url: `/api/v1/billing/current-usage/${id}` });
  expect(res.statusCode).toBe(200);
  const usage = res.json();
  return { ...usage, total_cost: usage.billed_cost };
}

const report = (sessionId: string, messageId: string) =>
  h.app.inject({
    method: 'POST',
    url: '/api/v1/billing/usage-update',
    payload: {
      session_id: sessionId,
      message_id: messageId,
      timestamp: clock.now().toISOString(),
      gpu_utilization: 80,
      power_draw_w: 300,
    },
  });

async function eventsOf(sessionId: string, kind: string) {
  const rows = await h.db.selectFrom('outbox_events').select(['kind', 'payload']).where('kind', '=', kind).execute();
  return rows.filter((r) => (r.payload as { session?: { id: string } }).session?.id === sessionId);
}

describe('a spend cap', () => {
  it('holds no more than the cap and ends the session at it, billed exactly to it (the biller)', async () => {
    const p = await parties(h, '20');
    // H100 × 1: 5.10 tokens/hour, 0.085 a minute; a cap of 0.5 is reached in the 6th minute (0.51).
    const res = await start(h, { ...startBody(p, H100_X1), spend_cap: '0.5' });
    expect(res.statusCode).toBe(201);
    const started = res.json();
    expect(started.hold_amount).toBe('0.500000');
    expect(started.session.spend_cap).toBe('0.500000');
    const id = started.session.id as string;

    minutes(5);
    await runBillingCycle(h.ctx);
    expect(await session(id)).toMatchObject({ status: 'active', billed_minutes: 5, total_cost: '0.425000' });

    minutes(1);
    const cycle = await runBillingCycle(h.ctx);
    expect(cycle.capped).toBe(1);
    const ended = await session(id);
    expect(ended).toMatchObject({ status: 'completed', end_reason: 'spend_cap', total_cost: '0.500000' });
    const record = await h.db
      .selectFrom('billing_records')
      .selectAll()
      .where('session_id', '=', id)
      .executeTakeFirstOrThrow();
    expect(record).toMatchObject({ total_cost: '0.500000', platform_fee: '0.025000', provider_earnings: '0.475000' });
    expect(record.spend_cap).toBe('0.500000');
    // The renter paid exactly the cap; the rest of what was held came back.
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '19.500000', locked: '0.000000' });
    expect((await eventsOf(id, 'session.completed')).length).toBe(1);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('is reached through usage reports too, once when reports and the biller race', async () => {
    const p = await parties(h, '20');
    const id = (await start(h, { ...startBody(p, H100_X1), spend_cap: '0.3' })).json().session.id as string;
    minutes(4); // 0.34 > 0.3
    const answers = await Promise.all([
      report(id, 'r-1'),
      report(id, 'r-2'),
      runBillingCycle(h.ctx),
      report(id, 'r-3'),
    ]);
    const statuses = [answers[0], answers[1], answers[3]].map((r) => (r as { statusCode: number }).statusCode);
    expect(statuses.every((s) => s === 201 || s === 409)).toBe(true);
    expect(await session(id)).toMatchObject({ status: 'completed', end_reason: 'spend_cap', total_cost: '0.300000' });
    expect((await eventsOf(id, 'session.completed')).length).toBe(1);
    const records = await h.db
      .selectFrom('billing_records')
      .select('total_cost')
      .where('session_id', '=', id)
      .execute();
    expect(records).toEqual([{ total_cost: '0.300000' }]);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('bills an end before the cap as any end, and never more than the cap', async () => {
    const p = await parties(h, '20');
    const id = (await start(h, { ...startBody(p, H100_X1), spend_cap: '1' })).json().session.id as string;
    minutes(2.5); // three started minutes: 0.255
    const ended = (await end(h, id)).json();
    expect(ended.billing_record).toMatchObject({ total_cost: '0.255000', end_reason: 'ended', spend_cap: '1.000000' });

    const q = await parties(h, '20');
    const capped = (await start(h, { ...startBody(q, H100_X1), spend_cap: '0.2' })).json().session.id as string;
    minutes(2.5); // 0.255 over a cap of 0.2: the end costs the cap
    expect((await end(h, capped)).json().billing_record.total_cost).toBe('0.200000');
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('met in the grace period ends at the cap only once the renter pays all of it, unpaid when grace runs out', async () => {
    // RTX 4090 × 2: 1.93 tokens/hour. 2.5 tokens pay for 77 minutes; a cap of 2.6 is reached in minute 81, inside the
    // grace period (5 minutes) that starts at 77 when the hold cannot pay the next minute.
    const kinds = async (id: string) =>
      (await h.db.selectFrom('outbox_events').select(['kind', 'payload']).orderBy('created_at').execute())
        .filter((r) => (r.payload as { session?: { id: string } }).session?.id === id)
        .map((r) => r.kind)
        .filter((k) => k !== 'session.started' && k !== 'session.low_balance');
    const payer = await parties(h, '2.5');
    const paid = (await start(h, { ...startBody(payer, RTX4090_X2), spend_cap: '2.6' })).json().session.id;
    const debtor = await parties(h, '2.5');
    const unpaid = (await start(h, { ...startBody(debtor, RTX4090_X2), spend_cap: '2.6' })).json().session.id;
    minutes(50);
    await runBillingCycle(h.ctx);
    minutes(27);
    await runBillingCycle(h.ctx);
    for (const id of [paid, unpaid]) expect((await session(id)).status).toBe('grace_period');

    minutes(4); // minute 81: the cap is reached, and neither hold pays it
    await runBillingCycle(h.ctx);
    for (const id of [paid, unpaid]) {
      expect(await session(id)).toMatchObject({ status: 'grace_period', total_cost: '2.600000' });
    }
    // One renter pays: the hold is topped up to the cap (no further), and the session ends at it.
    await h.credit(payer.renter.id, '1');
    minutes(0.5);
    await runBillingCycle(h.ctx);
    expect(await session(paid)).toMatchObject({ status: 'completed', end_reason: 'spend_cap', total_cost: '2.600000' });
    expect(await h.balanceOf(payer.renter.id)).toMatchObject({ available: '0.900000', locked: '0.000000' });
    expect(await kinds(paid)).toEqual(['session.grace_period', 'session.completed']);

    // The other does not: grace runs out, the session ends unpaid beyond what was held.
    minutes(1);
    await runBillingCycle(h.ctx);
    expect(await session(unpaid)).toMatchObject({ status: 'terminated', end_reason: 'insufficient_funds' });
    expect(new Dec((await session(unpaid)).total_cost).lte('2.5')).toBe(true);
    expect(await h.balanceOf(debtor.renter.id)).toMatchObject({ locked: '0.000000' });
    expect(await kinds(unpaid)).toEqual(['session.grace_period', 'session.terminated']);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it("lets no party claim a reason billing gives itself (a cap reached, a provider's fault)", async () => {
    const p = await parties(h, '20');
    const id = (await start(h, startBody(p, H100_X1))).json().session.id as string;
    for (const reason of ['spend_cap', 'provider_offline', 'provider_removed', 'insufficient_funds']) {
      const res = await h.app.inject({
        method: 'POST',
        url: '/api/v1/billing/end-session',
        payload: { session_id: id, reason },
      });
      expect(res.statusCode, reason).toBe(400);
      expect(res.json().errors[0].path).toBe('body.reason');
    }
    expect((await session(id)).status).toBe('active');
    const own = await h.app.inject({
      method: 'POST',
      url: '/api/v1/billing/end-session',
      payload: { session_id: id, reason: 'job finished' },
    });
    expect(own.json().billing_record.end_reason).toBe('job finished');
  });

  it('takes the cap by its former name, max_total_spend, too; both names at once are refused', async () => {
    const p = await parties(h, '20');
    const both = await start(h, { ...startBody(p, H100_X1), spend_cap: '1', max_total_spend: '1' });
    expect(both.statusCode).toBe(400);
    expect(both.json().errors).toEqual([expect.objectContaining({ path: 'body.max_total_spend' })]);
    const bad = await start(h, { ...startBody(p, H100_X1), max_total_spend: 'ten' });
    expect(bad.statusCode).toBe(400);
    expect(JSON.stringify(bad.json())).toMatch(/max_total_spend/);
    const res = await start(h, { ...startBody(p, H100_X1), max_total_spend: '0.5' });
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json().session.spend_cap).toBe('0.500000');
  });

  it('refuses a cap that is not a positive amount at the token scale, with the field named', async () => {
    const p = await parties(h, '20');
    for (const cap of ['0', '-1', '0.0000001', '1e3', 'ten', ' 1']) {
      const res = await start(h, { ...startBody(p, H100_X1), spend_cap: cap });
      expect(res.statusCode, cap).toBe(400);
      expect(JSON.stringify(res.json()), cap).toMatch(/spend_cap/);
    }
    const running = await h.db
      .selectFrom('rental_sessions')
      .select('id')
      .where('wallet_id', '=', p.renter.id)
      .execute();
    expect(running).toEqual([]);
  });
});

describe('a spend cap larger than any session spends', () => {
  it('is taken (1e14 at 5.10 an hour: millions of years), and the session billed by the minute as with none', async () => {
    const huge = '100000000000000';
    const p = await parties(h, '20');
    const res = await start(h, { ...startBody(p, H100_X1), spend_cap: huge });
    expect(res.statusCode, res.body).toBe(201);
    const id = res.json().session.id as string;
    minutes(3);
    await runBillingCycle(h.ctx);
    expect(await session(id)).toMatchObject({ status: 'active', billed_minutes: 3, total_cost: '0.255000' });
    expect((await end(h, id)).statusCode).toBe(200);

    // A workload's: its `running` report starts billing's clock (its cap's end was an Invalid Date: a 500, unbilled).
    const renter = await h.issuer.user(['renter']);
    const owner = await h.issuer.user(['provider']);
    const daemon = await h.issuer.client('daemon', owner.id);
    const q = await ownedParties(h, '20', renter.id, owner.id);
    const workload = { command: ['python3', 'train.py'], max_runtime_seconds: 3600 };
    const started = await start(
      h,
      { ...startBody(q, H100_X1), spend_cap: huge, workload, accepted_hourly_rate: '5.10' },
      renter.headers,
    );
    expect(started.statusCode, started.body).toBe(201);
    const wid = started.json().session.id as string;
    const state = (body: Record<string, unknown>) =>
      h.app.inject({
        method: 'POST',
        url: `/api/v1/billing/sessions/${wid}/workload/state`,
        headers: daemon.headers,
        payload: { ...body, at: clock.now().toISOString() },
      });
    expect((await state({ state: 'preparing' })).statusCode).toBe(200);
    const running = await state({ state: 'running' });
    expect(running.statusCode, running.body).toBe(200);
    minutes(2);
    await runBillingCycle(h.ctx);
    expect(await session(wid)).toMatchObject({ status: 'active', billed_minutes: 2, total_cost: '0.170000' });
  });
});

describe('a spend cap buys no GPU time it does not pay for', () => {
  it('is at least the first billed minute at the rate: a smaller one is refused, naming the minimum, with nothing held', async () => {
    const p = await parties(h, '20');
    // H100 × 1 at 5.10/h: the first minute costs 0.085.
    for (const cap of ['0.000001', '0.084999']) {
      const res = await start(h, { ...startBody(p, H100_X1), spend_cap: cap });
      expect(res.statusCode, cap).toBe(400);
      expect(res.json()).toMatchObject({
        code: 'SPEND_CAP_TOO_LOW',
        minimum_spend_cap: '0.085000',
        errors: [{ path: 'body.spend_cap' }],
      });
    }
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '20.000000', locked: '0.000000' });
    const res = await start(h, { ...startBody(p, H100_X1), spend_cap: '0.085' });
    expect(res.statusCode, res.body).toBe(201);
    // One minute paid: the cap's time is over a minute after the start.
    const s = res.json().session;
    expect(Date.parse(s.spend_cap_ends_at) - Date.parse(s.started_at)).toBe(60_000);
  });

  it('ends each capped session within the check interval past the time its cap paid for, billed exactly the cap', async () => {
    const step = 5_000; // billing.spend_cap_check_interval, the default: how often the cap sweep runs
    // From one minute's worth (0.085 at 5.10/h) to several, ending inside a minute and on no minute's edge.
    for (const cap of ['0.085', '0.1', '0.123457', '0.5', '1.000001']) {
      const p = await parties(h, '20');
      const session = (await start(h, { ...startBody(p, H100_X1), spend_cap: cap })).json().session;
      const paidMs = new Dec(cap).mul(3_600_000).div('5.1').toNumber();
      const startedAt = Date.parse(session.started_at);
      // Only the sweep runs (no billing cycle, no usage report): a silent daemon's session ends all the same.
      let ended: { status: string } | undefined;
      for (let sweeps = 0; sweeps < 1_000 && !ended; sweeps++) {
        clock.advance(step);
        await endSessionsAtCap(h.ctx);
        const now = await session_(session.id);
        if (now.status !== 'active') ended = now;
      }
      const { billing_record: record } = (
        await h.app.inject({ method: 'POST', url: '/api/v1/billing/end-session', payload: { session_id: session.id } })
      ).json();
      const heldMs = Date.parse(record.ended_at) - startedAt;
      expect(ended?.status, cap).toBe('completed');
      expect(record.end_reason, cap).toBe('spend_cap');
      // Not before the time paid for, and no longer past it than the sweep's interval.
      expect(heldMs, cap).toBeGreaterThanOrEqual(paidMs);
      expect(heldMs - paidMs, cap).toBeLessThanOrEqual(step);
      expect(record.total_cost, cap).toBe(new Dec(cap).toFixed(6));
      // The crossing minute is billed (up to the cap): the provider is paid for every minute the GPUs were held.
      expect(record.billed_minutes, cap).toBe(Math.ceil(heldMs / 60_000));
      expect(new Dec(record.provider_earnings).plus(record.platform_fee).toFixed(6), cap).toBe(record.total_cost);
      expect(await h.balanceOf(p.renter.id)).toMatchObject({
        available: new Dec(20).minus(cap).toFixed(6),
        locked: '0.000000',
      });
    }
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('is ended by the running service, with no usage report and no billing cycle', async () => {
    const own = await setupBilling({
      now: clock.now,
      config: { billing: { spend_cap_check_interval: '100ms', billing_interval: '1h' } },
    });
    const background = await startBackground(own.ctx, own.config, new NoopPublisher(), undefined, null);
    try {
      const p = await parties(own, '20');
      const res = await own.app.inject({
        method: 'POST',
        url: '/api/v1/billing/start-session',
        payload: { ...startBody(p, H100_X1), spend_cap: '0.1' },
      });
      const id = res.json().session.id as string;
      clock.advance(71_000); // 0.1 at 5.10/h pays for 70.6 s
      // Up to 20 s (it stops once ended): the sweep runs every 100 ms, but a busy machine can hold one up for long.
      const deadline = Date.now() + 20_000;
      let status = 'active';
      while (status === 'active' && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        status = (
          await own.db.selectFrom('rental_sessions').select('status').where('id', '=', id).executeTakeFirstOrThrow()
        ).status;
      }
      expect(status).toBe('completed');
      const row = await own.db
        .selectFrom('rental_sessions')
        .select(['end_reason', 'total_cost'])
        .where('id', '=', id)
        .executeTakeFirstOrThrow();
      expect(row).toEqual({ end_reason: 'spend_cap', total_cost: '0.100000' });
    } finally {
      await background.stop();
      await own.close();
    }
  });
});

/** The session row as billing keeps it. */
const session_ = (id: string) =>
  h.db.selectFrom('rental_sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

describe('a low balance', () => {
  it('warns once before the grace period, clears when funds come, and warns again when they run low anew', async () => {
    // RTX 4090 × 2: 1.93 tokens/hour (0.032166… a minute). 2.5 tokens: 1.93 held at the start, 0.57 left available.
    const p = await parties(h, '2.5');
    const id = (await start(h, startBody(p, RTX4090_X2))).json().session.id as string;

    minutes(50); // the hold is topped up with the last 0.57: 2.5 held, enough for 77 minutes
    await runBillingCycle(h.ctx);
    expect(await session(id)).toMatchObject({ status: 'active', low_balance_since: null });

    minutes(13); // minute 63: 2.5 held pays for less than 15 minutes more
    await runBillingCycle(h.ctx);
    const low = await session(id);
    expect(low.status).toBe('active');
    expect(low.low_balance_since).toBe(clock.now().toISOString());
    minutes(1);
    await runBillingCycle(h.ctx);
    expect((await session(id)).low_balance_since).toBe(low.low_balance_since);
    expect(await eventsOf(id, 'session.low_balance')).toHaveLength(1);
    expect(await eventsOf(id, 'session.grace_period')).toHaveLength(0);

    // Funds arrive: the hold is refilled, the warning cleared.
    await h.credit(p.renter.id, '3');
    minutes(1);
    await runBillingCycle(h.ctx);
    expect(await session(id)).toMatchObject({ status: 'active', low_balance_since: null });

    // They run low again (5.5 tokens in all pay for 171 minutes): a second warning at minute 160, grace at 170.
    minutes(95);
    await runBillingCycle(h.ctx);
    expect((await session(id)).low_balance_since).not.toBeNull();
    expect(await eventsOf(id, 'session.low_balance')).toHaveLength(2);
    minutes(10);
    await runBillingCycle(h.ctx);
    expect((await session(id)).status).toBe('grace_period');
    const order = (await h.db.selectFrom('outbox_events').select(['kind', 'payload']).orderBy('created_at').execute())
      .filter((r) => (r.payload as { session?: { id: string } }).session?.id === id)
      .map((r) => r.kind)
      .filter((k) => k !== 'session.started');
    expect(order).toEqual(['session.low_balance', 'session.low_balance', 'session.grace_period']);
    expect(new Dec((await session(id)).total_cost).lte('5.5')).toBe(true);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it("reaches the renter and the machine's owner over HTTP (GET /billing/events), the event NATS carries", async () => {
    const renter = await h.issuer.user(['renter']);
    const owner = await h.issuer.user(['provider']);
    const stranger = await h.issuer.user(['renter']);
    const p = await ownedParties(h, '2.5', renter.id, owner.id);
    const id = (await start(h, startBody(p, RTX4090_X2))).json().session.id as string;
    minutes(63); // the hold pays for less than 15 minutes more, and the wallet is empty
    await runBillingCycle(h.ctx);
    const read = (who: { headers: Record<string, string> }, query: string) =>
      h.app.inject({ method: 'GET', url: `/api/v1/billing/events?${query}`, headers: who.headers });

    const low = await read(renter, `session_id=${id}&kind=session.low_balance`);
    expect(low.statusCode, low.body).toBe(200);
    const [event] = low.json();
    expect(event).toMatchObject({ kind: 'session.low_balance', session: { id, status: 'active' } });
    expect(event.session.low_balance_since).toBe(clock.now().toISOString());
    // The same event as the message: its ID, kind and data.
    const [message] = await eventsOf(id, 'session.low_balance');
    expect(message!.payload).toMatchObject({ event_id: event.event_id, session: event.session });
    // Newest first; the machine's owner reads them too, and nobody else.
    const kinds = async (who: typeof renter) =>
      (await read(who, `session_id=${id}`)).json().map((e: { kind: string }) => e.kind);
    expect(await kinds(renter)).toEqual(['session.low_balance', 'session.started']);
    expect(await kinds(owner)).toEqual(['session.low_balance', 'session.started']);
    expect((await read(stranger, `session_id=${id}`)).statusCode).toBe(403);
    expect((await read(stranger, '')).json()).toEqual([]);
    expect((await read(renter, `session_id=${crypto.randomUUID()}`)).statusCode).toBe(404);
    const badKind = await read(renter, 'kind=session.cost');
    expect(badKind.statusCode).toBe(400);
    // Paged as every list: one at a time, then the next.
    const first = await read(renter, 'limit=1');
    expect(first.json().map((e: { kind: string }) => e.kind)).toEqual(['session.low_balance']);
    const next = await read(renter, `limit=1&cursor=${first.headers['x-next-cursor']}`);
    expect(next.json().map((e: { kind: string }) => e.kind)).toEqual(['session.started']);
    expect(next.headers['x-next-cursor']).toBeUndefined();
  });

  it('is off with billing.low_balance_warning: 0', async () => {
    const quiet = await setupBilling({ now: clock.now, config: { billing: { low_balance_warning: '0s' } } });
    try {
      const p = await parties(quiet, '2.5');
      const id = (await start(quiet, startBody(p, RTX4090_X2))).json().session.id as string;
      for (const step of [50, 13, 10]) {
        minutes(step);
        await runBillingCycle(quiet.ctx);
      }
      const s = (await quiet.app.inject({ method: 'GET', url: `/api/v1/billing/current-usage/${id}` })).json();
      expect(s.low_balance_since).toBeNull();
      const events = await quiet.db
        .selectFrom('outbox_events')
        .select('kind')
        .where('kind', '=', 'session.low_balance')
        .execute();
      expect(events).toEqual([]);
    } finally {
      await quiet.close();
    }
  });
});
