/**
 * What the four services' OpenAPI documents (the committed `openapi.json`, which each service's own test keeps equal
 * to what it serves) promise alike, read side by side: callers are sent to the gateway, the platform's one origin, and
 * every list follows the one paging contract (docs/conventions.md, "Paging"): the same `limit` and `cursor`
 * parameters (`pageQuery` in `@gpu/common`), a JSON array of the items as the body, and the next page named in
 * `X-Next-Cursor` and `Link`.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { PAGE_LIMIT } from '../packages/common/src/index.ts';
import { ROUTES, SERVICE_PORTS } from '../tools/gateway/src/routes.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const SERVICES = ['auth', 'storage', 'provider-registry', 'billing'] as const;

// biome-ignore lint/suspicious/noExplicitAny: a parsed JSON document, read by path
type Json = Record<string, any>;
const documents = SERVICES.map(
  (service) =>
    [service, JSON.parse(readFileSync(path.join(root, 'services', service, 'openapi.json'), 'utf8')) as Json] as const,
);

describe.each(documents)('the OpenAPI document of %s', (service, doc) => {
  it("names the gateway as its one server, the origin callers use, not the service's own port", () => {
    expect(doc.servers).toEqual([
      {
        url: 'http://127.0.0.1:8080',
        description: expect.stringMatching(/gateway on a local machine/) as unknown as string,
        'x-internal': false,
      },
    ]);
  });

  it('lists under the gateway only what the gateway serves: every other operation names the service itself', () => {
    const routed = (p: string) => ROUTES[service].some((prefix) => p === prefix || p.startsWith(`${prefix}/`));
    const internal = {
      url: `http://127.0.0.1:${SERVICE_PORTS[service]}`,
      description: expect.stringMatching(/no gateway routes this operation/) as unknown as string,
      'x-internal': true,
    };
    const served = operations(doc).filter(({ name }) => routed(name.split(' ')[1]!));
    const unrouted = operations(doc).filter(({ name }) => !routed(name.split(' ')[1]!));
    expect(served.length).toBeGreaterThan(0);
    for (const { name, op } of served) expect(op.servers, name).toBeUndefined();
    // The service's health (the gateway answers /health for itself) and storage's grants (asked for by billing).
    expect(unrouted.map(({ name }) => name)).toEqual(
      expect.arrayContaining(['GET /health', ...(service === 'storage' ? ['POST /grants'] : [])]),
    );
    for (const { name, op } of unrouted) expect(op.servers, name).toEqual([internal]);
  });
});

/** The operations of a document, each with its path and method. */
function operations(doc: Json): { name: string; op: Json }[] {
  return Object.entries(doc.paths as Record<string, Json>).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([method]) => ['get', 'put', 'post', 'patch', 'delete', 'head'].includes(method))
      .map(([method, op]) => ({ name: `${method.toUpperCase()} ${path}`, op: op as Json })),
  );
}

/** A schema with its `$ref` resolved against the document. */
const resolve = (doc: Json, schema: Json | undefined): Json | undefined =>
  schema?.$ref ? doc.components.schemas[String(schema.$ref).split('/').pop()!] : schema;

/** The operations that answer a list: a 200 whose JSON body is an array, or that names a next page. */
function lists(doc: Json) {
  return operations(doc).filter(({ op }) => {
    const ok = op.responses?.['200'];
    const body = resolve(doc, ok?.content?.['application/json']?.schema);
    return (
      body?.type === 'array' || 'X-Next-Cursor' in (ok?.headers ?? {}) || 'next_cursor' in (body?.properties ?? {})
    );
  });
}

const param = (op: Json, name: string) => (op.parameters as Json[] | undefined)?.find((p) => p.name === name);

describe('the paging contract', () => {
  const all = documents.flatMap(([service, doc]) => lists(doc).map((l) => ({ ...l, service, doc })));
  const reference = param(all[0]!.op, 'limit');

  it('has one page size: an integer with one range and default', () => {
    expect(reference).toMatchObject({
      in: 'query',
      required: false,
      schema: { type: 'integer', minimum: PAGE_LIMIT.min, maximum: PAGE_LIMIT.max, default: PAGE_LIMIT.default },
    });
  });

  it('finds the lists of every service', () => {
    expect(all.map((l) => `${l.service} ${l.name}`)).toEqual(
      expect.arrayContaining([
        'auth GET /api/v1/auth/clients',
        'storage GET /objects/{bucketName}/list',
        'storage GET /objects/list',
        'provider-registry GET /providers',
        'provider-registry GET /offers',
        'billing GET /api/v1/wallet/{walletID}/transactions',
        'billing GET /api/v1/billing/sessions',
        'billing GET /api/v1/billing/history',
        'billing GET /api/v1/billing/storage-usage',
      ]),
    );
  });

  it.each(all.map((l) => [`${l.service} ${l.name}`, l] as const))(
    '%s takes the same limit and cursor, answers an array and names the next page in its headers',
    (_name, { op, doc }) => {
      expect(param(op, 'limit')).toEqual(reference);
      expect(param(op, 'cursor')).toEqual(param(all[0]!.op, 'cursor'));
      expect(param(op, 'cursor')).toMatchObject({ in: 'query', required: false, schema: { type: 'string' } });
      const ok = op.responses['200'];
      expect(resolve(doc, ok.content['application/json'].schema)?.type).toBe('array');
      expect(Object.keys(ok.headers)).toEqual(expect.arrayContaining(['X-Next-Cursor', 'Link']));
    },
  );
});
