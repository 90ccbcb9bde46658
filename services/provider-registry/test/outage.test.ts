import { connectPublisher, createLogger, type Database } from '@gpu/common';
import { freePort, injectAs, startTestIssuer, type TestIssuer } from '@gpu/common/testing';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type RegistryApp } from '../src/app.ts';
import { registryConfigSchema } from '../src/config.ts';
import type { RegistryDB } from '../src/db/schema.ts';
import { DedicatedPostgres } from './dedicated-postgres.ts';
import { migratedDatabase, register } from './helpers.ts';

let server: DedicatedPostgres;
let database: Database<RegistryDB>;
let app: RegistryApp;
let issuer: TestIssuer;

beforeAll(async () => {
  server = new DedicatedPostgres(await freePort());
  issuer = await startTestIssuer();
  server.init().start();
  database = await migratedDatabase(server.url);
  const config = registryConfigSchema.parse({
    log_level: 'silent',
    database: { url: server.url, retry_attempts: 4 },
    request_timeout: '10s',
    access: issuer.accessConfig,
  });
  const logger = createLogger({ service: 'provider-registry', instanceId: 'outage', level: 'silent' });
  app = await buildApp({ config, logger, database, publisher: await connectPublisher({}), sweeper: false });
  await app.ready();
  injectAs(app, await issuer.user(['admin']));
});

afterAll(async () => {
  await app?.close();
  await database?.close();
  server.destroy();
  await issuer?.close();
});

const health = () => app.inject({ method: 'GET', url: '/health' });

describe('database outage', () => {
  it('retries through terminated connections without the caller noticing', async () => {
    const p = await register(app);
    // Fill the pool with idle connections, then have the server kill all of them.
    await Promise.all(Array.from({ length: 8 }, () => app.inject({ method: 'GET', url: `/providers/${p.id}` })));
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    const { rowCount } = await admin.query(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = $1',
      ['client backend'],
    );
    await admin.end();
    expect(rowCount).toBeGreaterThan(0);
    const results = await Promise.all(
      Array.from({ length: 8 }, () => app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` })),
    );
    expect(results.map((r) => r.statusCode)).toEqual(Array(8).fill(200));
  });

  it('answers 503 while the database is down and recovers by itself when it returns', async () => {
    const p = await register(app);
    expect((await health()).statusCode).toBe(200);

    server.stop();
    const down = await health();
    expect(down.statusCode).toBe(503);
    expect(down.json()).toMatchObject({ status: 'DOWN', checks: { database: { status: 'DOWN' } } });
    // Not ready either: every request needs the database, so the load balancer and Consul take the instance out.
    const ready = await app.inject({ method: 'GET', url: '/health/ready' });
    expect(ready.statusCode).toBe(503);
    expect(ready.json()).toMatchObject({ status: 'DOWN', checks: { database: { status: 'DOWN' } } });
    // Alive all the same: the liveness probe's answer checks nothing, so an outage restarts no instance.
    const live = await app.inject({ method: 'GET', url: '/health/live' });
    expect(live.statusCode).toBe(200);
    expect(live.json()).toMatchObject({ status: 'UP', checks: {} });
    const read = await app.inject({ method: 'GET', url: `/providers/${p.id}` });
    expect(read.statusCode).toBe(503);
    expect(read.headers['content-type']).toContain('application/problem+json');
    expect(read.json()).toMatchObject({ code: 'DEPENDENCY_UNAVAILABLE' });
    expect(read.body).not.toMatch(/ECONNREFUSED|select|SELECT/);
    const beat = await app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` });
    expect(beat.statusCode).toBe(503);
    const created = await app.inject({
      method: 'POST',
      url: '/providers',
      payload: { owner_id: 'o', name: 'during-outage', gpus: [{ model_name: 'X', vram: 1, driver_version: '1' }] },
    });
    expect(created.statusCode).toBe(503);
    await expect(app.registry.sweepOffline()).rejects.toThrow();

    server.start();
    const deadline = Date.now() + 15_000;
    while ((await health()).statusCode !== 200) {
      if (Date.now() > deadline) throw new Error('health did not recover');
      await new Promise((r) => setTimeout(r, 100));
    }
    expect((await app.inject({ method: 'GET', url: `/providers/${p.id}` })).statusCode).toBe(200);
    expect((await app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` })).statusCode).toBe(200);
    const list = await app.inject({ method: 'GET', url: '/providers?name=during-outage&limit=1000' });
    expect(list.json().some((x: { name: string }) => x.name === 'during-outage')).toBe(false);
  });
});
