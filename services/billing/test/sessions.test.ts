/** Rental sessions over HTTP on the real PostgreSQL: start, per-minute math, end, idempotency, funds. */
import { describe, expect, it } from 'vitest';
import { SYSTEM_ACCOUNT_IDS } from '../src/db/migrations/0001-ledger.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import { end, H100_X1, manualClock, parties, RTX4090_X2, start, startBody, usage } from './support/sessions.ts';
import { useBillingHarness } from './support/setup.ts';

const clock = manualClock();
const h = useBillingHarness({ now: clock.now });

const platformFees = async () =>
  new Dec(
    (
      await h.db
        .selectFrom('ledger_accounts')
        .select('balance')
        .where('id', '=', SYSTEM_ACCOUNT_IDS.platform_fees)
        .executeTakeFirstOrThrow()
    ).balance,
  );

describe('a rental session', () => {
  it('holds the initial hour, bills started minutes, splits 5 % / 95 % and releases the rest', async () => {
    const p = await parties(h, '10');
    const feesBefore = await platformFees();
    const res = await start(h, startBody(p, H100_X1));
    expect(res.statusCode).toBe(201);
    const started = res.json();
    expect(started).toMatchObject({
      hold_amount: '5.100000',
      available_balance: '4.900000',
      estimated_runtime_minutes: 117, // 10 / 5.10 per hour = 117.6 minutes
      session: {
        status: 'active',
        gpu_model: 'nvidia-tesla-h100',
        total_cost: '0.000000',
        rates: { base_hourly_rate: '4.000000', vram_hourly_rate: '0.800000', total_hourly_rate: '5.100000' },
      },
    });
    const id = started.session.id as string;
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '4.900000', locked: '5.100000' });
    const lock = await h.db
      .selectFrom('transactions')
      .selectAll()
      .where('id', '=', started.session.lock_transaction_id)
      .executeTakeFirstOrThrow();
    expect(lock).toMatchObject({ type: 'lock', status: 'confirmed', wallet_id: p.renter.id });

    clock.advance(90_500); // 1 min 30.5 s: two started minutes
    const now = (await usage(h, id)).json();
    expect(now).toMatchObject({
      status: 'active',
      elapsed_seconds: 90,
      elapsed_minutes: 2,
      cost_so_far: '0.170000',
      hold_amount: '5.100000',
      hold_remaining: '4.930000',
      available_balance: '4.900000',
      estimated_remaining_minutes: 115, // 9.83 / 5.10 per hour
    });

    const ended = await end(h, id);
    expect(ended.statusCode).toBe(200);
    const body = ended.json();
    expect(body.already_ended).toBe(false);
    expect(body.session).toMatchObject({ status: 'completed', billed_minutes: 2, total_cost: '0.170000' });
    expect(body.billing_record).toMatchObject({
      session_id: id,
      status: 'completed',
      billed_minutes: 2,
      total_cost: '0.170000',
      platform_fee: '0.008500',
      provider_earnings: '0.161500',
    });
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '9.830000', locked: '0.000000' });
    expect(await h.balanceOf(p.provider.id)).toMatchObject({ available: '0.161500' });
    expect((await platformFees()).minus(feesBefore).toFixed(6)).toBe('0.008500');
    const earnings = await h.app.inject({ method: 'GET', url: `/api/v1/provider/${p.provider.ownerId}/earnings` });
    expect(earnings.json().total_earned).toBe('0.161500');

    // Ending twice answers the same record and moves nothing.
    const again = await end(h, id);
    expect(again.statusCode).toBe(200);
    expect(again.json().already_ended).toBe(true);
    expect(again.json().billing_record).toEqual(body.billing_record);
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '9.830000', locked: '0.000000' });
    const usageAfter = (await usage(h, id)).json();
    expect(usageAfter).toMatchObject({ status: 'completed', cost_so_far: '0.170000', hold_amount: '0.000000' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('rounds the whole cost once, half-even, and the fee split to the token scale', async () => {
    const p = await parties(h, '5');
    const started = (await start(h, startBody(p, RTX4090_X2))).json();
    expect(started.session.rates.total_hourly_rate).toBe('1.930000');
    clock.advance(7 * 60_000 + 30_000); // 7.5 min → 8 started minutes: 1.93 × 8 / 60 = 0.2573333…
    const gpuMinutesBefore = h.ctx.state.gpuMinutesBilled;
    const record = (await end(h, started.session.id)).json().billing_record;
    // billing_gpu_hours_billed_total counts them: 8 minutes on 2 GPUs.
    expect(h.ctx.state.gpuMinutesBilled - gpuMinutesBefore).toBe(16);
    expect(record).toMatchObject({
      billed_minutes: 8,
      total_cost: '0.257333',
      platform_fee: '0.012867', // 0.01286665 → 0.012867
      provider_earnings: '0.244466',
    });
    expect(await h.balanceOf(p.renter.id)).toMatchObject({ available: '4.742667', locked: '0.000000' });
    expect(await h.balanceOf(p.provider.id)).toMatchObject({ available: '0.244466' });
  });

  it('keeps the rates it started with when the provider changes its rates', async () => {
    const p = await parties(h, '20');
    const url = `/api/v1/provider/${p.provider.ownerId}/rates`;
    await h.app.inject({ method: 'PUT', url, payload: { base_rates: { default: '3' } } });
    const body = startBody(p, { gpu_model: 'some gpu' });
    const started = (await start(h, body)).json();
    expect(started.session.rates).toMatchObject({ rate_source: 'provider', total_hourly_rate: '3.000000' });
    await h.app.inject({ method: 'PUT', url, payload: { base_rates: { default: '6' } } });
    clock.advance(10 * 60_000);
    const record = (await end(h, started.session.id)).json().billing_record;
    expect(record).toMatchObject({ billed_minutes: 10, total_cost: '0.500000', platform_fee: '0.025000' });
  });

  it("starts a renter's session only at a price they accepted, and freezes it", async () => {
    const renter = await h.issuer.user(['renter']);
    const wallet = await h.fundedWallet('50', 'user', undefined, { ownerId: renter.id });
    const provider = await h.fundedWallet('0', 'provider', undefined, { holderId: crypto.randomUUID() });
    const body = {
      user_id: renter.id,
      wallet_id: wallet.id,
      provider_id: provider.ownerId,
      job_id: crypto.randomUUID(),
      ...H100_X1,
    }; // 5.10/h at the platform's rates
    const as = (payload: unknown) => start(h, payload as Record<string, unknown>, renter.headers);
    const missing = await as(body);
    expect(missing.statusCode).toBe(400);
    expect(missing.json()).toMatchObject({ code: 'ACCEPTED_RATE_REQUIRED' });
    expect(missing.json().errors[0].path).toBe('body.accepted_hourly_rate');
    // The provider raised its price after the renter's quote: refused, with the current price; nothing held.
    const url = `/api/v1/provider/${provider.ownerId}/rates`;
    await h.app.inject({ method: 'PUT', url, payload: { base_rates: { default: '9' } } });
    const quote = await h.app.inject({
      method: 'POST',
      url: '/api/v1/pricing/calculate',
      payload: { ...H100_X1, provider_id: provider.ownerId },
    });
    expect(quote.json().total_hourly_rate).toBe('10.100000');
    const refused = await as({ ...body, accepted_hourly_rate: '5.10' });
    expect(refused.statusCode).toBe(409);
    expect(refused.json()).toMatchObject({ code: 'PRICE_NOT_ACCEPTED', total_hourly_rate: '10.100000' });
    expect(await h.balanceOf(wallet.id)).toMatchObject({ available: '50.000000', locked: '0.000000' });
    // Accepting the quoted price starts it; a later price change never reaches it.
    const started = await as({ ...body, accepted_hourly_rate: quote.json().total_hourly_rate });
    expect(started.statusCode).toBe(201);
    expect(started.json().session.rates.total_hourly_rate).toBe('10.100000');
    await h.app.inject({ method: 'PUT', url, payload: { base_rates: { default: '20' } } });
    clock.advance(6 * 60_000);
    const record = (await end(h, started.json().session.id)).json().billing_record;
    expect(record).toMatchObject({ billed_minutes: 6, total_cost: '1.010000' });
  });

  it('names the price exactly when it refuses one, so the figure it names is accepted', async () => {
    const renter = await h.issuer.user(['renter']);
    const wallet = await h.fundedWallet('50', 'user', undefined, { ownerId: renter.id });
    const provider = await h.fundedWallet('0', 'provider', undefined, { holderId: crypto.randomUUID() });
    // 1 MB of VRAM at 0.02 per GB-hour: a rate with more decimals than the token has (5.1000195312...).
    const body = { ...startBody({ renter: wallet, provider }, { ...H100_X1, requested_vram_mb: 40961 }) };
    const as = (payload: unknown) => start(h, payload as Record<string, unknown>, renter.headers);
    const refused = await as({ ...body, user_id: renter.id, accepted_hourly_rate: '5.1' });
    expect(refused.statusCode).toBe(409);
    const named = refused.json().total_hourly_rate as string;
    expect(new Dec(named).gt('5.100000')).toBe(true);
    expect(refused.json().detail).toContain(named);
    // The figure cut to the token's decimals (what the refusal used to name) is refused again; the named one starts it.
    const cut = new Dec(named).toDecimalPlaces(6, Dec.ROUND_DOWN).toFixed(6);
    expect((await as({ ...body, user_id: renter.id, accepted_hourly_rate: cut })).statusCode).toBe(409);
    const started = await as({ ...body, user_id: renter.id, accepted_hourly_rate: named });
    expect(started.statusCode, started.body).toBe(201);
    expect(started.json().session.rates.total_hourly_rate).toBe(named);
  });

  it('derives what a user leaves out: the renter from the token, the job from the session', async () => {
    const renter = await h.issuer.user(['renter']);
    const wallet = await h.fundedWallet('50', 'user', undefined, { ownerId: renter.id });
    const provider = await h.fundedWallet('0', 'provider', undefined, { holderId: crypto.randomUUID() });
    const {
      user_id: _u,
      job_id: _j,
      ...body
    } = startBody({ renter: wallet, provider }, H100_X1) as Record<string, unknown>;
    const res = await start(h, { ...body, accepted_hourly_rate: '5.1' }, renter.headers);
    expect(res.statusCode, res.body).toBe(201);
    const session = res.json().session;
    expect(session.user_id).toBe(renter.id);
    expect(session.job_id).toBe(session.id);
    // Another's wallet is still another's.
    const other = await h.issuer.user(['renter']);
    const foreign = await start(h, { ...body, accepted_hourly_rate: '5.1' }, other.headers);
    expect(foreign.statusCode).toBe(403);
    // A machine client names the renter it starts for; without a registry, the model must be named.
    const service = await h.issuer.client('service');
    const { gpu_model: _m, ...unnamed } = body;
    const noUser = await start(h, unnamed, service.headers);
    expect(noUser.statusCode).toBe(400);
    expect(noUser.json()).toMatchObject({ code: 'USER_ID_REQUIRED', errors: [{ path: 'body.user_id' }] });
    const noModel = await start(h, { ...unnamed, user_id: renter.id }, service.headers);
    expect(noModel.statusCode).toBe(400);
    expect(noModel.json()).toMatchObject({ code: 'GPU_MODEL_REQUIRED', errors: [{ path: 'body.gpu_model' }] });
  });
});
