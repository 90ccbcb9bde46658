/**
 * The committed OpenAPI document (`openapi.json`) is the one the service serves: the typed client
 * (`packages/client`) is generated from it. After an API change: `pnpm test -u` rewrites it, then
 * `pnpm --filter @gpu/client generate`.
 */
import { describe, expect, it } from 'vitest';
import { useBillingHarness } from './support/setup.ts';

const h = useBillingHarness();

describe('openapi.json', () => {
  it('is the document the service serves', async () => {
    const doc = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    await expect(`${JSON.stringify(doc, null, 2)}\n`).toMatchFileSnapshot('../openapi.json');
  });
});
