/** Pricing: the contract's rates, the breakdown, exact costs and fee split, provider rates, market factors. */
import { describe, expect, it } from 'vitest';
import { Dec } from '../src/domain/ledger/money.ts';
import { announcePrices } from '../src/domain/pricing/provider-rates.ts';
import { setupBilling, useBillingHarness } from './support/setup.ts';

const h = useBillingHarness();

const calculate = (body: Record<string, unknown>) =>
  h.app.inject({ method: 'POST', url: '/api/v1/pricing/calculate', payload: body });

describe('POST /api/v1/pricing/calculate', () => {
  it('breaks the hourly rate down and splits the cost 5 % / 95 %', async () => {
    const res = await calculate({
      gpu_model: 'NVIDIA GeForce RTX 4090',
      gpu_count: 2,
      requested_vram_mb: 24576,
      estimated_power_w: 450,
      duration_hours: '3',
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      gpu_model: 'nvidia-geforce-rtx-4090',
      rate_key: 'nvidia-geforce-rtx-4090',
      rate_source: 'platform',
      provider_id: null,
      gpu_count: 2,
      requested_vram_mb: 24576,
      estimated_power_w: 450,
      duration_hours: '3',
      base_rate_per_gpu: '0.500000',
      base_hourly_rate: '1.000000',
      vram_hourly_rate: '0.480000',
      power_hourly_rate: '0.450000',
      demand_multiplier: '1',
      supply_factor: '1',
      total_hourly_rate: '1.930000',
      platform_fee_percent: '5',
      total_cost: '5.790000',
      platform_fee: '0.289500',
      provider_earnings: '5.500500',
    });
  });

  it('prices unknown models at the default rate and accepts duration as a number', async () => {
    const res = await calculate({ gpu_model: 'Mystery GPU 9000', duration_hours: 2.5 });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({
      gpu_model: 'mystery-gpu-9000',
      rate_key: 'default',
      base_rate_per_gpu: '0.250000',
      total_hourly_rate: '0.250000',
      duration_hours: '2.5',
      total_cost: '0.625000',
      platform_fee: '0.031250',
      provider_earnings: '0.593750',
    });
  });

  it('prices a model named like a property of every object as any other: its own rate, or the default', async () => {
    const res = await calculate({ gpu_model: 'constructor', duration_hours: '1' });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ gpu_model: 'constructor', rate_key: 'default', total_cost: '0.250000' });
    // A provider may price it, and it is the only entry of that name.
    const provider = crypto.randomUUID();
    const put = await h.app.inject({
      method: 'PUT',
      url: `/api/v1/provider/${provider}/rates`,
      payload: { base_rates: { Constructor: '0.7' } },
    });
    expect(put.statusCode, put.body).toBe(200);
    const priced = await calculate({ gpu_model: 'constructor', provider_id: provider, duration_hours: '1' });
    expect(priced.json()).toMatchObject({ rate_key: 'constructor', rate_source: 'provider', total_cost: '0.700000' });
  });

  it('keeps rates exact and rounds only the derived amounts, half-even', async () => {
    // 1000 MB = 0.9765625 GB → VRAM 0.01953125/h; 0.1 h → 0.036953125 → 0.036953; fee 0.00184765 → 0.001848.
    const res = await calculate({ gpu_model: 'nvidia geforce rtx 3080', requested_vram_mb: 1000, duration_hours: 0.1 });
    expect(res.json()).toMatchObject({
      vram_hourly_rate: '0.01953125',
      total_hourly_rate: '0.36953125',
      total_cost: '0.036953',
      platform_fee: '0.001848',
      provider_earnings: '0.035105',
    });
  });

  it('answers bad input with 400 problem bodies', async () => {
    for (const body of [
      { gpu_model: 'x', duration_hours: 0 },
      { gpu_model: 'x', duration_hours: 'abc' },
      { gpu_model: 'x', duration_hours: '-1' },
      { gpu_model: 'x', gpu_count: 0 },
      { gpu_model: '' },
      { gpu_model: 'x', requested_vram_mb: -5 },
      { gpu_model: 'x', provider_id: 'nope' },
    ]) {
      const res = await calculate(body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.headers['content-type']).toContain('application/problem+json');
      expect(res.json().code).toBe('VALIDATION_ERROR');
    }
  });
});

describe('GET /api/v1/pricing/rates', () => {
  it("lists the contract's base rates, multipliers and fee", async () => {
    const res = await h.app.inject({ method: 'GET', url: '/api/v1/pricing/rates' });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.base_rates).toMatchObject({
      'nvidia-geforce-rtx-4090': '0.500000',
      'nvidia-tesla-h100': '4.000000',
      'nvidia-h200': '5.000000',
      'amd-instinct-mi250x': '1.750000',
      default: '0.250000',
    });
    expect(Object.keys(body.base_rates)).toHaveLength(13);
    expect(body).toMatchObject({
      default_rate: '0.250000',
      vram_rate_per_gb_hour: '0.020000',
      power_rate_per_watt_hour: '0.001000',
      demand_multiplier: '1',
      supply_factor: '1',
      platform_fee_percent: '5',
      storage_rate_per_gb_hour: '0.000100',
    });
  });
});

describe('provider rates', () => {
  it('change with If-Match only as they were read: a change made in between is 412, nothing written', async () => {
    const url = `/api/v1/provider/${crypto.randomUUID()}/rates`;
    const read = await h.app.inject({ method: 'GET', url });
    const never = read.headers.etag as string;
    expect(never).toMatch(/^"[\w-]{27}"$/);
    // Two owners read the same rates and change them at once: one change is written, the other refused.
    const both = await Promise.all(
      ['2.5', '3.5'].map((rate) =>
        h.app.inject({
          method: 'PUT',
          url,
          headers: { 'if-match': never },
          payload: { base_rates: { H100: rate } },
        }),
      ),
    );
    expect(both.map((r) => r.statusCode).sort()).toEqual([200, 412]);
    const won = both.find((r) => r.statusCode === 200)!;
    const lost = both.find((r) => r.statusCode === 412)!;
    expect(lost.json()).toMatchObject({ status: 412, code: 'RATES_CHANGED' });
    expect(lost.json().detail).toContain(won.headers.etag);
    const after = await h.app.inject({ method: 'GET', url });
    expect(after.json().base_rates).toEqual(won.json().base_rates);
    expect(after.headers.etag).toBe(won.headers.etag);
    expect(after.headers.etag).not.toBe(never);
    // With the tag read now it goes through, and so does `*` or a list holding it; a stale one never does.
    const stale = await h.app.inject({
      method: 'PUT',
      url,
      headers: { 'if-match': never },
      payload: { base_rates: { H100: '9' } },
    });
    expect(stale.statusCode).toBe(412);
    const current = await h.app.inject({
      method: 'PUT',
      url,
      headers: { 'if-match': `${never}, ${after.headers.etag}` },
      payload: { base_rates: { H100: '4' }, bid_floor: '1' },
    });
    expect(current.statusCode, current.body).toBe(200);
    expect(current.json()).toMatchObject({ base_rates: { 'nvidia-tesla-h100': '4' }, bid_floor: '1' });
    const any = await h.app.inject({ method: 'PUT', url, headers: { 'if-match': '*' }, payload: { base_rates: {} } });
    expect(any.statusCode).toBe(200);
    // Without If-Match a change replaces the rates whatever they are, as before.
    expect((await h.app.inject({ method: 'PUT', url, payload: { base_rates: { H100: '5' } } })).statusCode).toBe(200);
    expect((await h.app.inject({ method: 'GET', url })).json().base_rates).toEqual({ 'nvidia-tesla-h100': '5' });
  });

  it('are validated, stored, and used for that provider only', async () => {
    const provider = crypto.randomUUID();
    const url = `/api/v1/provider/${provider}/rates`;
    const empty = await h.app.inject({ method: 'GET', url });
    expect(empty.json()).toEqual({
      provider_id: provider,
      base_rates: {},
      bid_floor: null,
      vram_rate_per_gb_hour: null,
      power_rate_per_watt_hour: null,
      updated_at: null,
    });

    for (const payload of [
      { base_rates: { 'RTX 4090': '0.6', 'rtx  4090': '0.7' } },
      { base_rates: { default: '0' } },
      { base_rates: { default: '-1' } },
      { base_rates: { default: 0.3 } },
      { vram_rate_per_gb_hour: '0.1234567890123' },
    ]) {
      const bad = await h.app.inject({ method: 'PUT', url, payload });
      expect(bad.statusCode, JSON.stringify(payload)).toBe(400);
    }
    expect((await h.app.inject({ method: 'GET', url })).json().updated_at).toBeNull();
    // A body whose fields are all unknown was once a 200 that changed nothing.
    const unknown = await h.app.inject({ method: 'PUT', url, payload: { rates: { default: '0.3' } } });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json().errors).toEqual([{ path: 'body.rates', message: 'unknown field' }]);
    expect((await h.app.inject({ method: 'GET', url })).json().updated_at).toBeNull();

    const put = await h.app.inject({
      method: 'PUT',
      url,
      payload: { base_rates: { 'NVIDIA GeForce RTX 4090': '0.60', default: '0.30' }, vram_rate_per_gb_hour: '0.01' },
    });
    expect(put.statusCode).toBe(200);
    expect(put.json()).toMatchObject({
      base_rates: { 'nvidia-geforce-rtx-4090': '0.60', default: '0.30' },
      vram_rate_per_gb_hour: '0.01',
      power_rate_per_watt_hour: null,
    });
    expect((await h.app.inject({ method: 'GET', url })).json()).toEqual(put.json());
    // What GET answered can be sent back changed; its provider_id must be the path's.
    const answered = put.json() as Record<string, unknown>;
    const roundTrip = await h.app.inject({
      method: 'PUT',
      url,
      payload: { ...answered, power_rate_per_watt_hour: '0.002' },
    });
    expect(roundTrip.statusCode, roundTrip.body).toBe(200);
    expect(roundTrip.json()).toMatchObject({ power_rate_per_watt_hour: '0.002', vram_rate_per_gb_hour: '0.01' });
    const elsewhere = await h.app.inject({
      method: 'PUT',
      url,
      payload: { ...answered, provider_id: crypto.randomUUID() },
    });
    expect(elsewhere.statusCode).toBe(400);
    expect(elsewhere.json().errors[0].path).toBe('body.provider_id');
    await h.app.inject({ method: 'PUT', url, payload: answered });

    const input = { gpu_model: 'NVIDIA GeForce RTX 4090', requested_vram_mb: 2048, estimated_power_w: 100 };
    // Provider: 0.60 + 2 GB × 0.01 + 100 W × 0.001 (platform power rate) = 0.72.
    const own = await calculate({ ...input, provider_id: provider });
    expect(own.json()).toMatchObject({
      rate_source: 'provider',
      provider_id: provider,
      total_hourly_rate: '0.720000',
      total_cost: '0.720000',
      platform_fee: '0.036000',
      provider_earnings: '0.684000',
    });
    // The platform: 0.50 + 2 × 0.02 + 0.1 = 0.64.
    expect((await calculate(input)).json().total_hourly_rate).toBe('0.640000');
    expect((await calculate({ ...input, provider_id: crypto.randomUUID() })).json().total_hourly_rate).toBe('0.640000');
    // A model the provider did not list: the provider's default.
    const other = await calculate({ gpu_model: 'NVIDIA Tesla A100', provider_id: provider });
    expect(other.json()).toMatchObject({ rate_key: 'default', rate_source: 'provider', total_hourly_rate: '0.300000' });
  });
});

describe("announcing providers' rates to the market", () => {
  it('records a change with its announcement; a start announces only rates never announced as they are, once', async () => {
    const announced = async (provider: string) =>
      (
        await h.db.selectFrom('outbox_events').select('payload').where('kind', '=', 'pricing.provider_rates').execute()
      ).filter((r) => JSON.stringify(r.payload).includes(provider)).length;
    const [set, older] = [crypto.randomUUID(), crypto.randomUUID()];
    const put = await h.app.inject({
      method: 'PUT',
      url: `/api/v1/provider/${set}/rates`,
      payload: { base_rates: { default: '0.30' } },
    });
    expect(put.statusCode).toBe(200);
    expect(await announced(set)).toBe(1);
    // Rates stored before the market existed were never announced.
    await h.db
      .insertInto('provider_rates')
      .values({
        provider_id: older,
        base_rates: '{"default":"0.4"}',
        vram_rate_per_gb_hour: null,
        power_rate_per_watt_hour: null,
      })
      .execute();
    // Two instances starting at once, then a restart: the older rates once, the set ones not again.
    await Promise.all([announcePrices(h.ctx), announcePrices(h.ctx)]);
    await announcePrices(h.ctx);
    expect(await announced(older)).toBe(1);
    expect(await announced(set)).toBe(1);
  });
});

describe('provider rate input', () => {
  it('refuses rate strings with spaces, commas, NUL or nothing, and rates above the documented limits', async () => {
    const url = `/api/v1/provider/${crypto.randomUUID()}/rates`;
    const put = (payload: Record<string, unknown>) => h.app.inject({ method: 'PUT', url, payload });
    for (const rate of [' 1', '1 ', '1 .5', '1,5', '1,000', '', ' ', '1\u0000', '\u0000', '0x10', '1e3']) {
      const res = await put({ base_rates: { default: rate } });
      expect(res.statusCode, JSON.stringify(rate)).toBe(400);
      expect(res.json().errors[0].path).toMatch(/^body\.base_rates/);
    }
    for (const model of ['', ' ', '\u0000']) {
      const res = await put({ base_rates: { [model]: '1' } });
      expect(res.statusCode, JSON.stringify(model)).toBe(400);
    }
    const vram = await put({ vram_rate_per_gb_hour: '1,5' });
    expect(vram.statusCode).toBe(400);
    // pricing.provider_rate_limits: 1000 per GPU-hour, 10 per GB-hour, 1 per W-hour.
    const high = await put({ base_rates: { 'NVIDIA H100 80GB HBM3': '1000.000001' } });
    expect(high.statusCode).toBe(400);
    expect(high.json()).toMatchObject({ code: 'RATE_OUT_OF_BOUNDS', limit: '1000' });
    expect(high.json().errors[0].path).toBe('body.base_rates.nvidia-tesla-h100');
    expect((await put({ vram_rate_per_gb_hour: '10.5' })).json().code).toBe('RATE_OUT_OF_BOUNDS');
    expect((await put({ power_rate_per_watt_hour: '1.01' })).json().code).toBe('RATE_OUT_OF_BOUNDS');
    expect((await h.app.inject({ method: 'GET', url })).json().updated_at).toBeNull();
    expect((await put({ base_rates: { default: '1000' }, vram_rate_per_gb_hour: '10' })).statusCode).toBe(200);
  });
});

describe('market factors', () => {
  it('multiply the hourly rate when plugged in', async () => {
    const priced = await setupBilling({
      market: { demandMultiplier: () => new Dec('1.5'), supplyFactor: () => new Dec('0.8') },
    });
    try {
      const res = await priced.app.inject({
        method: 'POST',
        url: '/api/v1/pricing/calculate',
        payload: { gpu_model: 'nvidia-tesla-h100', duration_hours: '2' },
      });
      // 4.00 × 1.5 × 0.8 = 4.8/h; 2 h = 9.6; fee 0.48.
      expect(res.json()).toMatchObject({
        demand_multiplier: '1.5',
        supply_factor: '0.8',
        total_hourly_rate: '4.800000',
        total_cost: '9.600000',
        platform_fee: '0.480000',
        provider_earnings: '9.120000',
      });
    } finally {
      await priced.close();
    }
  });
});

describe('OpenAPI', () => {
  it('documents the pricing, rates, session and usage operations with their error responses', async () => {
    const doc = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const ops: Record<string, string[]> = {
      '/api/v1/pricing/calculate': ['post'],
      '/api/v1/pricing/rates': ['get'],
      '/api/v1/provider/{providerID}/rates': ['get', 'put'],
      '/api/v1/billing/start-session': ['post'],
      '/api/v1/billing/end-session': ['post'],
      '/api/v1/billing/usage-update': ['post'],
      '/api/v1/billing/current-usage/{sessionID}': ['get'],
      '/api/v1/billing/history': ['get'],
    };
    for (const [path, methods] of Object.entries(ops)) {
      for (const m of methods) {
        const op = doc.paths[path]?.[m];
        expect(op, `${m} ${path}`).toBeDefined();
        expect(op.summary).toBeTruthy();
        expect(op.tags?.length).toBeGreaterThan(0);
        if (path !== '/api/v1/pricing/rates') expect(op.responses['400'], `${m} ${path}`).toBeDefined();
      }
    }
    expect(doc.paths['/api/v1/billing/start-session'].post.responses['402']).toBeDefined();
    expect(doc.paths['/api/v1/billing/usage-update'].post.responses['409']).toBeDefined();
  });
});
