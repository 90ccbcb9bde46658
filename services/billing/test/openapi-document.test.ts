/**
 * The committed OpenAPI document (`openapi.json`) is the one the service serves: the typed client
 * (`packages/client`) is generated from it. After an API change: `pnpm test -u` rewrites it, then
 * `pnpm --filter @gpu/client generate`. It holds what a client author needs (common's `contractProblems`): every
 * operation named, every body a named schema, and exactly the routes the service serves.
 */
import { contractProblems } from '@gpu/common/testing';
import { describe, expect, it } from 'vitest';
import { useBillingHarness } from './support/setup.ts';

const h = useBillingHarness();

describe('openapi.json', () => {
  it('is the document the service serves', async () => {
    const doc = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    await expect(`${JSON.stringify(doc, null, 2)}\n`).toMatchFileSnapshot('../openapi.json');
  });

  it('names every operation and body, and documents exactly the routes served', async () => {
    const doc = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const served = [...h.app.routeTable, { method: 'GET', url: '/health' }];
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
});
