/**
 * Text PostgreSQL cannot store (U+0000 anywhere, an unpaired surrogate in jsonb) is a 400 naming the field, never a
 * 500, and nothing is written.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Harness, providerBody, register, startHarness } from './helpers.ts';

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ nats: false });
});
afterAll(() => h?.close());

describe('NUL characters', () => {
  it('refuses a registration with a NUL in a nested field, and stores nothing', async () => {
    const name = `nul-${Date.now()}`;
    const body = providerBody({ name, metadata: { note: 'a\u0000b' } });
    const res = await h.app.inject({ method: 'POST', url: '/providers', payload: body });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ code: 'VALIDATION_ERROR', errors: [{ path: 'body.metadata.note' }] });
    const listed = (await h.app.inject({ url: '/providers?limit=1000' })).json() as { name: string }[];
    expect(listed.map((p) => p.name)).not.toContain(name);
  });

  it('refuses metadata nested too deep for the check, with a NUL or thousands of levels, as a 400', async () => {
    const nest = (depth: number, leaf: unknown): unknown => {
      let v: unknown = leaf;
      for (let i = 0; i < depth; i++) v = { k: v };
      return v;
    };
    const { id, owner_id, name } = await register(h.app);
    for (const metadata of [{ deep: nest(40, 'a\u0000b') }, { deep: nest(20, 'fine') }]) {
      const res = await h.app.inject({
        method: 'PUT',
        url: `/providers/${id}`,
        payload: providerBody({ owner_id, name, metadata }),
      });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json()).toMatchObject({ code: 'VALIDATION_ERROR', errors: [{ path: 'body.metadata' }] });
    }
    // Sent as text: 20,000 levels of arrays (a stack overflow once stored and read).
    const payload = `{"owner_id":"${owner_id}","name":"deep-${Date.now()}","gpus":${JSON.stringify(providerBody().gpus)},"metadata":{"d":${'['.repeat(20_000)}${']'.repeat(20_000)}}}`;
    const deep = await h.app.inject({
      method: 'POST',
      url: '/providers',
      payload,
      headers: { 'content-type': 'application/json' },
    });
    expect(deep.statusCode, deep.body.slice(0, 300)).toBe(400);
    // Sixteen levels are taken.
    const ok = await h.app.inject({
      method: 'PUT',
      url: `/providers/${id}`,
      payload: providerBody({ owner_id, name, metadata: { deep: nest(15, 'fine') } }),
    });
    expect(ok.statusCode, ok.body).toBe(200);
  });

  it('refuses a NUL in a heartbeat and in a discovery filter', async () => {
    const { id } = await register(h.app);
    const beat = await h.app.inject({
      method: 'PUT',
      url: `/providers/${id}`,
      payload: providerBody({ name: 'x\u0000y' }),
    });
    expect(beat.statusCode).toBe(400);
    expect(beat.json().errors[0].path).toBe('body.name');
    const filter = await h.app.inject({ url: '/providers?gpu_model=%00' });
    expect(filter.statusCode).toBe(400);
    expect(filter.json().errors[0].path).toBe('querystring.gpu_model');
  });

  it('refuses an unpaired surrogate in a JSON body, in a value or a key, and stores nothing', async () => {
    const { id, owner_id, name } = await register(h.app);
    const before = (await h.app.inject({ url: `/providers/${id}` })).json();
    // As a client's JSON spells it: an escape no UTF-8 text holds (jsonb answers 22P02 for it).
    for (const [metadata, path] of [
      ['{"note":"a\\ud800b"}', 'body.metadata.note'],
      ['{"\\udc00key":"fine"}', 'body.metadata.\ufffdkey'],
    ] as const) {
      const res = await h.app.inject({
        method: 'PUT',
        url: `/providers/${id}`,
        payload: JSON.stringify(providerBody({ owner_id, name })).replace(/}$/, `,"metadata":${metadata}}`),
        headers: { 'content-type': 'application/json' },
      });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json()).toMatchObject({
        code: 'VALIDATION_ERROR',
        errors: [{ path, message: 'must be well-formed Unicode (no unpaired surrogate)' }],
      });
    }
    const stored = (await h.app.inject({ url: `/providers/${id}` })).json();
    expect(stored).toEqual(before);
  });
});
