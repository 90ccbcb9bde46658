/**
 * The market (issue #28): offers of idle machines' healthy GPUs, priced from billing's price card and a machine's own
 * rates (newest kept), kept in step with statuses, GPU health and reliability by the database, searched by renters
 * with filters, sorts and keyset pages, and showing nothing of owners or addresses. Against real PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { Decimal } from 'decimal.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliver, endRental, gpu, type Harness, register, rent, startHarness } from './helpers.ts';

let h: Harness;
// Each test's machines carry a region of their own, so a search sees only them.
const region = () => `r-${randomUUID().slice(0, 8)}`;

beforeAll(async () => {
  h = await startHarness({ nats: false });
});
afterAll(() => h?.close());

const CARD = {
  base_rates: { 'nvidia-tesla-h100': '4.00', 'nvidia-tesla-a100': '2.00', default: '0.25' },
  vram_rate_per_gb_hour: '0.02',
  power_rate_per_watt_hour: '0.001',
  factors: { default: { demand: '1', supply: '1' } },
};

/** Billing's card (`pricing.platform_rates`) made at `at`; whether the market keeps it (false: it held a newer one). */
async function putCard(card: object, at = new Date()) {
  const res = await deliver(h.app, 'pricing.platform_rates', { card: { ...card, occurred_at: at.toISOString() } });
  expect(res.statusCode, res.body).toBe(200);
  // The offers are priced again in the background: a search after this one sees the card.
  await h.app.market.settled();
  const kept = await h.database.db.selectFrom('price_card').select('occurred_at').executeTakeFirst();
  return kept?.occurred_at.getTime() === at.getTime();
}

/** An offer as the search answers it (the fields these tests read). */
interface OfferJson {
  provider_id: string;
  price_per_gpu_hour: string;
  free_gpus: number;
  reliability: { score: number; uptime_30d: number | null };
  [field: string]: unknown;
}

async function offers(query: string, headers?: Record<string, string>) {
  const res = await h.app.inject({ method: 'GET', url: `/offers?${query}`, headers });
  expect(res.statusCode, res.body).toBe(200);
  return { items: res.json() as OfferJson[], next: res.headers['x-next-cursor'] as string | undefined };
}

const H100 = {
  model_name: 'NVIDIA H100 80GB HBM3',
  vram: 81559,
  power_consumption: 700,
  architecture: 'Hopper',
  compute_capability: '9.0',
};
/** A GPU-hour of an H100 on the platform's card: 4.00 + 81559/1024 GB × 0.02 + 700 W × 0.001. */
const H100_HOUR = new Decimal('4.00').plus(new Decimal(81559).div(1024).mul('0.02')).plus('0.7');

describe('offers', () => {
  it('are listed once billing has said its prices, priced per GPU-hour as billing charges', async () => {
    const where = region();
    const machine = await register(h.app, { location: where, gpus: [gpu(H100), gpu(H100), gpu(H100), gpu(H100)] });
    await putCard(CARD);
    const { items } = await offers(`region=${where}`);
    expect(items).toHaveLength(1);
    expect(items[0]).toMatchObject({
      provider_id: machine.id,
      gpu_model: 'NVIDIA H100 80GB HBM3',
      model_key: 'nvidia-tesla-h100',
      gpu_count: 4,
      free_gpus: 4,
      vram_mb: 81559,
      architecture: 'Hopper',
      compute_capability: '9.0',
      region: where,
      reliability: { score: 1, sessions_ended: 0, sessions_failed: 0 },
    });
    expect(new Decimal(items[0]!.price_per_gpu_hour).eq(H100_HOUR)).toBe(true);
  });

  it("take a machine's own rates over the platform's, the newest rates only", async () => {
    const where = region();
    const machine = await register(h.app, { location: where, gpus: [gpu(H100)] });
    await putCard(CARD);
    const set = async (rates: object, at: Date) => {
      const res = await deliver(h.app, 'pricing.provider_rates', {
        provider_id: machine.id,
        rates: { vram_rate_per_gb_hour: null, power_rate_per_watt_hour: null, ...rates, occurred_at: at.toISOString() },
      });
      expect(res.statusCode, res.body).toBe(200);
      await h.app.market.settled();
    };
    const now = Date.now();
    // The platform's rates: the offer says so, and its parts add up to its price.
    const [platform] = (await offers(`region=${where}`)).items;
    expect(platform!.price_parts).toEqual({
      base: '4',
      base_source: 'platform',
      vram: expect.any(String),
      vram_gb: '79.647',
      vram_rate_per_gb_hour: '0.02',
      vram_rate_source: 'platform',
      power: '0.7',
      power_w: '700',
      power_rate_per_watt_hour: '0.001',
      power_rate_source: 'platform',
      demand_multiplier: '1',
      supply_factor: '1',
    });
    await set({ base_rates: { default: '10' } }, new Date(now));
    const own = new Decimal('10').plus(new Decimal(81559).div(1024).mul('0.02')).plus('0.7');
    const [mine] = (await offers(`region=${where}`)).items;
    expect(new Decimal(mine!.price_per_gpu_hour).eq(own)).toBe(true);
    // The machine's own base rate, the platform's VRAM and power rates; the parts add up to the price.
    const parts = mine!.price_parts as Record<string, string>;
    expect(parts).toMatchObject({ base: '10', base_source: 'provider', vram_rate_source: 'platform' });
    const sum = new Decimal(parts.base!).plus(parts.vram!).plus(parts.power!);
    expect(sum.mul(parts.demand_multiplier!).mul(parts.supply_factor!).eq(mine!.price_per_gpu_hour)).toBe(true);
    // Older rates, arriving late: ignored.
    await set({ base_rates: { default: '1' } }, new Date(now - 60_000));
    expect(new Decimal((await offers(`region=${where}`)).items[0]!.price_per_gpu_hour).eq(own)).toBe(true);
    // A VRAM rate of its own, the platform's base rate.
    await set({ base_rates: {}, vram_rate_per_gb_hour: '0.05' }, new Date(now + 1));
    const [vram] = (await offers(`region=${where}`)).items;
    expect(vram!.price_parts).toMatchObject({
      base: '4',
      base_source: 'platform',
      vram_rate_per_gb_hour: '0.05',
      vram_rate_source: 'provider',
    });
    // Rates for a machine the registry does not know: nothing to price.
    const unknown = await deliver(h.app, 'pricing.provider_rates', {
      provider_id: randomUUID(),
      rates: {
        base_rates: {},
        vram_rate_per_gb_hour: null,
        power_rate_per_watt_hour: null,
        occurred_at: new Date().toISOString(),
      },
    });
    expect(unknown.statusCode, unknown.body).toBe(200);
  });

  it("group a machine's GPUs by billing's model key, priced on the healthy ones' average as billing charges", async () => {
    const where = region();
    await putCard(CARD);
    // Two H100 variants are one model to billing (one base rate): one offer, its VRAM the smallest, its price on the
    // healthy GPUs' average VRAM and power.
    const PCIE = { ...H100, model_name: 'NVIDIA H100 PCIe', vram: 40960, power_consumption: 350 };
    const machine = await register(h.app, { location: where, gpus: [gpu(H100), gpu(PCIE)] });
    const hourOf = (vram: number, watts: number) =>
      new Decimal('4.00').plus(new Decimal(vram).div(1024).mul('0.02')).plus(new Decimal(watts).mul('0.001'));
    const [both] = (await offers(`region=${where}`)).items;
    expect(both).toMatchObject({
      model_key: 'nvidia-tesla-h100',
      model_names: ['NVIDIA H100 80GB HBM3', 'NVIDIA H100 PCIe'],
      gpu_count: 2,
      free_gpus: 2,
      vram_mb: 40960,
    });
    expect(new Decimal(both!.price_per_gpu_hour).eq(hourOf((81559 + 40960) / 2, (700 + 350) / 2))).toBe(true);
    // The PCIe card turns unhealthy: the offer is the 80 GB card alone, at its price.
    const beat = await h.app.inject({
      method: 'POST',
      url: `/providers/${machine.id}/heartbeat`,
      payload: { gpu_metrics: [{ index: 1, is_healthy: false }] },
    });
    expect(beat.statusCode).toBe(200);
    const [one] = (await offers(`region=${where}`)).items;
    expect(one).toMatchObject({ free_gpus: 1, vram_mb: 81559 });
    expect(new Decimal(one!.price_per_gpu_hour).eq(H100_HOUR)).toBe(true);
    // A search by the model's key finds it.
    expect((await offers(`region=${where}&gpu_model=nvidia-tesla-h100`)).items).toHaveLength(1);
  });

  it('leave the market while the machine is rented, offline or without healthy GPUs, and come back', async () => {
    const where = region();
    await putCard(CARD);
    const machine = await register(h.app, { location: where, gpus: [gpu(H100), gpu(H100)] });
    const listed = async () => (await offers(`region=${where}`)).items.map((o) => o.free_gpus);
    expect(await listed()).toEqual([2]);
    const session = await rent(h.app, machine.id);
    expect(await listed()).toEqual([]);
    await endRental(h.app, machine.id, session);
    expect(await listed()).toEqual([2]);

    // One GPU turns unhealthy (a heartbeat's metrics): one free.
    const beat = (healthy: boolean) =>
      h.app.inject({
        method: 'POST',
        url: `/providers/${machine.id}/heartbeat`,
        payload: { gpu_metrics: [{ index: 1, is_healthy: healthy }] },
      });
    expect((await beat(false)).statusCode).toBe(200);
    expect(await listed()).toEqual([1]);
    expect((await offers(`region=${where}&min_free_gpus=2`)).items).toEqual([]);
    expect((await beat(true)).statusCode).toBe(200);
    expect(await listed()).toEqual([2]);

    const set = (status: string) =>
      h.app.inject({ method: 'PATCH', url: `/providers/${machine.id}/status`, payload: { status } });
    await set('maintenance');
    expect(await listed()).toEqual([]);
    // A scheduler asking what could ever be rented still finds it, by the group's size rather than its free GPUs.
    const any = async (q: string) => (await offers(`region=${where}&availability=any${q}`)).items;
    expect((await any('&min_gpus=2')).map((o) => [o.provider_id, o.gpu_count, o.free_gpus])).toEqual([
      [machine.id, 2, 0],
    ]);
    expect(await any('&min_gpus=3')).toEqual([]);
    await set('idle');
    expect(await listed()).toEqual([2]);
  });

  it('filter by price, model, VRAM, architecture, versions and reliability', async () => {
    const where = region();
    await putCard(CARD);
    const a100 = await register(h.app, { location: where, gpus: [gpu({ driver_version: '535.104.05' })] });
    const h100 = await register(h.app, { location: where, gpus: [gpu({ ...H100, driver_version: '550.54.15' })] });
    const ids = async (q: string) => (await offers(`region=${where}&${q}`)).items.map((o) => o.provider_id);
    expect(await ids('sort=price')).toEqual([a100.id, h100.id]);
    expect(await ids('max_price=5')).toEqual([a100.id]);
    expect(await ids('gpu_model=H100')).toEqual([h100.id]);
    expect(await ids('gpu_model=NVIDIA%20A100-SXM4-80GB')).toEqual([a100.id]);
    expect(await ids('min_vram=81900')).toEqual([a100.id]);
    expect(await ids('architecture=hopper')).toEqual([h100.id]);
    expect(await ids('min_driver_version=550')).toEqual([h100.id]);
    expect(await ids('min_driver_version=535.104.5')).toEqual([a100.id, h100.id]);
    expect(await ids('min_driver_version=535.104.6')).toEqual([h100.id]);
    expect(await ids('min_compute_capability=8.6')).toEqual([h100.id]);

    // The H100 goes offline for a while: its reliability falls below the A100's.
    await h.app.inject({ method: 'PATCH', url: `/providers/${h100.id}/status`, payload: { status: 'offline' } });
    const { sql } = await import('kysely');
    await sql`UPDATE providers SET status_since = now() - interval '1 hour' WHERE id = ${h100.id}`.execute(
      h.database.db,
    );
    await h.app.inject({ method: 'PATCH', url: `/providers/${h100.id}/status`, payload: { status: 'idle' } });
    expect(await ids('min_reliability=0.99')).toEqual([a100.id]);
    expect(await ids('sort=-reliability')).toEqual([a100.id, h100.id]);
    const scored = (await offers(`region=${where}&sort=reliability`)).items;
    expect(scored[0]!.reliability.score).toBeLessThan(1);
    expect(scored[0]!.reliability.uptime_30d).toBeLessThan(1);
  });

  it('filter by the disk each workload gets, as the machine states it (kept by a full update that leaves it out)', async () => {
    const where = region();
    await putCard(CARD);
    const big = await register(h.app, { location: where, disk_mb: 512_000 });
    const small = await register(h.app, { location: where, disk_mb: 20_480 });
    const unsaid = await register(h.app, { location: where });
    expect(big.disk_mb).toBe(512_000);
    expect(unsaid.disk_mb).toBeNull();
    const found = async (q: string) =>
      (await offers(`region=${where}&${q}`)).items.map((o) => [o.provider_id, o.disk_mb]);
    expect(await found('min_disk=100000')).toEqual([[big.id, 512_000]]);
    expect((await found('min_disk=20480')).map(([id]) => id).sort()).toEqual([big.id, small.id].sort());
    expect(await found('sort=price')).toHaveLength(3);
    // A full update without it keeps it (a daemon or a tool that does not know the field); null says none.
    const { id: _id, registered_at: _at, last_seen_at: _seen, ...body } = small;
    const { disk_mb: _disk, ...without } = body as Record<string, unknown>;
    const kept = await h.app.inject({ method: 'PUT', url: `/providers/${small.id}`, payload: without });
    expect(kept.statusCode, kept.body).toBe(200);
    expect(kept.json().disk_mb).toBe(20_480);
    expect((await found('min_disk=20480')).map(([id]) => id)).toContain(small.id);
    const cleared = await h.app.inject({
      method: 'PUT',
      url: `/providers/${small.id}`,
      payload: { ...without, disk_mb: null },
    });
    expect(cleared.json().disk_mb).toBeNull();
    expect((await found('min_disk=1')).map(([id]) => id)).toEqual([big.id]);
    expect((await h.app.inject({ method: 'GET', url: '/offers?min_disk=-1' })).statusCode).toBe(400);
    // Past what the column holds (about 2 PB): a 400 naming the field, on a search and on the machine alike.
    const past = await h.app.inject({ method: 'GET', url: '/offers?min_disk=2147483648' });
    expect(past.statusCode, past.body).toBe(400);
    expect((await h.app.inject({ method: 'GET', url: '/offers?min_disk=2147483647' })).statusCode).toBe(200);
    const huge = await h.app.inject({
      method: 'PUT',
      url: `/providers/${small.id}`,
      payload: { ...without, disk_mb: 4_294_967_295 },
    });
    expect(huge.statusCode, huge.body).toBe(400);
    expect(huge.json().errors).toEqual([expect.objectContaining({ path: 'body.disk_mb' })]);
  });

  it('are found at a bid: filtered by the bid floor and sorted by it, the floor following the rates', async () => {
    const where = region();
    await putCard(CARD);
    // Two at the same floor: the machine's ID orders them, across a page's end too.
    const floors = ['1.5', '0.75', '2', null, '0.9', '1.5'];
    const registered = [];
    for (const _ of floors) registered.push(await register(h.app, { location: where, gpus: [gpu(H100)] }));
    const machines = registered.map((m) => m.id);
    const setFloor = async (machine: string, bidFloor: string | null, at = new Date()) => {
      const res = await deliver(h.app, 'pricing.provider_rates', {
        provider_id: machine,
        rates: {
          base_rates: {},
          vram_rate_per_gb_hour: null,
          power_rate_per_watt_hour: null,
          bid_floor: bidFloor,
          occurred_at: at.toISOString(),
        },
      });
      expect(res.statusCode, res.body).toBe(200);
    };
    for (const [i, floor] of floors.entries()) await setFloor(machines[i]!, floor);
    // A floor of 0 is none billing ever sends (null: no bids): refused as malformed, nothing changed.
    for (const zero of ['0', '0.000']) {
      const res = await deliver(h.app, 'pricing.provider_rates', {
        provider_id: machines[0],
        rates: {
          base_rates: {},
          vram_rate_per_gb_hour: null,
          power_rate_per_watt_hour: null,
          bid_floor: zero,
          occurred_at: new Date().toISOString(),
        },
      });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.body).toContain('more than 0');
    }
    const ids = (items: OfferJson[]) => items.map((o) => o.provider_id);
    const floorOf = (o: OfferJson) => (o.interruptible as { bid_floor: string } | null)?.bid_floor;
    // At most 1: the machines whose floor a bid of 1 meets, and no machine that takes no bids.
    expect(ids((await offers(`region=${where}&max_bid=1`)).items).sort()).toEqual([machines[1], machines[4]].sort());
    expect((await offers(`region=${where}&max_bid=0.74`)).items).toEqual([]);
    expect(ids((await offers(`region=${where}&max_bid=2`)).items)).toHaveLength(5);
    // By the floor: only the machines that take bids, lowest first (or highest), a keyset page at a time.
    const byFloor = async (sort: string) => {
      const seen: OfferJson[] = [];
      let cursor: string | undefined;
      do {
        const page = await offers(`region=${where}&sort=${sort}&limit=2${cursor ? `&cursor=${cursor}` : ''}`);
        seen.push(...page.items);
        cursor = page.next;
      } while (cursor);
      return seen;
    };
    const [tieFirst, tieSecond] = [machines[0]!, machines[5]!].sort();
    const ascending = [machines[1], machines[4], tieFirst, tieSecond, machines[2]];
    expect(ids(await byFloor('bid_floor'))).toEqual(ascending);
    expect((await byFloor('bid_floor')).map(floorOf)).toEqual(['0.75', '0.9', '1.5', '1.5', '2']);
    expect(ids(await byFloor('-bid_floor'))).toEqual([...ascending].reverse());
    expect((await offers(`region=${where}&sort=bid_floor&max_bid=1.5`)).items.map(floorOf)).toEqual([
      '0.75',
      '0.9',
      '1.5',
      '1.5',
    ]);
    // A cursor of one direction is refused by the other.
    const firstPage = await offers(`region=${where}&sort=bid_floor&limit=2`);
    const turned = await h.app.inject({ method: 'GET', url: `/offers?sort=-bid_floor&cursor=${firstPage.next}` });
    expect(turned.statusCode).toBe(400);
    // The floor follows the machine's rates: raised, dropped (no bids taken), taken up by one that took none.
    await setFloor(machines[1]!, '3');
    await setFloor(machines[4]!, null);
    await setFloor(machines[3]!, '0.5');
    expect((await byFloor('bid_floor')).map((o) => [o.provider_id, floorOf(o)])).toEqual([
      [machines[3], '0.5'],
      [tieFirst, '1.5'],
      [tieSecond, '1.5'],
      [machines[2], '2'],
      [machines[1], '3'],
    ]);
    // A machine's GPUs written again (a full update) keep the floor on its new offers.
    const { id: _id, registered_at: _at, last_seen_at: _seen, ...body } = registered[3]!;
    const update = await h.app.inject({
      method: 'PUT',
      url: `/providers/${machines[3]}`,
      payload: { ...body, gpus: [gpu(H100), gpu(H100)] },
    });
    expect(update.statusCode, update.body).toBe(200);
    const [updated] = (await offers(`region=${where}&max_bid=0.5`)).items;
    expect(updated).toMatchObject({ provider_id: machines[3], gpu_count: 2, interruptible: { bid_floor: '0.5' } });
    // Off the market (rented): not found at a bid either, but among every group (what a bid to take GPUs back reads).
    await rent(h.app, machines[3]!);
    expect((await offers(`region=${where}&max_bid=0.5`)).items).toEqual([]);
    expect(ids((await offers(`region=${where}&max_bid=0.5&availability=any`)).items)).toEqual([machines[3]]);
    // Held by its owner (an explicit busy): billing rents none of its GPUs at any bid, so none is offered at one.
    const before = (await offers(`region=${where}&max_bid=2&availability=any`)).items.find(
      (o) => o.provider_id === machines[2],
    );
    expect(before?.interruptible).toMatchObject({ gpus: 1 });
    const hold = await h.app.inject({
      method: 'PATCH',
      url: `/providers/${machines[2]}/status`,
      payload: { status: 'busy' },
    });
    expect(hold.json()).toMatchObject({ status: 'busy' });
    const machine = await h.app.inject({ method: 'GET', url: `/providers/${machines[2]}` });
    expect(machine.json()).toMatchObject({ status: 'busy', held: true });
    const held = (await offers(`region=${where}&max_bid=2&availability=any`)).items.find(
      (o) => o.provider_id === machines[2],
    );
    expect(held?.interruptible).toEqual({ bid_floor: '2', gpus: 0, winning_bid: null, outbid_above: null });
  });

  it('page through the market by keyset in each order, every offer once', async () => {
    const where = region();
    await putCard(CARD);
    const made: string[] = [];
    for (let i = 0; i < 7; i++) {
      made.push((await register(h.app, { location: where, gpus: [gpu({ vram: 40000 + i * 1024 })] })).id);
    }
    for (const sort of ['price', '-price', 'vram_price', '-vram_price', 'reliability', '-reliability']) {
      const seen: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await offers(`region=${where}&sort=${sort}&limit=3${cursor ? `&cursor=${cursor}` : ''}`);
        seen.push(...page.items.map((o) => o.provider_id));
        cursor = page.next;
      } while (cursor);
      expect(seen.sort(), sort).toEqual([...made].sort());
    }
    const cheapest = (await offers(`region=${where}&sort=price`)).items.map((o) => o.price_per_gpu_hour);
    expect(cheapest).toEqual([...cheapest].sort((x, y) => new Decimal(x).cmp(y)));
    // Per GB of VRAM: the price per GPU-hour over the smallest VRAM in GB, to 9 decimals; the largest VRAM, dearest
    // per GPU-hour, is the cheapest per GB here.
    const perGb = (await offers(`region=${where}&sort=vram_price`)).items;
    for (const o of perGb) {
      const expected = new Decimal(o.price_per_gpu_hour)
        .mul(1024)
        .div(o.vram_mb as number)
        .toDecimalPlaces(9);
      expect(new Decimal(o.price_per_vram_gb_hour as string).eq(expected)).toBe(true);
    }
    expect(perGb.map((o) => o.vram_mb)).toEqual(perGb.map((o) => o.vram_mb as number).sort((x, y) => y - x));
    expect(perGb.map((o) => o.provider_id)).toEqual(
      (await offers(`region=${where}&sort=-vram_price`)).items.map((o) => o.provider_id).reverse(),
    );
  });

  it('are searched by renters with their own token, and show nothing of owners or addresses', async () => {
    const where = region();
    await putCard(CARD);
    await register(h.app, {
      location: where,
      owner_id: 'someone',
      hostname: 'secret.example',
      ip_address: '198.51.100.7',
    });
    const renter = await h.issuer.user(['renter']);
    const { items } = await offers(`region=${where}`, renter.headers);
    expect(items).toHaveLength(1);
    const text = JSON.stringify(items);
    for (const secret of ['someone', 'secret.example', '198.51.100.7']) expect(text).not.toContain(secret);
    expect((await h.app.inject({ method: 'GET', url: '/offers', headers: { authorization: '' } })).statusCode).toBe(
      401,
    );
    // Only billing (a service) and admins set prices.
    const refused = await deliver(
      h.app,
      'pricing.platform_rates',
      { card: { ...CARD, occurred_at: new Date().toISOString() } },
      renter.headers,
    );
    expect(refused.statusCode).toBe(403);
  });

  it('refuse malformed searches and forged cursors with 400', async () => {
    for (const q of [
      'max_price=-1',
      'max_price=1e3',
      'max_bid=-1',
      'max_bid=0.5.1',
      'min_free_gpus=0',
      'min_gpus=0',
      'availability=some',
      'min_reliability=2',
      'min_driver_version=abc',
      'sort=cheap',
      'limit=0',
      'limit=1001',
      'limit=1e2',
    ]) {
      const res = await h.app.inject({ method: 'GET', url: `/offers?${q}` });
      expect(res.statusCode, q).toBe(400);
    }
    // The platform's page size: up to 1000, as every list.
    expect((await h.app.inject({ method: 'GET', url: '/offers?limit=1000' })).statusCode).toBe(200);
    const forged = (values: unknown[]) => Buffer.from(JSON.stringify(values)).toString('base64url');
    for (const cursor of [
      'garbage',
      forged(['price', '1', 'not-a-uuid', 'x']),
      // A NUL no stored text can hold (the database refuses it).
      forged(['price', '1', crypto.randomUUID(), 'a\u0000b']),
    ]) {
      const res = await h.app.inject({ method: 'GET', url: `/offers?cursor=${cursor}` });
      expect(res.statusCode, cursor).toBe(400);
      expect(res.json().code).toBe('INVALID_CURSOR');
    }
    // A cursor of another sort.
    const where = region();
    await putCard(CARD);
    for (let i = 0; i < 2; i++) await register(h.app, { location: where });
    const page = await offers(`region=${where}&limit=1`);
    const other = await h.app.inject({ method: 'GET', url: `/offers?sort=-reliability&cursor=${page.next}` });
    expect(other.statusCode).toBe(400);
  });

  it('keep the newest price card only', async () => {
    const where = region();
    await register(h.app, { location: where, gpus: [gpu(H100)] });
    const now = Date.now();
    expect(
      await putCard({ ...CARD, base_rates: { ...CARD.base_rates, 'nvidia-tesla-h100': '5' } }, new Date(now + 1000)),
    ).toBe(true);
    expect(await putCard(CARD, new Date(now))).toBe(false);
    const price = new Decimal((await offers(`region=${where}`)).items[0]!.price_per_gpu_hour);
    expect(price.eq(H100_HOUR.plus(1))).toBe(true);
    // Back to the test card for the others (newest).
    expect(await putCard(CARD, new Date(now + 2000))).toBe(true);
  });
});
