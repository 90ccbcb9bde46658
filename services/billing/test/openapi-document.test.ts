/**
 * The committed OpenAPI document (`openapi.json`) is the one the service serves: the typed client
 * (`packages/client`) is generated from it. After an API change: `pnpm test -u` rewrites it, then
 * `pnpm --filter @gpu/client generate`. It holds what a client author needs (common's `contractProblems`): every
 * operation named, every body a named schema, and exactly the routes the service serves.
 */
import { contractProblems } from '@gpu/common/testing';
import { describe, expect, it } from 'vitest';
import { useBillingHarness } from './support/setup.ts';

// biome-ignore lint/suspicious/noExplicitAny: a parsed JSON document, read by path
type Json = Record<string, any>;

const h = useBillingHarness();

describe('openapi.json', () => {
  it('is the document the service serves', async () => {
    const doc = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    await expect(`${JSON.stringify(doc, null, 2)}\n`).toMatchFileSnapshot('../openapi.json');
  });

  it('names every operation and body, and documents exactly the routes served', async () => {
    const doc = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const served = [
      ...h.app.routeTable,
      { method: 'GET', url: '/health' },
      { method: 'GET', url: '/health/ready' },
      { method: 'GET', url: '/health/live' },
    ];
    expect(contractProblems(doc, served)).toEqual([]);
  });

  it('declares the paging headers of every list and the replay header of every idempotent answer', async () => {
    const doc = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    for (const path of [
      '/api/v1/wallet/{walletID}/transactions',
      '/api/v1/billing/sessions',
      '/api/v1/billing/history',
    ]) {
      expect(Object.keys(doc.paths[path].get.responses['200'].headers), path).toEqual(
        expect.arrayContaining(['X-Next-Cursor', 'Link']),
      );
    }
    expect(Object.keys(doc.paths['/api/v1/wallet/{walletID}/withdraw'].post.responses['202'].headers)).toContain(
      'Idempotent-Replayed',
    );
  });

  it('lists the allowed values of every status and type filter, and takes exactly those', async () => {
    const doc = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const wallet = await h.fundedWallet('10');
    const filters = Object.entries(doc.paths as Record<string, { get?: { parameters?: Json[] } }>).flatMap(
      ([path, item]) =>
        (item.get?.parameters ?? [])
          .filter((p) => p.in === 'query' && ['status', 'type'].includes(p.name))
          .map((p) => ({ path, name: p.name as string, schema: p.schema as Json })),
    );
    expect(filters.map((f) => `${f.path} ${f.name}`)).toEqual(
      expect.arrayContaining([
        '/api/v1/wallet/{walletID}/transactions type',
        '/api/v1/wallet/{walletID}/transactions status',
        '/api/v1/billing/sessions status',
        '/api/v1/billing/history status',
      ]),
    );
    for (const { path, name, schema } of filters) {
      const values = schema.items?.enum as string[] | undefined;
      expect(schema.type, `${path} ${name}`).toBe('array');
      expect(values?.length, `${path} ${name}`).toBeGreaterThan(1);
      const url = path.replace('{walletID}', wallet.id);
      for (const value of values ?? []) {
        const res = await h.app.inject({ method: 'GET', url: `${url}?${name}=${value}` });
        expect(res.statusCode, `${url}?${name}=${value}`).toBe(200);
      }
      const both = await h.app.inject({ method: 'GET', url: `${url}?${name}=${values?.[0]},${values?.[1]}` });
      expect(both.statusCode).toBe(200);
      const bad = await h.app.inject({ method: 'GET', url: `${url}?${name}=${values?.[0]}&${name}=bogus` });
      expect(bad.statusCode, `${url}?${name}=bogus`).toBe(400);
      expect(bad.json()).toMatchObject({ code: 'VALIDATION_ERROR' });
      expect(bad.json().errors[0].path.startsWith(`querystring.${name}`)).toBe(true);
    }
  });
});
