/**
 * The owner's hold: an explicit `busy` (the spec's own example of an explicit status change, "to `maintenance` or
 * `busy`") takes a machine off the market whether or not it is rented. No offer shows it, heartbeats keep it busy
 * (a GPU's health changing, a revival after silence), a session's end does not bring it back to idle, and the
 * provider shows `held: true` (billing refuses to start a rental on it). Only the owner's explicit `idle` lifts the
 * hold, and `idle` is still refused while the machine is rented.
 */
import { randomBytes } from 'node:crypto';
import type { Caller } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ageProvider,
  deliver,
  endRental,
  gpu,
  type Harness,
  providerBody,
  register,
  rent,
  startHarness,
} from './helpers.ts';

let h: Harness;
let owner: Caller;
let daemon: Caller;

const CARD = {
  base_rates: { default: '0.25' },
  vram_rate_per_gb_hour: '0.02',
  power_rate_per_watt_hour: '0.001',
  factors: { default: { demand: '1', supply: '1' } },
};

beforeAll(async () => {
  h = await startHarness({ nats: false });
  owner = await h.issuer.user(['provider']);
  daemon = await h.issuer.client('daemon', owner.id);
  const card = await deliver(h.app, 'pricing.platform_rates', {
    card: { ...CARD, occurred_at: new Date().toISOString() },
  });
  expect(card.statusCode, card.body).toBe(200);
});
afterAll(async () => {
  await h?.close();
  await h?.testDb.drop();
});

const region = () => `hold-${randomBytes(4).toString('hex')}`;

const patch = (id: string, status: string, caller: Caller = owner) =>
  h.app.inject({ method: 'PATCH', url: `/providers/${id}/status`, payload: { status }, headers: caller.headers });

const read = async (id: string) =>
  (await h.app.inject({ url: `/providers/${id}`, headers: owner.headers })).json() as {
    status: string;
    held: boolean;
  };

/** The machines the market lists in a region. */
async function offered(where: string): Promise<string[]> {
  await h.app.market.settled();
  const res = await h.app.inject({ url: `/offers?region=${where}` });
  expect(res.statusCode, res.body).toBe(200);
  return (res.json() as { provider_id: string }[]).map((o) => o.provider_id);
}

const heartbeat = (id: string, body?: object) =>
  h.app.inject({ method: 'POST', url: `/providers/${id}/heartbeat`, headers: daemon.headers, payload: body });

describe("an owner's hold (explicit busy)", () => {
  it('takes a free machine off the market, through heartbeats and a revival after silence, until idle', async () => {
    const where = region();
    const p = await register(h.app, { owner_id: owner.id, location: where, gpus: [gpu(), gpu()] });
    expect(await offered(where)).toEqual([p.id]);

    const held = await patch(p.id, 'busy');
    expect(held.statusCode, held.body).toBe(200);
    expect(held.json()).toMatchObject({ previous_status: 'idle', status: 'busy' });
    expect(await read(p.id)).toMatchObject({ status: 'busy', held: true });
    expect(await offered(where)).toEqual([]);

    // Heartbeats keep it busy: without metrics, and with a GPU's health changing (which applies the rental rule).
    expect((await heartbeat(p.id)).json()).toMatchObject({ previous_status: 'busy', status: 'busy' });
    const sick = await heartbeat(p.id, { gpu_metrics: [{ index: 1, is_healthy: false }] });
    expect(sick.json()).toMatchObject({ status: 'busy' });
    const well = await heartbeat(p.id, { gpu_metrics: [{ index: 1, is_healthy: true }] });
    expect(well.json()).toMatchObject({ status: 'busy' });
    expect(await read(p.id)).toMatchObject({ status: 'busy', held: true });

    // Silent, it goes offline; its next heartbeat brings it back busy, not idle: still held.
    await ageProvider(h.database, p.id, 10 * 60_000);
    await h.app.registry.sweepOffline();
    expect((await read(p.id)).status).toBe('offline');
    expect((await heartbeat(p.id)).json()).toMatchObject({ previous_status: 'offline', status: 'busy' });
    expect(await offered(where)).toEqual([]);

    // A rental's start and end (a session billing had begun before the hold) leave it held.
    const session = await rent(h.app, p.id);
    await endRental(h.app, p.id, session);
    expect(await read(p.id)).toMatchObject({ status: 'busy', held: true });

    // The owner's idle lifts the hold: on the market again.
    const back = await patch(p.id, 'idle');
    expect(back.json()).toMatchObject({ previous_status: 'busy', status: 'idle' });
    expect(await read(p.id)).toMatchObject({ status: 'idle', held: false });
    expect(await offered(where)).toEqual([p.id]);
  });

  it('outlives maintenance or an error: the machine comes back busy until its owner says idle', async () => {
    const p = await register(h.app, { owner_id: owner.id });
    expect((await patch(p.id, 'busy')).statusCode).toBe(200);
    expect((await patch(p.id, 'error', daemon)).json()).toMatchObject({ status: 'error' });
    expect((await heartbeat(p.id)).json()).toMatchObject({ previous_status: 'error', status: 'busy' });
    expect((await patch(p.id, 'maintenance')).json()).toMatchObject({ status: 'maintenance' });
    expect((await read(p.id)).held).toBe(true);
    expect((await patch(p.id, 'idle')).json()).toMatchObject({ status: 'idle' });
    expect((await read(p.id)).held).toBe(false);
  });

  it('is what a registration or a full update with status busy asks for', async () => {
    const born = await h.app.inject({
      method: 'POST',
      url: '/providers',
      payload: providerBody({ owner_id: owner.id, status: 'busy' }),
      headers: daemon.headers,
    });
    expect(born.statusCode, born.body).toBe(201);
    expect(born.json()).toMatchObject({ status: 'busy', held: true });

    const p = await register(h.app, { owner_id: owner.id });
    const put = await h.app.inject({
      method: 'PUT',
      url: `/providers/${p.id}`,
      payload: providerBody({ owner_id: owner.id, status: 'busy' }),
      headers: owner.headers,
    });
    expect(put.statusCode, put.body).toBe(200);
    expect(put.json()).toMatchObject({ status: 'busy', held: true });
    // A Provider as GET answers it may be sent back: `held` is read-only there.
    const again = await h.app.inject({
      method: 'PUT',
      url: `/providers/${p.id}`,
      payload: { ...providerBody({ owner_id: owner.id }), held: false },
      headers: owner.headers,
    });
    expect(again.statusCode, again.body).toBe(200);
    expect(again.json()).toMatchObject({ status: 'busy', held: true });
  });

  it('is found by discovery as busy', async () => {
    const where = region();
    const p = await register(h.app, { owner_id: owner.id, location: where });
    await patch(p.id, 'busy');
    const res = await h.app.inject({ url: `/providers?status=busy&limit=1000`, headers: owner.headers });
    const mine = (res.json() as { id: string; held: boolean }[]).find((x) => x.id === p.id);
    expect(mine).toMatchObject({ held: true });
  });
});
