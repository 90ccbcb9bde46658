/**
 * The heartbeat's clock in its narrow row (issue #29, the liveness migration): `provider_liveness` carries each
 * provider's `last_seen_at` and a copy of its status, which must equal `providers.status` after every path that
 * changes a status; a heartbeat that changes no status writes the narrow row only (not even a lock on the provider
 * row); and a sweep racing heartbeats still has exactly one winner per provider. Against real PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { migrateToLatest, openDatabase } from '@gpu/common';
import { createTestDatabase } from '@gpu/common/testing';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../src/db/migrations/index.ts';
import {
  ageProvider,
  endRental,
  gpu,
  type Harness,
  register,
  registryMigrator,
  rent,
  startHarness,
} from './helpers.ts';

// heartbeat_interval 1s: the default bound is 3 intervals, 3 s.
const BOUND_MS = 3000;
let h: Harness;
let second: Harness;

beforeAll(async () => {
  h = await startHarness({ config: { heartbeat_interval: '1s' } });
  second = await startHarness({
    testDb: h.testDb,
    config: { heartbeat_interval: '1s', messaging: h.config.messaging },
  });
});
afterAll(async () => {
  await second?.close();
  await h?.close();
  await h?.testDb.drop();
});

/** The provider's stored status and its narrow row's copy and clock (undefined: no such row). */
async function rows(id: string) {
  const { rows } = await sql<{ status: string | null; copy: string | null; last_seen_at: Date | null }>`
    SELECT p.status, l.status AS copy, l.last_seen_at
    FROM (SELECT ${id}::uuid AS id) k
    LEFT JOIN providers p ON p.id = k.id LEFT JOIN provider_liveness l ON l.provider_id = k.id`.execute(h.database.db);
  return rows[0]!;
}

/**
 * Checks the copies of `id` (and of every provider) equal the stored status, GPU model summary, owner and bound daemon;
 * returns the stored status.
 */
async function inStep(id: string): Promise<string | null> {
  const r = await rows(id);
  expect(r.copy).toBe(r.status);
  const { rows: drift } = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM providers p FULL JOIN provider_liveness l ON l.provider_id = p.id
    WHERE p.status IS DISTINCT FROM l.status OR p.gpu_models IS DISTINCT FROM l.gpu_models
      OR p.owner_id IS DISTINCT FROM l.owner_id OR p.daemon_client_id IS DISTINCT FROM l.daemon_client_id`.execute(
    h.database.db,
  );
  expect(drift[0]!.n).toBe(0);
  return r.status;
}

const heartbeat = (id: string, payload: unknown = {}) =>
  h.app.inject({ method: 'POST', url: `/providers/${id}/heartbeat`, payload: payload as Record<string, unknown> });

/** The provider row's version and lock word: a write or a row lock (FOR UPDATE) changes them. */
async function rowVersion(id: string) {
  const { rows } = await sql<{ xmin: string; xmax: string; ctid: string }>`
    SELECT xmin::text, xmax::text, ctid::text FROM providers WHERE id = ${id}`.execute(h.database.db);
  return rows[0]!;
}

describe('the status copy in provider_liveness', () => {
  it('follows every path that changes a status', async () => {
    // Registration: the narrow row comes with the provider, with its status and the registration's time.
    const p = await register(h.app, { gpus: [gpu(), gpu()] });
    expect(await inStep(p.id)).toBe('idle');
    expect((await rows(p.id)).last_seen_at?.toISOString()).toBe(p.registered_at);
    const m = await register(h.app, { status: 'maintenance' });
    expect(await inStep(m.id)).toBe('maintenance');

    // A heartbeat that keeps the status, then the sweep, then a heartbeat that revives.
    expect((await heartbeat(p.id)).json().status).toBe('idle');
    expect(await inStep(p.id)).toBe('idle');
    await ageProvider(h.database, p.id, BOUND_MS * 2);
    await h.app.registry.sweepOffline();
    expect(await inStep(p.id)).toBe('offline');
    expect((await heartbeat(p.id)).json()).toMatchObject({ previous_status: 'offline', status: 'idle' });
    expect(await inStep(p.id)).toBe('idle');

    // Explicit updates: PATCH status, and a full update with a status.
    const patch = (status: string) =>
      h.app.inject({ method: 'PATCH', url: `/providers/${p.id}/status`, payload: { status } });
    expect((await patch('error')).statusCode).toBe(200);
    expect(await inStep(p.id)).toBe('error');
    expect((await heartbeat(p.id)).json()).toMatchObject({ previous_status: 'error', status: 'idle' });
    expect(await inStep(p.id)).toBe('idle');
    const current = (await h.app.inject({ url: `/providers/${p.id}` })).json();
    const { id: _id, registered_at: _r, last_seen_at: _l, ...body } = current;
    const put = await h.app.inject({
      method: 'PUT',
      url: `/providers/${p.id}`,
      payload: { ...body, status: 'maintenance' },
    });
    expect(put.statusCode, put.body).toBe(200);
    expect(await inStep(p.id)).toBe('maintenance');
    // A full update that changes the GPUs' models (and not the status): the model summary's copy follows.
    const models = await h.app.inject({
      method: 'PUT',
      url: `/providers/${p.id}`,
      payload: {
        ...body,
        status: 'maintenance',
        gpus: body.gpus.map((g: object) => ({ ...g, model_name: 'NVIDIA L4' })),
      },
    });
    expect(models.statusCode, models.body).toBe(200);
    expect(await inStep(p.id)).toBe('maintenance');
    const copied = await sql<{ gpu_models: string }>`
      SELECT gpu_models FROM provider_liveness WHERE provider_id = ${p.id}`.execute(h.database.db);
    expect(copied.rows[0]!.gpu_models).toBe('|nvidia l4|');
    expect((await patch('idle')).statusCode).toBe(200);
    expect(await inStep(p.id)).toBe('idle');

    // The rental rule: sessions, and a heartbeat's metrics that change a GPU's health.
    const session = await rent(h.app, p.id);
    expect(await inStep(p.id)).toBe('busy');
    await endRental(h.app, p.id, session);
    expect(await inStep(p.id)).toBe('idle');
    await rent(h.app, p.id, randomUUID());
    expect(await inStep(p.id)).toBe('busy');
    // Offline while rented, then a heartbeat: back to busy (the sessions still hold it).
    expect((await patch('offline')).statusCode).toBe(200);
    expect(await inStep(p.id)).toBe('offline');
    expect((await heartbeat(p.id)).json().status).toBe('busy');
    expect(await inStep(p.id)).toBe('busy');

    const q = await register(h.app, { gpus: [gpu()], min_gpus_per_rental: 1 });
    const sick = await heartbeat(q.id, { gpu_metrics: [{ index: 0, is_healthy: false }] });
    expect(sick.statusCode, sick.body).toBe(200);
    expect(await inStep(q.id)).toBe('idle');
    await rent(h.app, q.id, randomUUID());
    expect(await inStep(q.id)).toBe('busy');

    // Deletion: the narrow row goes with the provider.
    expect((await h.app.inject({ method: 'DELETE', url: `/providers/${p.id}` })).statusCode).toBe(200);
    expect(await rows(p.id)).toEqual({ status: null, copy: null, last_seen_at: null });
    expect(await inStep(q.id)).toBe('busy');
  });
});

describe('a heartbeat that changes no status', () => {
  it('writes the narrow row only: no new provider row version, not even a row lock', async () => {
    const p = await register(h.app);
    const before = await rowVersion(p.id);
    const seen = (await rows(p.id)).last_seen_at!;
    // One at a time, then several at once (written together: the service's grouped statement).
    const first = await heartbeat(p.id);
    expect(first.json()).toMatchObject({ previous_status: 'idle', status: 'idle' });
    const others = await Promise.all(Array.from({ length: 5 }, () => register(h.app)));
    const versions = await Promise.all(others.map((o) => rowVersion(o.id)));
    const beats = await Promise.all([p, ...others].map((o) => heartbeat(o.id)));
    expect(beats.map((b) => b.statusCode)).toEqual(beats.map(() => 200));
    expect(await rowVersion(p.id)).toEqual(before);
    expect(await Promise.all(others.map((o) => rowVersion(o.id)))).toEqual(versions);
    const after = (await rows(p.id)).last_seen_at!;
    expect(after.getTime()).toBeGreaterThan(seen.getTime());
    expect(Date.parse(first.json().last_seen_at)).toBeLessThanOrEqual(after.getTime());
    expect(await inStep(p.id)).toBe('idle');
  });

  it("writes a GPU's new metrics on its row's own page (heap-only), on a page as full as inserts fill it", async () => {
    // Machines of 8 GPUs, one at a time, until one's GPU rows span two pages: its statement went on to the next page
    // because the first held as much as the fillfactor lets inserts put there. A GPU of it on that first page.
    let found: { provider_id: string; idx: number; block: string } | undefined;
    for (let i = 0; i < 20 && !found; i++) {
      const machine = await register(h.app, { gpus: Array.from({ length: 8 }, () => gpu()) });
      const { rows: placed } = await sql<{ provider_id: string; idx: number; block: string }>`
        SELECT provider_id::text, idx, (ctid::text::point)[0]::text AS block
        FROM gpus WHERE provider_id = ${machine.id} ORDER BY idx`.execute(h.database.db);
      if (placed[0]!.block !== placed.at(-1)!.block) found = placed[0];
    }
    if (!found) throw new Error('no machine of 8 GPUs spanned two pages in 20');
    const row = found;
    const block = async () =>
      (
        await sql<{ block: string }>`
          SELECT (ctid::text::point)[0]::text AS block FROM gpus
          WHERE provider_id = ${row.provider_id} AND idx = ${row.idx}`.execute(h.database.db)
      ).rows[0]!.block;
    const beat = await heartbeat(row.provider_id, {
      gpu_metrics: [{ index: row.idx, utilization_gpu: 87, utilization_mem: 40, temperature: 71, power_draw: 350 }],
    });
    expect(beat.statusCode).toBe(200);
    const { rows: written } = await sql<{ utilization_gpu: number }>`
      SELECT utilization_gpu FROM gpus WHERE provider_id = ${row.provider_id} AND idx = ${row.idx}`.execute(
      h.database.db,
    );
    expect(written).toEqual([{ utilization_gpu: 87 }]);
    // On the same page, with no indexed column changed: PostgreSQL wrote it heap-only, no new gpus_pkey entry.
    expect(await block()).toBe(row.block);
  });

  it("limits a daemon's heartbeat to its owner's machines", async () => {
    const owner = await h.issuer.user(['provider']);
    const daemon = await h.issuer.client('daemon', owner.id);
    const stranger = await h.issuer.client('daemon', randomUUID());
    const p = await register(h.app, { owner_id: owner.id });
    const seen = (await rows(p.id)).last_seen_at!;
    const theirs = await h.app.inject({
      method: 'POST',
      url: `/providers/${p.id}/heartbeat`,
      payload: {},
      headers: stranger.headers,
    });
    expect(theirs.statusCode).toBe(403);
    expect((await rows(p.id)).last_seen_at).toEqual(seen);
    const own = await h.app.inject({
      method: 'POST',
      url: `/providers/${p.id}/heartbeat`,
      payload: {},
      headers: daemon.headers,
    });
    expect(own.statusCode).toBe(200);
  });
});

describe('the sweep racing heartbeats', () => {
  it('has one winner per provider, and each change is recorded once', async () => {
    const owner = `race-${Date.now()}`;
    const fleet = await Promise.all(
      Array.from({ length: 60 }, (_, i) => register(h.app, { owner_id: owner, name: `r-${i}` })),
    );
    const ids = fleet.map((p) => p.id);
    await sql`UPDATE provider_liveness SET last_seen_at = now() - interval '1 hour'
              WHERE provider_id = ANY(${ids}::uuid[])`.execute(h.database.db);
    const { rows: started } = await sql<{ at: Date }>`SELECT clock_timestamp() AS at`.execute(h.database.db);
    // Two instances sweep while every provider's heartbeat arrives, through both instances.
    const [swept] = await Promise.all([
      Promise.all([h.app.registry.sweepOffline(7), second.app.registry.sweepOffline(7)]),
      ...ids.map((id, i) =>
        (i % 2 ? second : h).app.inject({ method: 'POST', url: `/providers/${id}/heartbeat`, payload: {} }),
      ),
    ]);
    expect(swept[0] + swept[1]).toBeLessThanOrEqual(ids.length);
    // Every heartbeat landed after the silence: whichever came first, the provider is idle now.
    for (const id of ids) expect(await inStep(id)).toBe('idle');
    const { rows: events } = await sql<{ id: string; offline: number; revived: number }>`
      SELECT payload->>'provider_id' AS id,
             count(*) FILTER (WHERE payload->>'status' = 'offline')::int AS offline,
             count(*) FILTER (WHERE payload->>'previous_status' = 'offline' AND payload->>'status' = 'idle')::int
               AS revived
      FROM outbox_events WHERE payload->>'provider_id' = ANY(${ids})
      GROUP BY 1`.execute(h.database.db);
    // Every provider the sweeps took offline was recorded so once: as many offline events since the race began as
    // they counted (of any provider: one an earlier test of this file registered may fall silent meanwhile on a slow
    // machine, and be swept with these).
    const { rows: recorded } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM outbox_events
      WHERE payload->>'status' = 'offline' AND created_at >= ${started[0]!.at}`.execute(h.database.db);
    expect(recorded[0]!.n).toBe(swept[0] + swept[1]);
    // A provider of this test swept offline was revived once by its heartbeat; the others neither.
    expect(events.reduce((n, e) => n + e.offline, 0)).toBeLessThanOrEqual(swept[0] + swept[1]);
    for (const e of events) {
      expect(e.offline).toBeLessThanOrEqual(1);
      expect(e.revived).toBe(e.offline);
    }
  });
});

describe('the liveness migration', () => {
  it('moves each clock into the narrow row and, down, back into the provider row as it was', async () => {
    const testDb = await createTestDatabase('registry_liveness_migration');
    const database = await openDatabase({ url: testDb.url, poolSize: 2 });
    try {
      // biome-ignore lint/suspicious/noExplicitAny: migrations run on Kysely<any>, as the migrator does
      const db = database.db as Kysely<any>;
      const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < '20250110'));
      await migrateToLatest(db, 'provider-registry', before);
      await sql`
        INSERT INTO providers (id, owner_id, name, status, last_seen_at) VALUES
          ('00000000-0000-4000-8000-000000000001', 'o', 'a', 'idle', '2026-01-02 03:04:05.678901+00'),
          ('00000000-0000-4000-8000-000000000002', 'o', 'b', 'offline', '2025-12-31 23:59:59+00')`.execute(db);
      const schema = async () => {
        const { rows } = await sql<{ def: string }>`
          SELECT pg_get_indexdef(indexrelid) AS def FROM pg_index WHERE indrelid = 'providers'::regclass
          UNION ALL SELECT md5(pg_get_functiondef('providers_track_uptime'::regproc))
          ORDER BY 1`.execute(db);
        return rows.map((r) => r.def);
      };
      const stored = async () =>
        (await sql`SELECT id, status, last_seen_at FROM providers ORDER BY id`.execute(db)).rows;
      const [schemaBefore, rowsBefore] = [await schema(), await stored()];

      await migrateToLatest(db, 'provider-registry', migrations);
      const { rows: moved } = await sql`
        SELECT provider_id AS id, status, last_seen_at FROM provider_liveness ORDER BY provider_id`.execute(db);
      expect(moved).toEqual(rowsBefore);

      const migrator = registryMigrator(db);
      // Down to the migration before it (the ones after it first).
      const { error, results } = await migrator.migrateTo('20250109000000_gpu_leases');
      expect(error).toBeUndefined();
      expect(results?.map((r) => [r.migrationName, r.status]).at(-1)).toEqual([
        '20250110000000_provider_liveness',
        'Success',
      ]);
      expect(await stored()).toEqual(rowsBefore);
      expect(await schema()).toEqual(schemaBefore);
      const { rows: tables } = await sql`SELECT 1 FROM pg_class WHERE relname = 'provider_liveness'`.execute(db);
      expect(tables).toEqual([]);
    } finally {
      await database.close();
      await testDb.drop();
    }
  });
});
