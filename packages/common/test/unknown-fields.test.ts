/**
 * Unknown fields in a request body are refused with 400 naming each one, at any depth, on every route of an app
 * built with createApp; an object written with an explicit catch-all stays open, a record's keys are the caller's.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  type App,
  baseConfigSchema,
  createApp,
  createLogger,
  ignoringUnknownFields,
  strictInput,
} from '../src/index.ts';
import { captureLogs } from '../src/testing/index.ts';

const logs = captureLogs();
let app: App;

const item = z.object({ name: z.string(), size: z.number().optional() }).describe('an item');
const body = z.object({
  title: z.string(),
  items: z.array(item).optional(),
  nested: z.object({ on: z.boolean() }).nullish(),
  choice: z.union([z.object({ kind: z.literal('a'), a: z.number() }), z.object({ kind: z.literal('b') })]).optional(),
  tags: z.record(z.string(), z.object({ value: z.string() })).optional(),
  open: z.looseObject({ known: z.string().optional() }).optional(),
  both: z.intersection(z.object({ x: z.number() }), z.object({ y: z.number() })).optional(),
  piped: z
    .object({ n: z.string() })
    .transform((v) => Number(v.n))
    .optional(),
});

beforeAll(async () => {
  const config = baseConfigSchema.parse({ access: { enabled: false } });
  const logger = createLogger({ service: 'test', instanceId: 'i-1', level: 'info', destination: logs.destination });
  app = await createApp({ service: 'strict-test', description: 'test', config, logger });
  app.post('/things', { schema: { body } }, async (request) => request.body);
  // What a daemon sends every minute: unknown fields dropped, at any depth, instead of refused.
  const telemetry = ignoringUnknownFields(
    z.object({ load: z.number(), gpus: z.array(z.object({ index: z.number() })) }),
  );
  app.post('/telemetry', { schema: { body: z.object({ report: telemetry }) } }, async (request) => request.body);
  await app.ready();
});

afterAll(async () => {
  await app?.close();
});

const post = (payload: unknown) => app.inject({ method: 'POST', url: '/things', payload: payload as object });
const paths = (res: { json(): { errors?: { path: string }[] } }) => (res.json().errors ?? []).map((e) => e.path);

describe('unknown body fields', () => {
  it('are refused at the top level with 400 naming each field, and a known body still passes', async () => {
    const ok = await post({ title: 't' });
    expect(ok.statusCode).toBe(200);
    const res = await post({ title: 't', rates: { a: 1 }, colour: 'red' });
    expect(res.statusCode).toBe(400);
    expect(res.headers['content-type']).toContain('application/problem+json');
    expect(res.json()).toMatchObject({ code: 'VALIDATION_ERROR' });
    expect(paths(res).sort()).toEqual(['body.colour', 'body.rates']);
    expect(res.json().errors[0].message).toBe('unknown field');
    expect(res.json().detail).toContain('body.colour: unknown field');
  });

  it('are refused inside arrays, nullable objects, unions, intersections and pipes', async () => {
    const cases: [unknown, string][] = [
      [{ title: 't', items: [{ name: 'a' }, { name: 'b', sise: 1 }] }, 'body.items.1.sise'],
      [{ title: 't', nested: { on: true, off: false } }, 'body.nested.off'],
      [{ title: 't', choice: { kind: 'b', a: 1 } }, 'body.choice'],
      [{ title: 't', tags: { any: { value: 'v', extra: 1 } } }, 'body.tags.any.extra'],
      [{ title: 't', both: { x: 1, y: 2, z: 3 } }, 'body.both.z'],
      [{ title: 't', piped: { n: '1', m: '2' } }, 'body.piped.m'],
    ];
    for (const [payload, path] of cases) {
      const res = await post(payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(
        paths(res).some((p) => p.startsWith(path)),
        `${JSON.stringify(paths(res))} names ${path}`,
      ).toBe(true);
    }
  });

  it('keeps what the schema allows: record keys, explicit catch-alls, both sides of an intersection', async () => {
    const res = await post({
      title: 't',
      tags: { whatever: { value: 'v' } },
      open: { known: 'k', anything: 1 },
      both: { x: 1, y: 2 },
      choice: { kind: 'a', a: 1 },
      piped: { n: '7' },
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ open: { known: 'k', anything: 1 }, piped: 7 });
  });

  it('is what the OpenAPI document says (additionalProperties: false), with descriptions kept', async () => {
    const doc = (await app.inject({ method: 'GET', url: '/docs/json' })).json();
    const schema = doc.paths['/things'].post.requestBody.content['application/json'].schema;
    expect(schema.additionalProperties).toBe(false);
    const itemSchema = schema.properties.items.items;
    expect(itemSchema).toMatchObject({ additionalProperties: false, description: 'an item' });
  });

  it('are dropped, not refused, below a schema marked ignoringUnknownFields, which the document says', async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/telemetry',
      payload: { report: { load: 1, fan: 'fast', gpus: [{ index: 0, temp_c: 80 }] } },
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toEqual({ report: { load: 1, gpus: [{ index: 0 }] } });
    // Above the mark, the body is as strict as any other.
    const outer = await app.inject({
      method: 'POST',
      url: '/telemetry',
      payload: { report: { load: 1, gpus: [] }, x: 1 },
    });
    expect(outer.statusCode).toBe(400);
    expect(paths(outer)).toEqual(['body.x']);
    const doc = (await app.inject({ method: 'GET', url: '/docs/json' })).json();
    const schema = doc.paths['/telemetry'].post.requestBody.content['application/json'].schema;
    expect(schema.additionalProperties).toBe(false);
    expect(schema.properties.report['x-unknown-fields']).toBe('ignored');
    expect(schema.properties.report.additionalProperties).toBeUndefined();
  });

  it('makes the same schema once (a cache), leaving the original open', () => {
    expect(strictInput(body)).toBe(strictInput(body));
    expect(body.safeParse({ title: 't', extra: 1 }).success).toBe(true);
    expect(strictInput(body).safeParse({ title: 't', extra: 1 }).success).toBe(false);
  });
});
