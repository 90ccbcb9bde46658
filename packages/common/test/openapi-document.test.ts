/**
 * Every service's document declares the platform's contract the same way (src/openapi/document.ts): security at the
 * root and `security: []` on public operations, the problems the platform itself can answer, named components
 * reached by `$ref`, headers from one table, and a path wildcard as a named parameter.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  type App,
  baseConfigSchema,
  createApp,
  createLogger,
  PAGE_HEADERS,
  problemSchema,
  schemaRegistry,
} from '../src/index.ts';
import { contractProblems } from '../src/testing/index.ts';

// biome-ignore lint/suspicious/noExplicitAny: a parsed JSON document, read by path
type Json = Record<string, any>;
let app: App;
let doc: Json;

beforeAll(async () => {
  const schemas = schemaRegistry();
  const thing = z.object({ id: z.string().describe('its ID'), size: z.number() }).register(schemas, { id: 'Thing' });
  const thingList = z.array(thing).register(schemas, { id: 'ThingList' });
  const newThing = z.object({ size: z.number().describe('how big') }).register(schemas, { id: 'NewThing' });
  // Registered in no registry: must come out inline, and so fail the contract check.
  const unnamed = z.object({ ok: z.boolean() });
  const config = baseConfigSchema.parse({ access: { enabled: false } });
  const logger = createLogger({ service: 'test', instanceId: 'i-1', level: 'silent' });
  app = await createApp({ service: 'test-service', description: 'test', config, logger, schemas });
  app.post(
    '/things',
    {
      config: { openapi: { headers: { 201: ['Location'], 409: ['Retry-After'] } } },
      schema: {
        operationId: 'createThing',
        summary: 'Make one',
        body: newThing,
        response: { 201: thing, 409: problemSchema.describe('THING_BUSY: try again') },
      },
    },
    async (_request, reply) => reply.code(201).send({ id: 'a', size: 1 }),
  );
  app.get(
    '/things',
    {
      config: { public: true, openapi: { headers: { 200: PAGE_HEADERS } } },
      schema: { operationId: 'listThings', summary: 'List them', response: { 200: thingList } },
    },
    async () => [],
  );
  app.post(
    '/quote',
    {
      config: { public: true, openapi: { tokenOptional: true } },
      schema: {
        operationId: 'quoteThing',
        summary: 'A price; with a provider, for its owner only',
        body: newThing,
        response: { 200: thing, 401: problemSchema },
      },
    },
    async () => ({ id: 'q', size: 1 }),
  );
  app.get(
    '/things/:id/*',
    {
      config: { openapi: { wildcard: 'part' } },
      schema: {
        operationId: 'getThingPart',
        summary: 'A part',
        params: z.object({ id: z.string(), '*': z.string().describe('slashes allowed') }),
        response: { 200: unnamed, 404: problemSchema.describe('THING_NOT_FOUND: no such thing') },
      },
    },
    async () => ({ ok: true }),
  );
  await app.ready();
  doc = (await app.inject({ method: 'GET', url: '/docs/json' })).json();
});

afterAll(() => app.close());

describe('a service document', () => {
  it('is OpenAPI 3.1 with the bearer scheme at the root and the gateway as its server', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.security).toEqual([{ bearerAuth: [] }]);
    expect(doc.servers).toEqual([expect.objectContaining({ url: 'http://127.0.0.1:8080' })]);
  });

  it('marks public operations with security: [] and leaves the rest to the root', () => {
    expect(doc.paths['/things'].get.security).toEqual([]);
    expect(doc.paths['/things'].post.security).toBeUndefined();
    expect(doc.paths['/health'].get.security).toEqual([]);
    // Public, but a token for some requests: optional.
    expect(doc.paths['/quote'].post.security).toEqual([{}, { bearerAuth: [] }]);
  });

  it('declares the problems the platform can answer, by $ref to one response per status', () => {
    const post = doc.paths['/things'].post.responses;
    expect(Object.keys(post).sort()).toEqual(['201', '400', '401', '403', '409', '413', '415', '500', '503']);
    expect(post['415']).toEqual({ $ref: '#/components/responses/UnsupportedMediaType' });
    // Public, no input: only what any request can meet.
    expect(Object.keys(doc.paths['/things'].get.responses).sort()).toEqual(['200', '500', '503']);
    // A route's own description of a problem stays beside the reference.
    expect(doc.paths['/things/{id}/{part}'].get.responses['404']).toEqual({
      $ref: '#/components/responses/NotFound',
      description: 'THING_NOT_FOUND: no such thing',
    });
    // A header of the route's own on a problem: the shared response spelled out, with it.
    expect(post['409']).toMatchObject({
      description: 'THING_BUSY: try again',
      content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
      headers: { 'Retry-After': { $ref: '#/components/headers/Retry-After' } },
    });
    expect(post['201'].headers.Location).toEqual({ $ref: '#/components/headers/Location' });
    const unauthorized = doc.components.responses.Unauthorized;
    expect(unauthorized.content).toEqual({
      'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } },
    });
    expect(Object.keys(unauthorized.headers)).toEqual([
      'Access-Control-Allow-Origin',
      'X-Request-ID',
      'X-Correlation-ID',
      'WWW-Authenticate',
    ]);
  });

  it('declares every answer header from the one table, a route adding its own', () => {
    const ok = doc.paths['/things'].get.responses['200'];
    expect(Object.keys(ok.headers)).toEqual([
      'Access-Control-Allow-Origin',
      'X-Request-ID',
      'X-Correlation-ID',
      'X-Next-Cursor',
      'Link',
    ]);
    expect(ok.headers.Link).toEqual({ $ref: '#/components/headers/Link' });
    expect(doc.components.headers.Link.description).toMatch(/rel="next"/);
  });

  it('names bodies by $ref, keeps their descriptions, and names an input-only schema plainly', () => {
    expect(doc.paths['/things'].post.requestBody.content['application/json'].schema).toEqual({
      $ref: '#/components/schemas/NewThing',
    });
    expect(Object.keys(doc.components.schemas).sort()).toEqual(['Health', 'NewThing', 'Problem', 'Thing', 'ThingList']);
    expect(doc.components.schemas.NewThing.properties.size.description).toBe('how big');
    expect(doc.components.schemas.NewThing.additionalProperties).toBe(false);
  });

  it('names a path wildcard, and the contract check finds what is missing', () => {
    const params = doc.paths['/things/{id}/{part}'].get.parameters.map((p: Json) => p.name);
    expect(params.sort()).toEqual(['id', 'part']);
    const problems = contractProblems(doc, [
      ...app.routeTable,
      { method: 'GET', url: '/health' },
      { method: 'GET', url: '/health/ready' },
      { method: 'GET', url: '/health/live' },
    ]);
    expect(problems).toEqual(['GET /things/{id}/{part}: 200 (application/json) is not a named schema']);
    expect(contractProblems(doc, [{ method: 'DELETE', url: '/things/:id' }])).toContain(
      'DELETE /things/{}: served but not documented',
    );
  });
});

describe('the contract check (OPENAPI_CHECK_FILE)', () => {
  it('appends every answer that differs from the document, and leaves the answers as they were', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'contract-'));
    const file = join(dir, 'violations.jsonl');
    const previous = process.env.OPENAPI_CHECK_FILE;
    process.env.OPENAPI_CHECK_FILE = file;
    const schemas = schemaRegistry();
    const item = z.object({ id: z.string(), n: z.number() }).register(schemas, { id: 'Item' });
    const config = baseConfigSchema.parse({ access: { enabled: false } });
    const logger = createLogger({ service: 'test', instanceId: 'i-1', level: 'silent' });
    const checked = await createApp({ service: 'checked', description: 'test', config, logger, schemas });
    if (previous === undefined) delete process.env.OPENAPI_CHECK_FILE;
    else process.env.OPENAPI_CHECK_FILE = previous;
    let answer: { status: number; body: unknown } = { status: 200, body: { id: 'a', n: 1 } };
    checked.get(
      '/items/:id',
      {
        schema: {
          operationId: 'getItem',
          summary: 'One item',
          params: z.object({ id: z.string() }),
          response: { 200: item, 404: problemSchema },
        },
      },
      // Sent as text, so a wrong body passes the serializer and reaches the check.
      async (_request, reply) =>
        reply
          .code(answer.status as 200)
          .type('application/json')
          .send(JSON.stringify(answer.body) as never),
    );
    checked.get('/untracked', async (_request, reply) => reply.code(418).send({ tea: true }));
    await checked.ready();
    try {
      expect((await checked.inject({ method: 'GET', url: '/items/a' })).statusCode).toBe(200);
      answer = { status: 200, body: { id: 'a', n: 'one' } };
      expect((await checked.inject({ method: 'GET', url: '/items/b' })).json()).toEqual({ id: 'a', n: 'one' });
      answer = { status: 409, body: { id: 'a', n: 1 } };
      expect((await checked.inject({ method: 'GET', url: '/items/c' })).statusCode).toBe(409);
      // A route without an operationId (a test's own) and the docs are not checked.
      expect((await checked.inject({ method: 'GET', url: '/untracked' })).statusCode).toBe(418);
      const lines = readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      expect(lines).toEqual([
        expect.objectContaining({
          operation: 'GET /items/:id',
          url: '/items/b',
          status: 200,
          problems: [expect.stringMatching(/body\/n must be number/)],
        }),
        expect.objectContaining({
          url: '/items/c',
          status: 409,
          problems: [expect.stringMatching(/status 409 is not declared/)],
        }),
      ]);
    } finally {
      await checked.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
