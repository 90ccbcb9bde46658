/**
 * A machine's reliability (issue #28): its uptime over 30 days kept by the database as its status changes (whatever
 * path changes it: the offline sweep, a heartbeat, an explicit update, a rental), the down time of a silent machine
 * counted from its last heartbeat, and the rental sessions that ended by its fault, counted once per session however
 * often billing reports the end. Readable by any caller with a token, renters included; against real PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ageProvider, deliver, endRental, type Harness, register, rent, startHarness } from './helpers.ts';

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ nats: false });
});
afterAll(() => h?.close());

/** Moves the start of the machine's current status class `ms` into the past (the books' clock is the database's). */
async function since(id: string, ms: number) {
  await sql`UPDATE providers SET status_since = now() - make_interval(secs => ${ms / 1000}) WHERE id = ${id}`.execute(
    h.database.db,
  );
}

async function reliability(id: string, headers?: Record<string, string>) {
  const res = await h.app.inject({ method: 'GET', url: `/providers/${id}/reliability`, headers });
  expect(res.statusCode, res.body).toBe(200);
  return res.json();
}

const HOUR = 3_600_000;

describe("a machine's reliability", () => {
  it('starts with nothing against it: score 1, up since it registered, nothing ended', async () => {
    const p = await register(h.app);
    expect(await reliability(p.id)).toMatchObject({
      provider_id: p.id,
      score: 1,
      uptime_30d: 1,
      sessions_ended: 0,
      sessions_failed: 0,
      session_success: null,
    });
  });

  it('counts up time to the last heartbeat and down time from it when the sweep marks the machine offline', async () => {
    const p = await register(h.app);
    await since(p.id, 10 * HOUR); // up for ten hours...
    await ageProvider(h.database, p.id, 2 * HOUR); // ...the last two of them silent
    await h.app.registry.sweepOffline();
    expect((await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json().status).toBe('offline');
    const r = await reliability(p.id);
    // Up 8 h (to the last heartbeat), down 2 h since: 80 %.
    expect(r.uptime_30d).toBeCloseTo(0.8, 2);
    expect(r.observed_hours_30d).toBeCloseTo(10, 1);
    expect(r.score).toBeCloseTo(0.8, 2);

    // A heartbeat revives it: the down time is closed, the up time starts anew.
    await since(p.id, 2 * HOUR);
    const beat = await h.app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat`, payload: {} });
    expect(beat.json().status).toBe('idle');
    const after = await reliability(p.id);
    expect(after.uptime_30d).toBeCloseTo(0.8, 2);
    const days = await h.database.db
      .selectFrom('provider_uptime')
      .selectAll()
      .where('provider_id', '=', p.id)
      .execute();
    const up = days.reduce((s, d) => s + d.up_seconds, 0);
    const down = days.reduce((s, d) => s + d.down_seconds, 0);
    expect(up / 3600).toBeCloseTo(8, 1);
    expect(down / 3600).toBeCloseTo(2, 1);
  });

  it('keeps rentals (idle <-> busy) as up time without a row, and maintenance as neither', async () => {
    const p = await register(h.app);
    const session = await rent(h.app, p.id);
    await endRental(h.app, p.id, session);
    const rows = await h.database.db
      .selectFrom('provider_uptime')
      .selectAll()
      .where('provider_id', '=', p.id)
      .execute();
    expect(rows).toEqual([]);

    await since(p.id, 3 * HOUR);
    const set = (status: string) =>
      h.app.inject({ method: 'PATCH', url: `/providers/${p.id}/status`, payload: { status } });
    expect((await set('maintenance')).statusCode).toBe(200);
    await since(p.id, 5 * HOUR); // five hours in maintenance
    expect((await set('error')).statusCode).toBe(200);
    await since(p.id, 1 * HOUR); // one hour in error
    const r = await reliability(p.id);
    // Up 3 h, down 1 h (error, still open); the 5 h of maintenance count as neither.
    expect(r.uptime_30d).toBeCloseTo(0.75, 2);
    expect(r.observed_hours_30d).toBeCloseTo(4, 1);
  });

  it("counts each session's end once, against the machine only for its faults", async () => {
    const p = await register(h.app);
    const end = (sessionId: string, reason?: string) =>
      deliver(h.app, 'session.completed', { session: { id: sessionId, provider_id: p.id, end_reason: reason } });
    const a = await rent(h.app, p.id);
    const first = await end(a, 'ended');
    expect(first.statusCode, first.body).toBe(200);
    expect(first.json()).toEqual({ kind: 'session.completed', outcome: 'applied' });
    const b = await rent(h.app, p.id);
    expect((await end(b, 'provider_offline')).statusCode).toBe(200);
    // Billing reports an end again (a redelivery), and in parallel: counted once.
    const again = await Promise.all([end(b, 'provider_offline'), end(b, 'provider_offline'), end(a, 'ended')]);
    expect(again.map((r) => r.statusCode)).toEqual([200, 200, 200]);
    const c = await rent(h.app, p.id);
    await end(c, 'spend_cap'); // the renter's cap: not the machine's fault
    // A session never reported running, reported ended: counted once too.
    await end(randomUUID(), 'provider_error');
    expect(await reliability(p.id)).toMatchObject({ sessions_ended: 4, sessions_failed: 2, session_success: 0.5 });
    expect((await reliability(p.id)).score).toBeCloseTo(0.5, 5);
  });

  it("counts an owner's end of a rental against the machine, and nothing of rentals of one's own machine", async () => {
    const owner = randomUUID();
    const p = await register(h.app, { owner_id: owner });
    const end = (sessionId: string, ends: { end_reason: string; renter_id: string }) =>
      deliver(h.app, 'session.terminated', {
        session: { id: sessionId, provider_id: p.id, end_reason: ends.end_reason, user_id: ends.renter_id },
      });
    // The owner ends a stranger's rental: billing records provider_ended, a fault of the machine's.
    const stranger = randomUUID();
    expect((await end(await rent(h.app, p.id), { end_reason: 'provider_ended', renter_id: stranger })).statusCode).toBe(
      200,
    );
    // The owner rents the machine and ends well, again and again: no success bought.
    for (let i = 0; i < 3; i++) {
      expect((await end(await rent(h.app, p.id), { end_reason: 'ended', renter_id: owner })).statusCode).toBe(200);
    }
    expect(await reliability(p.id)).toMatchObject({ sessions_ended: 1, sessions_failed: 1, session_success: 0 });
    // A renter ID that is not a UUID is refused, and changes nothing.
    const bad = await end(await rent(h.app, p.id), { end_reason: 'ended', renter_id: 'owner' });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().code).toBe('VALIDATION_ERROR');
    expect((await reliability(p.id)).sessions_ended).toBe(1);
  });

  it('is readable by a renter, with nothing of the owner or the address; 404 for an unknown machine', async () => {
    const p = await register(h.app);
    const renter = await h.issuer.user(['renter']);
    const r = await reliability(p.id, renter.headers);
    expect(Object.keys(r).sort()).toEqual([
      'observed_hours_30d',
      'provider_id',
      'score',
      'session_success',
      'sessions_ended',
      'sessions_failed',
      'uptime_30d',
    ]);
    // The machine itself stays the owner's and the scheduler's to read.
    expect((await h.app.inject({ method: 'GET', url: `/providers/${p.id}`, headers: renter.headers })).statusCode).toBe(
      403,
    );
    const unknown = await h.app.inject({ method: 'GET', url: `/providers/${randomUUID()}/reliability` });
    expect(unknown.statusCode).toBe(404);
    const anonymous = await h.app.inject({
      method: 'GET',
      url: `/providers/${p.id}/reliability`,
      headers: { authorization: '' },
    });
    expect(anonymous.statusCode).toBe(401);
  });
});
