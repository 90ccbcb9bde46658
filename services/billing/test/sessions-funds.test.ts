/** Session starts that must not go through, concurrent starts and ends, idempotency, history. */
import { describe, expect, it } from 'vitest';
import { end, H100_X1, manualClock, parties, start, startBody } from './support/sessions.ts';
import { useBillingHarness } from './support/setup.ts';

const clock = manualClock();
const h = useBillingHarness({ now: clock.now });

const sessionsOf = (walletId: string) =>
  h.db.selectFrom('rental_sessions').selectAll().where('wallet_id', '=', walletId).execute();

describe('insufficient funds at start', () => {
  it('is 402 below minimum_balance and changes nothing', async () => {
    const p = await parties(h, '0.5');
    const res = await start(h, startBody(p, { gpu_model: 'tiny', estimated_power_w: 0 }));
    expect(res.statusCode).toBe(402);
    expect(res.json()).toMatchObject({
      code: 'INSUFFICIENT_FUNDS',
      available: '0.500000',
      minimum_balance: '1.000000',
    });
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '0.500000', locked: '0.000000' });
    expect(await sessionsOf(p.renter.id)).toHaveLength(0);
  });

  it("is 402 when the available balance doesn't cover the initial hour, and changes nothing", async () => {
    const p = await parties(h, '5.099999');
    const res = await start(h, startBody(p, H100_X1));
    expect(res.statusCode).toBe(402);
    expect(res.json()).toMatchObject({ code: 'INSUFFICIENT_FUNDS', available: '5.099999', needed: '5.100000' });
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '5.099999', locked: '0.000000' });
    expect(await sessionsOf(p.renter.id)).toHaveLength(0);
    const holds = await h.db.selectFrom('holds').select('id').where('wallet_id', '=', p.renter.id).execute();
    expect(holds).toHaveLength(0);
  });
});

describe('refusals', () => {
  it('answers wrong owners, missing provider wallets, duplicates and bad input with problems', async () => {
    const p = await parties(h, '20');
    const other = await h.fundedWallet('20');
    const mismatch = await start(h, { ...startBody(p), wallet_id: other.id });
    expect(mismatch.statusCode).toBe(409);
    expect(mismatch.json().code).toBe('WALLET_OWNER_MISMATCH');
    const noProvider = await start(h, { ...startBody(p), provider_id: crypto.randomUUID() });
    expect(noProvider.statusCode).toBe(404);
    expect(noProvider.json().code).toBe('WALLET_NOT_FOUND');
    const noWallet = await start(h, { ...startBody(p), wallet_id: crypto.randomUUID() });
    expect(noWallet.statusCode).toBe(404);
    for (const bad of [
      { ...startBody(p), gpu_count: 0 },
      { ...startBody(p), user_id: 'x' },
      { wallet_id: p.renter.id },
    ]) {
      expect((await start(h, bad)).statusCode).toBe(400);
    }
    const body = startBody(p);
    expect((await start(h, body)).statusCode).toBe(201);
    const twice = await start(h, body);
    expect(twice.statusCode).toBe(409);
    expect(twice.json().code).toBe('SESSION_ALREADY_RUNNING');
    const unknown = await end(h, crypto.randomUUID());
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().code).toBe('SESSION_NOT_FOUND');
    expect((await h.app.inject({ method: 'GET', url: '/api/v1/billing/current-usage/nope' })).statusCode).toBe(400);
  });

  it("names jobs per renter: another renter's running job of the same name refuses nobody", async () => {
    const jobId = `nightly-${crypto.randomUUID()}`;
    const [victim, other] = [await parties(h, '20'), await parties(h, '20')];
    // Another renter (a machine's owner sees the job_id of the sessions on it) starts first under the victim's name.
    expect((await start(h, startBody(other, H100_X1, jobId))).statusCode).toBe(201);
    const own = await start(h, startBody(victim, H100_X1, jobId));
    expect(own.statusCode, own.body).toBe(201);
    // The renter's own job still runs one session at a time.
    const again = await start(h, startBody(victim, H100_X1, jobId));
    expect(again.statusCode).toBe(409);
    expect(again.json().code).toBe('SESSION_ALREADY_RUNNING');
  });

  it('replays a start with the same Idempotency-Key instead of holding twice', async () => {
    const p = await parties(h, '20');
    const body = startBody(p, H100_X1);
    const headers = { 'idempotency-key': `start-${crypto.randomUUID()}` };
    const first = await start(h, body, headers);
    const second = await start(h, body, headers);
    expect(first.statusCode).toBe(201);
    expect(second.statusCode).toBe(201);
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(second.json().session.id).toBe(first.json().session.id);
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '14.900000', locked: '5.100000' });
    const reused = await start(h, { ...body, job_id: 'other' }, headers);
    expect(reused.statusCode).toBe(409);
    expect(reused.json().code).toBe('IDEMPOTENCY_KEY_REUSED');
  });
});

describe('concurrency', () => {
  it('concurrent starts on one wallet never overdraw it', async () => {
    const p = await parties(h, '12'); // 2 × 5.10 fit, a third does not
    const results = await Promise.all(Array.from({ length: 10 }, () => start(h, startBody(p, H100_X1))));
    const codes = results.map((r) => r.statusCode).sort();
    expect(codes.filter((c) => c === 201)).toHaveLength(2);
    expect(codes.filter((c) => c === 402)).toHaveLength(8);
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '1.800000', locked: '10.200000' });
    expect(await sessionsOf(p.renter.id)).toHaveLength(2);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('concurrent ends bill once', async () => {
    const p = await parties(h, '10');
    const id = (await start(h, startBody(p, H100_X1))).json().session.id;
    clock.advance(60_000);
    const results = await Promise.all(Array.from({ length: 6 }, () => end(h, id)));
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    expect(results.filter((r) => r.json().already_ended === false)).toHaveLength(1);
    expect(new Set(results.map((r) => r.json().billing_record.id)).size).toBe(1);
    // 1 minute at 5.10/h = 0.085.
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '9.915000', locked: '0.000000' });
    expect(await h.balanceOf(p.provider.id)).toMatchObject({ available: '0.080750' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });
});

describe('GET /api/v1/billing/history', () => {
  it('filters by user, provider, status and time, newest first, paginated', async () => {
    const p = await parties(h, '50');
    const from = clock.now().toISOString();
    const ids: string[] = [];
    for (let i = 1; i <= 3; i++) {
      const id = (await start(h, startBody(p, H100_X1))).json().session.id;
      clock.advance(i * 60_000);
      await end(h, id);
      ids.push(id);
    }
    const get = (qs: string) => h.app.inject({ method: 'GET', url: `/api/v1/billing/history?${qs}` });
    const all = (await get(`user_id=${p.renter.ownerId}`)).json();
    expect(all.map((r: { session_id: string }) => r.session_id)).toEqual([...ids].reverse());
    expect(all.map((r: { total_cost: string }) => r.total_cost)).toEqual(['0.255000', '0.170000', '0.085000']);
    const page1 = await get(`provider_id=${p.provider.ownerId}&limit=2`);
    expect(page1.json()).toHaveLength(2);
    const page2 = await get(`provider_id=${p.provider.ownerId}&limit=2&cursor=${page1.headers['x-next-cursor']}`);
    expect(page2.json().map((r: { session_id: string }) => r.session_id)).toEqual([ids[0]]);
    expect(page2.headers['x-next-cursor']).toBeUndefined();
    expect((await get(`user_id=${p.renter.ownerId}&status=terminated`)).json()).toHaveLength(0);
    const later = new Date(Date.parse(from) + 2 * 60_000).toISOString();
    const windowed = (
      await get(`user_id=${p.renter.ownerId}&from=${encodeURIComponent(from)}&to=${encodeURIComponent(later)}`)
    ).json();
    expect(windowed.map((r: { session_id: string }) => r.session_id)).toEqual([ids[0]]);
    expect((await get('status=bogus')).statusCode).toBe(400);
    expect((await get('cursor=xyz')).statusCode).toBe(400);
  });

  it('answers an array and carries the next page in X-Next-Cursor and a Link', async () => {
    const p = await parties(h, '50');
    for (let i = 0; i < 2; i++) {
      const id = (await start(h, startBody(p, H100_X1))).json().session.id;
      clock.advance(60_000);
      await end(h, id);
    }
    const url = `/api/v1/billing/history?provider_id=${p.provider.ownerId}&limit=1`;
    const first = await h.app.inject({ method: 'GET', url });
    expect(first.json()).toHaveLength(1);
    const next = first.headers['x-next-cursor'] as string;
    expect(next).toBeTruthy();
    expect(first.headers.link).toBe(`<${url}&cursor=${next}>; rel="next"`);
    const last = await h.app.inject({ method: 'GET', url: `${url}&cursor=${next}` });
    expect(last.json()).toHaveLength(1);
    expect(last.headers['x-next-cursor']).toBeUndefined();
    const bad = await h.app.inject({ method: 'GET', url: '/api/v1/billing/history?cursor=xyz' });
    expect(bad.json().code).toBe('INVALID_CURSOR');
  });
});
