import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventCollector, endRental, gpu, type Harness, register, rent, startHarness } from './helpers.ts';

let h: Harness;
let events: EventCollector;
const MISSING = '00000000-0000-4000-8000-000000000000';

beforeAll(async () => {
  h = await startHarness();
  events = await EventCollector.start(h.subject);
});
afterAll(async () => {
  await events.close();
  await h.close();
  await h.testDb.drop();
});

const heartbeat = (id: string, payload?: unknown, headers: Record<string, string> = {}) =>
  h.app.inject({
    method: 'POST',
    url: `/providers/${id}/heartbeat`,
    ...(payload === undefined ? {} : { payload: payload as object }),
    headers,
  });

/** Moves the provider to `status`: explicitly, or for `busy` by renting it (only a running session makes it busy). */
const setStatus = async (id: string, status: string) => {
  if (status === 'busy') await rent(h.app, id);
  return h.app.inject({ method: 'PATCH', url: `/providers/${id}/status`, payload: { status } });
};

describe('POST /providers/{providerID}/heartbeat', () => {
  it.each([
    ['offline', 'idle'],
    ['error', 'idle'],
    ['idle', 'idle'],
    ['busy', 'busy'],
    ['maintenance', 'maintenance'],
  ])('moves %s to %s and updates last_seen_at', async (from, to) => {
    const p = await register(h.app);
    expect((await setStatus(p.id, from)).statusCode).toBe(200);
    const before = (await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json().last_seen_at;
    await new Promise((r) => setTimeout(r, 5));
    const res = await heartbeat(p.id);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ message: 'heartbeat received', id: p.id, previous_status: from, status: to });
    const after = (await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json();
    expect(after.status).toBe(to);
    expect(Date.parse(after.last_seen_at)).toBeGreaterThan(Date.parse(before));
    expect(after.last_seen_at).toBe(res.json().last_seen_at);
  });

  it('brings a rented machine that went offline or into error back busy, never idle, until its session ends', async () => {
    for (const from of ['offline', 'error']) {
      for (const payload of [undefined, { gpu_metrics: [{ index: 0, temperature: 50 }] }]) {
        const p = await register(h.app);
        const session = await rent(h.app, p.id);
        expect((await setStatus(p.id, from)).statusCode).toBe(200);
        const res = await heartbeat(p.id, payload);
        expect(res.statusCode).toBe(200);
        expect(res.json()).toMatchObject({ previous_status: from, status: 'busy' });
        expect((await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json().status).toBe('busy');
        // The session's end (billing ends the sessions of a machine that went offline or into error) frees it.
        await endRental(h.app, p.id, session);
        expect((await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json().status).toBe('idle');
        expect((await heartbeat(p.id, payload)).json()).toMatchObject({ previous_status: 'idle', status: 'idle' });
      }
    }
  });

  it('answers a heartbeat naming its machine in upper case as the machine it wrote, with or without metrics', async () => {
    for (const payload of [undefined, { gpu_metrics: [{ index: 0, temperature: 70 }] }]) {
      const p = await register(h.app);
      expect((await setStatus(p.id, 'offline')).statusCode).toBe(200);
      const res = await heartbeat(p.id.toUpperCase(), payload);
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json()).toMatchObject({ id: p.id, previous_status: 'offline', status: 'idle' });
      expect((await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json().status).toBe('idle');
    }
  });

  it('accepts an empty body with a JSON content type, and an empty object', async () => {
    const p = await register(h.app);
    const empty = await h.app.inject({
      method: 'POST',
      url: `/providers/${p.id}/heartbeat`,
      payload: '',
      headers: { 'content-type': 'application/json' },
    });
    expect(empty.statusCode).toBe(200);
    expect((await heartbeat(p.id, {})).statusCode).toBe(200);
  });

  it('stores gpu_metrics on the GPUs at the given indexes and keeps unspecified fields', async () => {
    const p = await register(h.app, { gpus: [gpu(), gpu(), gpu()] });
    const first = await heartbeat(p.id, {
      gpu_metrics: [
        { index: 0, utilization_gpu: 97, utilization_mem: 60, temperature: 71, power_draw: 380 },
        { index: 2, utilization_gpu: 5, is_healthy: false },
      ],
    });
    expect(first.statusCode).toBe(200);
    // A newer daemon's extra fields (here a fan speed and an uptime) are dropped: the heartbeat still counts.
    const newer = await heartbeat(p.id, { gpu_metrics: [{ index: 0, temperature: 65, fan_rpm: 3000 }], uptime_s: 9 });
    expect(newer.statusCode, newer.body).toBe(200);
    const got = (await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json();
    expect(got.gpus[0]).toMatchObject({
      utilization_gpu: 97,
      utilization_mem: 60,
      temperature: 65,
      power_draw: 380,
      is_healthy: true,
    });
    expect(got.gpus[1]).toMatchObject({ utilization_gpu: null, temperature: null, is_healthy: true });
    expect(got.gpus[2]).toMatchObject({ utilization_gpu: 5, is_healthy: false });
  });

  it('makes healthy_only follow the health reported by heartbeats', async () => {
    const owner = `health-${Date.now()}`;
    const p = await register(h.app, { owner_id: owner, gpus: [gpu(), gpu()] });
    const healthyIds = async () =>
      (await h.app.inject({ method: 'GET', url: `/providers?healthy_only=true&limit=1000` }))
        .json()
        .map((x: { id: string }) => x.id);
    expect(await healthyIds()).toContain(p.id);
    await heartbeat(p.id, { gpu_metrics: [{ index: 1, is_healthy: false }] });
    expect(await healthyIds()).not.toContain(p.id);
    await heartbeat(p.id, { gpu_metrics: [{ index: 1, is_healthy: true }] });
    expect(await healthyIds()).toContain(p.id);
  });

  it.each([
    [
      'utilization over 100',
      { gpu_metrics: [{ index: 0, utilization_gpu: 101 }] },
      'body.gpu_metrics.0.utilization_gpu',
    ],
    [
      'negative memory utilization',
      { gpu_metrics: [{ index: 0, utilization_mem: -1 }] },
      'body.gpu_metrics.0.utilization_mem',
    ],
    ['temperature over uint8', { gpu_metrics: [{ index: 0, temperature: 256 }] }, 'body.gpu_metrics.0.temperature'],
    ['negative power draw', { gpu_metrics: [{ index: 0, power_draw: -5 }] }, 'body.gpu_metrics.0.power_draw'],
    ['missing index', { gpu_metrics: [{ utilization_gpu: 10 }] }, 'body.gpu_metrics.0.index'],
    ['duplicate index', { gpu_metrics: [{ index: 0 }, { index: 0 }] }, 'body.gpu_metrics'],
    ['metrics not an array', { gpu_metrics: { index: 0 } }, 'body.gpu_metrics'],
  ])('answers 400 for %s and writes nothing', async (_label, body, path) => {
    const p = await register(h.app);
    await setStatus(p.id, 'offline');
    const res = await heartbeat(p.id, body);
    expect(res.statusCode).toBe(400);
    expect(res.json().errors.map((e: { path: string }) => e.path)).toContain(path);
    expect((await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json().status).toBe('offline');
  });

  it('answers 400 UNKNOWN_GPU_INDEX for an index the provider lacks and rolls back the whole heartbeat', async () => {
    const p = await register(h.app, { gpus: [gpu(), gpu()] });
    await setStatus(p.id, 'error');
    const before = (await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json();
    const res = await heartbeat(p.id, {
      gpu_metrics: [
        { index: 0, utilization_gpu: 50 },
        { index: 2, utilization_gpu: 50 },
      ],
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('UNKNOWN_GPU_INDEX');
    const after = (await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json();
    expect(after).toEqual(before);
  });

  it('answers 400 MALFORMED_JSON for a broken body, 404 for an unknown provider', async () => {
    const p = await register(h.app);
    const broken = await h.app.inject({
      method: 'POST',
      url: `/providers/${p.id}/heartbeat`,
      payload: '{"gpu_metrics": [',
      headers: { 'content-type': 'application/json' },
    });
    expect(broken.statusCode).toBe(400);
    expect(broken.json().code).toBe('MALFORMED_JSON');
    const missing = await heartbeat(MISSING);
    expect(missing.statusCode).toBe(404);
    expect(missing.json().code).toBe('PROVIDER_NOT_FOUND');
  });

  it('handles concurrent heartbeats: one revival, one event, every metric write consistent', async () => {
    const p = await register(h.app, { gpus: [gpu(), gpu()] });
    await setStatus(p.id, 'offline');
    await events.waitFor(() => events.about(p.id).some((e) => e.data.status === 'offline'));
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        heartbeat(p.id, { gpu_metrics: [{ index: i % 2, utilization_gpu: i, temperature: 40 + (i % 2) }] }),
      ),
    );
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    const revivals = results.filter((r) => r.json().previous_status === 'offline');
    expect(revivals).toHaveLength(1);
    const got = (await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json();
    expect(got.status).toBe('idle');
    expect(got.gpus[0].temperature).toBe(40);
    expect(got.gpus[1].temperature).toBe(41);
    await h.app.events.flush();
    await events.waitFor(() => events.about(p.id).some((e) => e.data.reason === 'heartbeat'));
    await new Promise((r) => setTimeout(r, 100));
    expect(events.about(p.id).filter((e) => e.data.reason === 'heartbeat')).toHaveLength(1);
  });

  it('answers concurrent heartbeats without metrics (written together) each as if alone', async () => {
    const offline = await register(h.app);
    const failed = await register(h.app);
    const busy = await register(h.app);
    const rentedOffline = await register(h.app);
    await setStatus(offline.id, 'offline');
    await setStatus(failed.id, 'error');
    await setStatus(busy.id, 'busy');
    await rent(h.app, rentedOffline.id);
    await setStatus(rentedOffline.id, 'offline');
    await events.waitFor(() => events.about(busy.id).some((e) => e.data.status === 'busy'));
    // Interleaved, so the service writes several providers (and the same one several times) in one statement.
    const targets = Array.from(
      { length: 60 },
      (_, i) => [offline.id, failed.id, busy.id, rentedOffline.id, MISSING][i % 5]!,
    );
    const results = await Promise.all(targets.map((id) => heartbeat(id)));

    results.forEach((r, i) => {
      if (targets[i] === MISSING) {
        expect(r.statusCode).toBe(404);
        expect(r.json().code).toBe('PROVIDER_NOT_FOUND');
      } else {
        expect(r.statusCode).toBe(200);
        expect(r.json().id).toBe(targets[i]);
      }
    });
    const answers = (id: string) => results.filter((_, i) => targets[i] === id).map((r) => r.json());
    for (const [p, from, to] of [
      [offline, 'offline', 'idle'],
      [failed, 'error', 'idle'],
      [busy, 'busy', 'busy'],
      [rentedOffline, 'offline', 'busy'],
    ] as const) {
      const mine = answers(p.id);
      expect(mine.every((a) => a.status === to)).toBe(true);
      // Exactly one heartbeat observes the revival; the others find the provider already revived.
      expect(mine.filter((a) => a.previous_status === from)).toHaveLength(from === to ? mine.length : 1);
      const stored = (await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json();
      expect(stored.status).toBe(to);
      expect(mine.map((a) => a.last_seen_at)).toContain(stored.last_seen_at);
    }

    await h.app.events.flush();
    await events.waitFor(
      () =>
        events.about(failed.id).some((e) => e.data.reason === 'heartbeat') &&
        events.about(offline.id).some((e) => e.data.reason === 'heartbeat'),
    );
    // Any second one of theirs would have come by now.
    await new Promise((r) => setTimeout(r, 100));
    expect(events.about(offline.id).filter((e) => e.data.reason === 'heartbeat')).toHaveLength(1);
    expect(events.about(failed.id).filter((e) => e.data.reason === 'heartbeat')).toHaveLength(1);
    expect(events.about(busy.id).filter((e) => e.data.reason === 'heartbeat')).toHaveLength(0);
  });
});

describe('status events on NATS', () => {
  it('publishes registration, explicit and heartbeat changes with IDs and the correlation ID, none for no-ops', async () => {
    const res = await h.app.inject({
      method: 'POST',
      url: '/providers',
      payload: { owner_id: 'ev', name: `ev-${Date.now()}`, gpus: [gpu()] },
      headers: { 'x-correlation-id': 'corr-register' },
    });
    const id = res.json().id as string;
    await h.app.inject({
      method: 'PATCH',
      url: `/providers/${id}/status`,
      payload: { status: 'error' },
      headers: { 'x-correlation-id': 'corr-patch' },
    });
    await h.app.inject({ method: 'PATCH', url: `/providers/${id}/status`, payload: { status: 'error' } });
    await heartbeat(id, undefined, { 'x-correlation-id': 'corr-beat' });
    await heartbeat(id);
    await h.app.events.flush();
    await events.waitFor(() => events.about(id).length >= 3);
    await new Promise((r) => setTimeout(r, 100));
    const got = events.about(id);
    expect(got.map((e) => [e.data.previous_status, e.data.status, e.data.reason, e.correlationId])).toEqual([
      [null, 'idle', 'registered', 'corr-register'],
      ['idle', 'error', 'explicit', 'corr-patch'],
      ['error', 'idle', 'heartbeat', 'corr-beat'],
    ]);
    for (const e of got) {
      expect(e.data).toMatchObject({ type: 'provider.status_changed', provider_id: id, owner_id: 'ev' });
      expect(e.msgId).toBe(e.data.event_id);
      expect(e.data.occurred_at).toMatch(/Z$/);
    }
    expect(new Set(got.map((e) => e.msgId)).size).toBe(3);
  });

  it('publishes a status change made by a full update', async () => {
    const p = await register(h.app);
    const { id: _id, registered_at: _r, last_seen_at: _l, ...rest } = p;
    await h.app.inject({ method: 'PUT', url: `/providers/${p.id}`, payload: { ...rest, status: 'maintenance' } });
    await h.app.events.flush();
    await events.waitFor(() => events.about(p.id).some((e) => e.data.reason === 'update'));
    expect(events.about(p.id).find((e) => e.data.reason === 'update')?.data).toMatchObject({
      previous_status: 'idle',
      status: 'maintenance',
    });
  });
});
