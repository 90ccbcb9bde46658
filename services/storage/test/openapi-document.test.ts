/**
 * The committed OpenAPI document (`openapi.json`) is the one the service serves: the typed client
 * (`packages/client`) is generated from it. After an API change: `pnpm test -u` rewrites it, then
 * `pnpm --filter @gpu/client generate`. It holds what a client author needs (common's `contractProblems`): every
 * operation named, every body a named schema, and exactly the routes the service serves.
 */
import { contractProblems } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type TestService } from './helpers.ts';

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(() => svc?.close());

describe('openapi.json', () => {
  it('is the document the service serves', async () => {
    const doc = (await svc.app.inject({ method: 'GET', url: '/docs/json' })).json();
    await expect(`${JSON.stringify(doc, null, 2)}\n`).toMatchFileSnapshot('../openapi.json');
  });

  it('names every operation and body, and documents exactly the routes served', async () => {
    const doc = (await svc.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const served = [
      ...svc.app.routeTable,
      { method: 'GET', url: '/health' },
      { method: 'GET', url: '/health/ready' },
      { method: 'GET', url: '/health/live' },
    ];
    expect(contractProblems(doc, served)).toEqual([]);
    expect(Object.keys(doc.paths)).toContain('/objects/{bucketName}/{objectKey}');
  });
});
