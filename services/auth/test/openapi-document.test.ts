/**
 * The committed OpenAPI document (`openapi.json`) is the one the service serves: the typed client
 * (`packages/client`) is generated from it. After an API change: `pnpm test -u` rewrites it, then
 * `pnpm --filter @gpu/client generate`. It holds what a client author needs (common's `contractProblems`): every
 * operation named, every body a named schema, and exactly the routes the service serves.
 */
import { contractProblems } from '@gpu/common/testing';
import { describe, expect, it } from 'vitest';
import { useAuth } from './helpers.ts';

const auth = useAuth();

describe('openapi.json', () => {
  it('is the document the service serves', async () => {
    const doc = (await auth.app.inject({ method: 'GET', url: '/docs/json' })).json();
    await expect(`${JSON.stringify(doc, null, 2)}\n`).toMatchFileSnapshot('../openapi.json');
  });

  it('names every operation and body, and documents exactly the routes served', async () => {
    const doc = (await auth.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const served = [
      ...auth.app.routeTable,
      { method: 'GET', url: '/health' },
      { method: 'GET', url: '/health/ready' },
      { method: 'GET', url: '/health/live' },
    ];
    expect(contractProblems(doc, served)).toEqual([]);
  });

  it('documents logout as 204 without a body, and the paging headers of the client list', async () => {
    const doc = (await auth.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const logout = doc.paths['/api/v1/auth/logout'].post.responses['204'];
    expect(logout).not.toHaveProperty('content');
    const list = doc.paths['/api/v1/auth/clients'].get.responses['200'];
    expect(Object.keys(list.headers)).toEqual(expect.arrayContaining(['X-Next-Cursor', 'Link']));
  });
});
