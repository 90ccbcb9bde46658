/** The one GPU field list: what the API takes, stores, shows, documents and renders follows it. */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GPU_FIELDS, GPU_METRIC_FIELDS, GPU_SPEC_FIELDS, type GpuField } from '../src/domain/gpu-fields.ts';
import { type Harness, register, startHarness } from './helpers.ts';

let h: Harness;

beforeAll(async () => {
  h = await startHarness({ nats: false });
});
afterAll(async () => {
  await h.close();
  await h.testDb.drop();
});

/** A value of the field's type, different for each field. */
function sample(field: GpuField, i: number): unknown {
  switch (field.type) {
    case 'text':
      return `v${i}`;
    case 'bool':
      return false;
    case 'percent':
      return 40 + i;
    case 'uint8':
      return 200 + i;
    default:
      return 1000 + i;
  }
}

describe('the GPU field list', () => {
  it('keeps the static fields ahead of the metrics (the order of the JSON)', () => {
    expect(GPU_FIELDS.map((f) => f.name)).toEqual([...GPU_SPEC_FIELDS, ...GPU_METRIC_FIELDS].map((f) => f.name));
  });

  it('takes, stores and shows every field', async () => {
    const full = Object.fromEntries(GPU_FIELDS.map((f, i) => [f.name, sample(f, i)]));
    const p = await register(h.app, { gpus: [full] });
    expect(p.gpus).toEqual([full]);
    const shown = (await h.app.inject({ method: 'GET', url: `/providers/${p.id}` })).json();
    expect(Object.keys(shown.gpus[0])).toEqual(GPU_FIELDS.map((f) => f.name));
    expect(shown.gpus[0]).toEqual(full);
    const listed = (await h.app.inject({ method: 'GET', url: '/providers?limit=1000' })).json();
    expect(listed.find((x: { id: string }) => x.id === p.id).gpus).toEqual([full]);
  });

  it('fills the nullable fields with null when left out', async () => {
    const required = GPU_FIELDS.filter((f) => !f.nullable && f.type !== 'bool');
    const p = await register(h.app, { gpus: [Object.fromEntries(required.map((f, i) => [f.name, sample(f, i)]))] });
    for (const f of GPU_FIELDS.filter((x) => x.nullable))
      expect(p.gpus).toEqual([expect.objectContaining({ [f.name]: null })]);
    expect(p.gpus).toEqual([expect.objectContaining({ is_healthy: true })]);
  });

  it('is what the stored JSON opening of a GPU renders, in order', async () => {
    const p = await register(h.app);
    const { rows } = await sql<{ spec_json: string }>`SELECT spec_json FROM gpus WHERE provider_id = ${p.id}`.execute(
      h.database.db,
    );
    expect(Object.keys(JSON.parse(`${rows[0]?.spec_json}}`))).toEqual(GPU_SPEC_FIELDS.map((f) => f.name));
  });

  it('is what the OpenAPI document shows for a GPU and for heartbeat metrics', async () => {
    const spec = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const text = JSON.stringify(spec);
    for (const f of GPU_FIELDS) expect(text).toContain(`"${f.name}"`);
    const beat = spec.paths['/providers/{providerID}/heartbeat'].post.requestBody.content['application/json'].schema;
    const named = beat.$ref.replace('#/components/schemas/', '');
    const metrics = JSON.stringify(spec.components.schemas[named]);
    for (const f of GPU_METRIC_FIELDS) expect(metrics).toContain(`"${f.name}"`);
    for (const f of GPU_SPEC_FIELDS) expect(metrics).not.toContain(`"${f.name}"`);
  });
});
