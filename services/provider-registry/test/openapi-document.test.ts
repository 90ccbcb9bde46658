/**
 * The committed OpenAPI document (`openapi.json`) is the one the service serves: the typed client
 * (`packages/client`) is generated from it. After an API change: `pnpm test -u` rewrites it, then
 * `pnpm --filter @gpu/client generate`. It holds what a client author needs (common's `contractProblems`): every
 * operation named, every body a named schema, and exactly the routes the service serves.
 */
import { contractProblems } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Harness, register, startHarness } from './helpers.ts';

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ nats: false });
});
afterAll(() => h?.close());

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

  it("declares discovery's paging headers and a registration's Location", async () => {
    const doc = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const list = doc.paths['/providers'].get.responses['200'];
    expect(Object.keys(list.headers)).toEqual(expect.arrayContaining(['X-Next-Cursor', 'Link']));
    expect(doc.paths['/providers'].post.responses['201'].headers).toHaveProperty('Location');
  });

  it('documents as optional the bodies the service takes optionally, and takes them so', async () => {
    const doc = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const heartbeat = doc.paths['/providers/{providerID}/heartbeat'].post;
    expect(heartbeat.requestBody.required).toBe(false);
    expect(heartbeat.requestBody.content).toHaveProperty('application/json');
    // A registration's body is required, and documented so; so is a message to the inbox.
    expect(doc.paths['/providers'].post.requestBody.required).toBe(true);
    expect(doc.paths['/messages'].post.requestBody.required).toBe(true);

    const p = await register(h.app);
    const bare = await h.app.inject({ method: 'POST', url: '/messages' });
    expect(bare.statusCode).toBe(400);
    const beat = await h.app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` });
    expect(beat.statusCode).toBe(200);
  });
});
