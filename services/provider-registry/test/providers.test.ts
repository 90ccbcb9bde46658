import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gpu, type Harness, providerBody, register, startHarness } from './helpers.ts';

let h: Harness;
const MISSING = '00000000-0000-4000-8000-000000000000';

beforeAll(async () => {
  h = await startHarness({ nats: false });
});
afterAll(async () => {
  await h.close();
  await h.testDb.drop();
});

describe('POST /providers', () => {
  it('registers a provider with its GPUs and answers 201 with snake_case fields', async () => {
    const body = providerBody({ gpus: [gpu(), gpu({ model_name: 'NVIDIA H100', vram: 81559, is_healthy: false })] });
    const res = await h.app.inject({
      method: 'POST',
      url: '/providers',
      payload: body,
      headers: { 'x-correlation-id': 'corr-reg' },
    });
    expect(res.statusCode).toBe(201);
    expect(res.headers['x-correlation-id']).toBe('corr-reg');
    const p = res.json();
    expect(res.headers.location).toBe(`/providers/${p.id}`);
    expect(p.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(p).toMatchObject({
      owner_id: 'owner-1',
      name: body.name,
      hostname: body.hostname,
      ip_address: '203.0.113.10',
      location: 'eu-west',
      status: 'idle',
      metadata: { rack: 'r1', tags: ['a', 'b'] },
    });
    expect(p.registered_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    expect(p.last_seen_at).toMatch(/Z$/);
    expect(p.gpus).toHaveLength(2);
    expect(p.gpus[0]).toEqual({
      model_name: 'NVIDIA A100-SXM4-80GB',
      vram: 81920,
      driver_version: '550.54.15',
      architecture: 'Ampere',
      compute_capability: '8.0',
      cuda_cores: 6912,
      tensor_cores: 432,
      memory_bandwidth: 2039,
      power_consumption: 400,
      utilization_gpu: null,
      utilization_mem: null,
      temperature: null,
      power_draw: null,
      is_healthy: true,
    });
    expect(p.gpus[1]).toMatchObject({ model_name: 'NVIDIA H100', is_healthy: false });
    const got = await h.app.inject({ method: 'GET', url: `/providers/${p.id}` });
    expect(got.statusCode).toBe(200);
    expect(got.json()).toEqual(p);
  });

  it('accepts the minimal request and an explicit initial status', async () => {
    const res = await h.app.inject({
      method: 'POST',
      url: '/providers',
      payload: {
        owner_id: 'o-min',
        name: 'minimal',
        status: 'maintenance',
        gpus: [{ model_name: 'RTX 4090', vram: 24564, driver_version: '550' }],
      },
    });
    expect(res.statusCode).toBe(201);
    expect(res.json()).toMatchObject({
      hostname: null,
      ip_address: null,
      location: null,
      metadata: {},
      status: 'maintenance',
      gpus: [{ model_name: 'RTX 4090', architecture: null, is_healthy: true }],
    });
  });

  it('answers 409 PROVIDER_ALREADY_EXISTS for the same owner and name, and allows the name for another owner', async () => {
    const body = providerBody();
    expect((await h.app.inject({ method: 'POST', url: '/providers', payload: body })).statusCode).toBe(201);
    const dup = await h.app.inject({ method: 'POST', url: '/providers', payload: { ...body, hostname: 'other' } });
    expect(dup.statusCode).toBe(409);
    expect(dup.headers['content-type']).toContain('application/problem+json');
    expect(dup.json()).toMatchObject({ status: 409, code: 'PROVIDER_ALREADY_EXISTS' });
    const other = await h.app.inject({ method: 'POST', url: '/providers', payload: { ...body, owner_id: 'owner-2' } });
    expect(other.statusCode).toBe(201);
  });

  it.each([
    ['missing name', { name: undefined }, 'body.name'],
    ['empty gpus', { gpus: [] }, 'body.gpus'],
    ['bad ip', { ip_address: '999.1.1.1' }, 'body.ip_address'],
    ['bad status', { status: 'sleeping' }, 'body.status'],
    ['negative vram', { gpus: [gpu({ vram: -1 })] }, 'body.gpus.0.vram'],
    ['fractional vram', { gpus: [gpu({ vram: 1.5 })] }, 'body.gpus.0.vram'],
    ['utilization over 100', { gpus: [gpu({ utilization_gpu: 101 })] }, 'body.gpus.0.utilization_gpu'],
    ['temperature over uint8', { gpus: [gpu({ temperature: 300 })] }, 'body.gpus.0.temperature'],
    ['cuda cores over uint32', { gpus: [gpu({ cuda_cores: 4_294_967_296 })] }, 'body.gpus.0.cuda_cores'],
    ['string vram', { gpus: [gpu({ vram: '80' })] }, 'body.gpus.0.vram'],
    ['bad hostname', { hostname: 'no spaces allowed' }, 'body.hostname'],
  ])('answers 400 for %s and stores nothing', async (_label, over, path) => {
    const body = providerBody(over);
    const res = await h.app.inject({ method: 'POST', url: '/providers', payload: body });
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('VALIDATION_ERROR');
    expect(res.json().errors.map((e: { path: string }) => e.path)).toContain(path);
    const stored = await h.database.db
      .selectFrom('providers')
      .select('id')
      .where('name', '=', String(body.name))
      .execute();
    expect(stored).toHaveLength(0);
  });

  it('answers 400 MALFORMED_JSON for a broken body', async () => {
    const res = await h.app.inject({
      method: 'POST',
      url: '/providers',
      payload: '{"owner_id":',
      headers: { 'content-type': 'application/json' },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('MALFORMED_JSON');
  });
});

describe('unknown body fields', () => {
  it('are refused with 400 naming them, and nothing is registered or changed', async () => {
    const body = providerBody({ gpus: [{ ...gpu(), vram_gb: 80 } as ReturnType<typeof gpu>] });
    const reg = await h.app.inject({ method: 'POST', url: '/providers', payload: body });
    expect(reg.statusCode).toBe(400);
    expect(reg.json().errors).toEqual([{ path: 'body.gpus.0.vram_gb', message: 'unknown field' }]);
    const named = await h.database.db.selectFrom('providers').select('id').where('name', '=', body.name).execute();
    expect(named).toEqual([]);

    const p = await register(h.app);
    const put = await h.app.inject({ method: 'PUT', url: `/providers/${p.id}`, payload: { ...p, nmae: 'typo' } });
    expect(put.statusCode).toBe(400);
    expect(put.json().errors).toEqual([{ path: 'body.nmae', message: 'unknown field' }]);
    const patch = await h.app.inject({
      method: 'PATCH',
      url: `/providers/${p.id}/status`,
      payload: { status: 'maintenance', reason: 'disk swap' },
    });
    expect(patch.statusCode).toBe(400);
    expect(patch.json().errors).toEqual([{ path: 'body.reason', message: 'unknown field' }]);
    const after = (await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json();
    expect(after).toMatchObject({ name: p.name, status: 'idle' });
  });
});

describe('GET /providers/{providerID}', () => {
  it('is 404 PROVIDER_NOT_FOUND for an unknown ID and 400 for a non-UUID', async () => {
    const missing = await h.app.inject({ method: 'GET', url: `/providers/${MISSING}` });
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toMatchObject({ code: 'PROVIDER_NOT_FOUND', detail: `provider ${MISSING} not found` });
    const bad = await h.app.inject({ method: 'GET', url: '/providers/not-a-uuid' });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().errors[0].path).toBe('params.providerID');
  });
});

describe('PUT /providers/{providerID}', () => {
  it('replaces every writable field and the GPU list', async () => {
    const p = await register(h.app, { gpus: [gpu(), gpu(), gpu()] });
    const res = await h.app.inject({
      method: 'PUT',
      url: `/providers/${p.id}`,
      payload: {
        ...p,
        name: `${p.name}-renamed`,
        hostname: null,
        location: 'us-east',
        metadata: { v: 2 },
        gpus: [gpu({ model_name: 'NVIDIA H100', vram: 81559, architecture: 'Hopper' })],
        registered_at: '2000-01-01T00:00:00.000Z',
      },
    });
    expect(res.statusCode).toBe(200);
    const updated = res.json();
    expect(updated).toMatchObject({
      id: p.id,
      name: `${p.name}-renamed`,
      hostname: null,
      location: 'us-east',
      metadata: { v: 2 },
      registered_at: p.registered_at,
      status: 'idle',
    });
    expect(updated.gpus).toHaveLength(1);
    expect(updated.gpus[0]).toMatchObject({ model_name: 'NVIDIA H100', architecture: 'Hopper' });
    const rows = await h.database.db.selectFrom('gpus').selectAll().where('provider_id', '=', p.id).execute();
    expect(rows.map((r) => r.idx)).toEqual([0]);
  });

  it('answers 404 for an unknown provider, 400 for a mismatched id, 409 for a name clash', async () => {
    const a = await register(h.app);
    const b = await register(h.app);
    const body = providerBody();
    const missing = await h.app.inject({ method: 'PUT', url: `/providers/${MISSING}`, payload: body });
    expect(missing.statusCode).toBe(404);
    const mismatch = await h.app.inject({ method: 'PUT', url: `/providers/${a.id}`, payload: { ...body, id: b.id } });
    expect(mismatch.statusCode).toBe(400);
    expect(mismatch.json().code).toBe('ID_MISMATCH');
    const clash = await h.app.inject({
      method: 'PUT',
      url: `/providers/${a.id}`,
      payload: { ...body, owner_id: b.owner_id, name: b.name },
    });
    expect(clash.statusCode).toBe(409);
    expect(clash.json().code).toBe('PROVIDER_ALREADY_EXISTS');
    const unchanged = await h.app.inject({ method: 'GET', url: `/providers/${a.id}` });
    expect(unchanged.json().name).toBe(a.name);
  });

  it('rejects an invalid GPU without touching the stored one', async () => {
    const p = await register(h.app);
    const res = await h.app.inject({
      method: 'PUT',
      url: `/providers/${p.id}`,
      payload: providerBody({ gpus: [gpu({ utilization_mem: 200 })] }),
    });
    expect(res.statusCode).toBe(400);
    const after = await h.app.inject({ method: 'GET', url: `/providers/${p.id}` });
    expect(after.json().gpus).toEqual(p.gpus);
  });
});

describe('PATCH /providers/{providerID}/status', () => {
  it('sets any state but busy (a rental) explicitly and moves last_seen_at', async () => {
    const p = await register(h.app);
    await new Promise((r) => setTimeout(r, 10));
    for (const status of ['maintenance', 'error', 'offline', 'idle']) {
      const res = await h.app.inject({ method: 'PATCH', url: `/providers/${p.id}/status`, payload: { status } });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toMatchObject({ message: 'provider status updated', id: p.id, status });
    }
    const after = (await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json();
    expect(after.status).toBe('idle');
    expect(Date.parse(after.last_seen_at)).toBeGreaterThan(Date.parse(p.last_seen_at));
  });

  it('answers 404 for an unknown provider and 400 for an unknown state', async () => {
    const missing = await h.app.inject({
      method: 'PATCH',
      url: `/providers/${MISSING}/status`,
      payload: { status: 'busy' },
    });
    expect(missing.statusCode).toBe(404);
    const p = await register(h.app);
    const bad = await h.app.inject({ method: 'PATCH', url: `/providers/${p.id}/status`, payload: { status: 'gone' } });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().errors[0].path).toBe('body.status');
  });
});

describe('DELETE /providers/{providerID}', () => {
  it('deletes the provider and, by cascade, its GPUs; a second delete is 404', async () => {
    const p = await register(h.app, { gpus: [gpu(), gpu()] });
    const res = await h.app.inject({ method: 'DELETE', url: `/providers/${p.id}` });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ message: 'provider deleted', id: p.id });
    const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM gpus WHERE provider_id = ${p.id}`.execute(
      h.database.db,
    );
    expect(rows[0]?.n).toBe(0);
    expect((await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).statusCode).toBe(404);
    expect((await h.app.inject({ method: 'DELETE', url: `/providers/${p.id}` })).statusCode).toBe(404);
  });

  it('removes GPUs with their provider even when deleted by SQL directly (ON DELETE CASCADE)', async () => {
    const p = await register(h.app, { gpus: [gpu(), gpu(), gpu()] });
    await h.database.db.deleteFrom('providers').where('id', '=', p.id).execute();
    const left = await h.database.db.selectFrom('gpus').select('idx').where('provider_id', '=', p.id).execute();
    expect(left).toEqual([]);
  });
});

describe('OpenAPI', () => {
  it('documents every endpoint with its error responses', async () => {
    const spec = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    expect(Object.keys(spec.paths)).toEqual(
      expect.arrayContaining([
        '/providers',
        '/providers/{providerID}',
        '/providers/{providerID}/status',
        '/providers/{providerID}/heartbeat',
      ]),
    );
    expect(spec.paths['/providers'].post.responses).toHaveProperty('409');
    expect(spec.paths['/providers/{providerID}'].get.responses).toHaveProperty('404');
    expect(spec.paths['/providers'].get.parameters.map((p: { name: string }) => p.name)).toEqual(
      expect.arrayContaining([
        'status',
        'gpu_model',
        'min_vram',
        'architecture',
        'healthy_only',
        'min_gpus',
        'sort',
        'limit',
        'cursor',
      ]),
    );
  });
});
