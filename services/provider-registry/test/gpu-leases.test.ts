/**
 * Per-GPU leases (issue #28), the registry's half: billing states the GPUs its leases hold on a machine; a machine is
 * busy exactly when some are held and no GPU group has `min_gpus_per_rental` free GPUs (healthy, not held), and its
 * offers list those free GPUs while it is idle. Against real PostgreSQL, through HTTP (billing's statements without
 * NATS; the NATS path: gpu-holds.test.ts).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliver, gpu, type Harness, providerBody, register, startHarness } from './helpers.ts';

let h: Harness;

beforeAll(async () => {
  h = await startHarness({ nats: false });
  const card = await deliver(h.app, 'pricing.platform_rates', {
    card: {
      base_rates: { default: '1' },
      vram_rate_per_gb_hour: '0',
      power_rate_per_watt_hour: '0',
      occurred_at: new Date().toISOString(),
    },
  });
  expect(card.statusCode, card.body).toBe(200);
  await h.app.market.settled();
});
afterAll(() => h?.close());

const ALL = [0, 1, 2, 3, 4, 5, 6, 7];
const LOW = [0, 1, 2, 3];
const HIGH = [4, 5, 6, 7];

/** An 8-GPU machine in a region of its own (so an offer search sees only it). */
async function machine(over: Record<string, unknown> = {}) {
  const location = `r-${randomUUID().slice(0, 8)}`;
  const p = await register(h.app, { location, gpus: ALL.map(() => gpu()), ...over });
  return p as typeof p & { name: string; min_gpus_per_rental: number; location: string };
}

/** The statements' versions: greater with each. */
let version = 0;
/** What billing holds per machine in these tests: each session's GPUs. */
const sessions = new Map<string, Map<string, number[]>>();

/** States the machine's held GPUs (`lease.held`) with the next version; its status before and after, and the GPUs. */
async function state(providerId: string, gpuIndices: number[]) {
  version += 1;
  const previous_status = await statusOf(providerId);
  const res = await deliver(h.app, 'lease.held', { provider_id: providerId, version, gpu_indices: gpuIndices });
  expect(res.statusCode, res.body).toBe(200);
  return {
    previous_status,
    status: await statusOf(providerId),
    ...{ gpu_indices: (await h.app.holds.of(providerId)).gpuIndices },
  };
}

/** States what the machine's sessions hold, after `change`. */
function restate(providerId: string, change: (held: Map<string, number[]>) => void) {
  const held = sessions.get(providerId) ?? new Map<string, number[]>();
  sessions.set(providerId, held);
  change(held);
  return state(
    providerId,
    [...new Set([...held.values()].flat())].sort((a, b) => a - b),
  );
}

/** A session starts holding `gpuIndices` (or restates them); the statement's answer. */
async function hold(providerId: string, gpuIndices: number[], sessionId = randomUUID()) {
  return { sessionId, ...(await restate(providerId, (held) => held.set(sessionId, gpuIndices))) };
}

/** The session ends: its GPUs stated free. */
const end = (providerId: string, sessionId: string) => restate(providerId, (held) => held.delete(sessionId));

const statusOf = async (id: string) => (await h.app.inject({ url: `/providers/${id}` })).json().status as string;

/** The free GPUs of the machine's offers (its region's), as renters see them. */
async function freeGpus(location: string) {
  const res = await h.app.inject({ url: `/offers?region=${location}` });
  expect(res.statusCode, res.body).toBe(200);
  return (res.json() as { free_gpus: number }[]).map((o) => o.free_gpus);
}

const setHealth = (id: string, index: number, healthy: boolean) =>
  h.app.inject({
    method: 'POST',
    url: `/providers/${id}/heartbeat`,
    payload: { gpu_metrics: [{ index, is_healthy: healthy }] },
  });

describe('sessions holding some GPUs', () => {
  it('keep a machine idle while a group is rentable, busy once none is, idle again when a session ends', async () => {
    const p = await machine();
    expect(await freeGpus(p.location)).toEqual([8]);

    const first = await hold(p.id, LOW);
    expect(first).toMatchObject({ previous_status: 'idle', status: 'idle', gpu_indices: LOW });
    expect(await freeGpus(p.location)).toEqual([4]);

    const second = await hold(p.id, [7, 6, 5, 4]);
    expect(second).toMatchObject({ previous_status: 'idle', status: 'busy', gpu_indices: ALL });
    expect(await freeGpus(p.location)).toEqual([]);

    expect(await end(p.id, first.sessionId)).toMatchObject({ previous_status: 'busy', status: 'idle' });
    expect(await statusOf(p.id)).toBe('idle');
    expect(await freeGpus(p.location)).toEqual([4]);
    expect(await end(p.id, second.sessionId)).toMatchObject({ previous_status: 'idle', status: 'idle' });
    expect(await freeGpus(p.location)).toEqual([8]);
  });

  it("follow billing's statements as they change: more GPUs held, fewer, none", async () => {
    const p = await machine();
    const { sessionId } = await hold(p.id, LOW);
    expect(await hold(p.id, ALL, sessionId)).toMatchObject({ previous_status: 'idle', status: 'busy' });
    expect(await freeGpus(p.location)).toEqual([]);
    expect(await hold(p.id, [0], sessionId)).toMatchObject({ previous_status: 'busy', status: 'idle' });
    expect(await freeGpus(p.location)).toEqual([7]);
    await end(p.id, sessionId);
    expect(await freeGpus(p.location)).toEqual([8]);
  });

  it("count what is rentable per GPU group (billing's model key)", async () => {
    const h100 = { model_name: 'NVIDIA H100 80GB HBM3', vram: 81559 };
    const p = await machine({ gpus: [gpu(), gpu(), gpu(h100), gpu(h100)] });
    // Both A100s rented: the H100s are still rentable.
    expect(await hold(p.id, [0, 1])).toMatchObject({ status: 'idle' });
    expect((await freeGpus(p.location)).sort()).toEqual([2]);
    expect(await hold(p.id, [2, 3])).toMatchObject({ status: 'busy' });
  });
});

describe('min_gpus_per_rental', () => {
  it('defaults to 1, is shown on the provider, in discovery and on offers, and is set by registration and update', async () => {
    const plain = await machine();
    expect(plain.min_gpus_per_rental).toBe(1);
    const p = await machine({ min_gpus_per_rental: 4 });
    expect(p.min_gpus_per_rental).toBe(4);
    expect((await h.app.inject({ url: `/providers/${p.id}` })).json().min_gpus_per_rental).toBe(4);
    const listed = (await h.app.inject({ url: '/providers?limit=1000' })).json() as { id: string }[];
    expect(listed.find((x) => x.id === p.id)).toMatchObject({ min_gpus_per_rental: 4 });
    const offer = (await h.app.inject({ url: `/offers?region=${p.location}` })).json()[0];
    expect(offer).toMatchObject({ free_gpus: 8, min_gpus_per_rental: 4 });

    // A full update sets it; one that leaves it out (a daemon updating its GPUs) keeps it.
    const body = { ...providerBody({ name: p.name, location: p.location }), gpus: ALL.map(() => gpu()) };
    const updated = await h.app.inject({
      method: 'PUT',
      url: `/providers/${p.id}`,
      payload: { ...body, min_gpus_per_rental: 2 },
    });
    expect(updated.statusCode, updated.body).toBe(200);
    expect(updated.json().min_gpus_per_rental).toBe(2);
    expect((await h.app.inject({ url: `/offers?region=${p.location}` })).json()[0].min_gpus_per_rental).toBe(2);
    const kept = await h.app.inject({ method: 'PUT', url: `/providers/${p.id}`, payload: body });
    expect(kept.statusCode, kept.body).toBe(200);
    expect(kept.json().min_gpus_per_rental).toBe(2);
  });

  it('refuses a GPU list that shifts GPUs under running sessions, and takes one that only changes their figures', async () => {
    const p = await machine();
    const session = await hold(p.id, LOW);
    const body = { ...providerBody({ name: p.name, location: p.location }) };
    const update = (gpus: unknown[]) =>
      h.app.inject({ method: 'PUT', url: `/providers/${p.id}`, payload: { ...body, gpus } });
    // One GPU fewer, or another model at a place: the sessions' indices would name other GPUs.
    const fewer = await update(ALL.slice(1).map(() => gpu()));
    expect(fewer.statusCode).toBe(409);
    expect(fewer.json().code).toBe('GPUS_RENTED');
    const swapped = await update(ALL.map((i) => (i === 2 ? gpu({ model_name: 'NVIDIA H100 80GB HBM3' }) : gpu())));
    expect(swapped.json().code).toBe('GPUS_RENTED');
    // The same GPUs with another VRAM figure (a driver update): taken.
    const same = await update(ALL.map(() => gpu({ vram: 81000 })));
    expect(same.statusCode, same.body).toBe(200);
    // Once the session ended, the list may change.
    await end(p.id, session.sessionId);
    expect((await update(ALL.slice(1).map(() => gpu()))).statusCode).toBe(200);
  });

  it('is 1-64: 0, 65 and a fraction are 400 problems naming the field', async () => {
    for (const value of [0, 65, 1.5, '4']) {
      const res = await h.app.inject({
        method: 'POST',
        url: '/providers',
        payload: providerBody({ min_gpus_per_rental: value }),
      });
      expect(res.statusCode, String(value)).toBe(400);
      expect(res.headers['content-type']).toMatch(/application\/problem\+json/);
      expect(res.json().errors).toEqual(
        expect.arrayContaining([expect.objectContaining({ path: 'body.min_gpus_per_rental' })]),
      );
    }
    const p = await machine();
    const res = await h.app.inject({
      method: 'PUT',
      url: `/providers/${p.id}`,
      payload: providerBody({ name: p.name, min_gpus_per_rental: 65 }),
    });
    expect(res.statusCode).toBe(400);
  });

  it('makes a machine busy, off the market, when its free GPUs are fewer (one GPU unhealthy)', async () => {
    const p = await machine({ min_gpus_per_rental: 4 });
    expect((await setHealth(p.id, 7, false)).statusCode).toBe(200);
    expect(await freeGpus(p.location)).toEqual([7]);
    const { sessionId } = await hold(p.id, LOW);
    expect(await statusOf(p.id)).toBe('busy');
    expect(await freeGpus(p.location)).toEqual([]);
    // The GPU recovers: four are free again, and the machine is back on the market.
    const healed = await setHealth(p.id, 7, true);
    expect(healed.json()).toMatchObject({ previous_status: 'busy', status: 'idle' });
    expect(await freeGpus(p.location)).toEqual([4]);
    // And the other way round: rented first, then a GPU fails.
    const failed = await setHealth(p.id, 5, false);
    expect(failed.json()).toMatchObject({ previous_status: 'idle', status: 'busy' });
    expect(await freeGpus(p.location)).toEqual([]);
    await end(p.id, sessionId);
    expect(await statusOf(p.id)).toBe('idle');
    expect(await freeGpus(p.location)).toEqual([7]);
  });

  it('changed by a full update applies the rule to the machine and its offers at once', async () => {
    const p = await machine();
    await hold(p.id, LOW);
    expect(await freeGpus(p.location)).toEqual([4]);
    const body = { ...providerBody({ name: p.name, location: p.location }), gpus: ALL.map(() => gpu()) };
    const up = await h.app.inject({
      method: 'PUT',
      url: `/providers/${p.id}`,
      payload: { ...body, min_gpus_per_rental: 5 },
    });
    expect(up.json()).toMatchObject({ status: 'busy', min_gpus_per_rental: 5 });
    expect(await freeGpus(p.location)).toEqual([]);
    const down = await h.app.inject({
      method: 'PUT',
      url: `/providers/${p.id}`,
      payload: { ...body, min_gpus_per_rental: 4 },
    });
    expect(down.json()).toMatchObject({ status: 'idle', min_gpus_per_rental: 4 });
    expect(await freeGpus(p.location)).toEqual([4]);
  });
});

describe('explicit statuses of a partly rented machine', () => {
  const patch = (id: string, status: string) =>
    h.app.inject({ method: 'PATCH', url: `/providers/${id}/status`, payload: { status } });

  it('hold it busy with GPUs left to rent, refuse idle once none is; a heartbeat revives it to what it is', async () => {
    const p = await machine();
    const { sessionId } = await hold(p.id, LOW);
    // The owner holds the rest of it off the market, and releases it.
    expect((await patch(p.id, 'busy')).json()).toMatchObject({ status: 'busy' });
    expect((await patch(p.id, 'idle')).json()).toMatchObject({ status: 'idle' });

    // Offline, then a heartbeat: partly rented comes back idle, fully rented busy.
    expect((await patch(p.id, 'offline')).statusCode).toBe(200);
    expect((await h.app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` })).json().status).toBe('idle');
    await hold(p.id, HIGH);
    expect(await statusOf(p.id)).toBe('busy');
    expect((await patch(p.id, 'idle')).statusCode).toBe(409);
    expect((await patch(p.id, 'maintenance')).statusCode).toBe(200);
    expect((await h.app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` })).json().status).toBe(
      'maintenance',
    );
    expect((await patch(p.id, 'error')).statusCode).toBe(200);
    expect((await h.app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` })).json().status).toBe('busy');
    await end(p.id, sessionId);
    expect(await statusOf(p.id)).toBe('idle');
  });
});

describe("validation of billing's statement", () => {
  it('refuses duplicate, out-of-range, negative and fractional GPU lists with 400 problems, writing nothing', async () => {
    const p = await machine();
    for (const gpu_indices of [[0, 0], [64], [-1], [1.5], 'all', null, Array.from({ length: 65 }, (_, i) => i)]) {
      const res = await deliver(h.app, 'lease.held', { provider_id: p.id, version: 1, gpu_indices });
      expect(res.statusCode, JSON.stringify(gpu_indices)).toBe(400);
      expect(res.headers['content-type']).toMatch(/application\/problem\+json/);
      expect(res.json()).toMatchObject({ status: 400, code: 'VALIDATION_ERROR' });
      expect(res.json().errors[0].path).toMatch(/^body\.gpu_indices/);
    }
    expect(await h.app.holds.of(p.id)).toEqual({ version: 0, gpuIndices: [] });
    expect(await statusOf(p.id)).toBe('idle');
  });
});
