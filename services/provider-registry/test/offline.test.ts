import { type CompiledQuery, Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { offlineAfterMs } from '../src/config.ts';
import type { RegistryDB } from '../src/db/schema.ts';
import { sweepOffline } from '../src/db/status-repository.ts';
import { AUTO_OFFLINE_FROM } from '../src/domain/provider.ts';
import { ageProvider, EventCollector, type Harness, register, startHarness } from './helpers.ts';

// heartbeat_interval 1s: the default bound is 3 intervals, 3 s.
const BOUND_MS = 3000;
let h: Harness;
let second: Harness;
let events: EventCollector;

beforeAll(async () => {
  h = await startHarness({ config: { heartbeat_interval: '1s' } });
  // A second registry instance on the same database and subject.
  second = await startHarness({
    testDb: h.testDb,
    config: { heartbeat_interval: '1s', messaging: h.config.messaging },
  });
  events = await EventCollector.start(h.subject);
});
afterAll(async () => {
  await events.close();
  await second.close();
  await h.close();
  await h.testDb.drop();
});

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

/** Rows the scans of an analyzed plan read, by table: the rows they returned and those their filters removed. */
function rowsReadOf(node: PlanNode, read: Record<string, number> = {}): Record<string, number> {
  const table = node['Relation Name'];
  if (table && node['Node Type'].includes('Scan')) {
    read[table] =
      (read[table] ?? 0) + (node['Actual Rows'] + (node['Rows Removed by Filter'] ?? 0)) * node['Actual Loops'];
  }
  for (const child of node.Plans ?? []) rowsReadOf(child, read);
  return read;
}

/** A pool of one client (its transaction, for Kysely): releasing it leaves it with its holder. */
const poolOf = (client: pg.PoolClient) =>
  ({ connect: async () => ({ query: client.query.bind(client), release: () => {} }), end: async () => {} }) as never;

/** Kysely on `pool`, each statement it sends kept in `statements`. */
const loggedOn = (pool: pg.Pool, statements: CompiledQuery[]) =>
  new Kysely<RegistryDB>({
    dialect: new PostgresDialect({ pool }),
    log: (e) => {
      if (e.level === 'query') statements.push(e.query);
    },
  });

const storedStatus = async (id: string) =>
  (await h.database.db.selectFrom('providers').select('status').where('id', '=', id).executeTakeFirstOrThrow()).status;
const shown = async (id: string) => (await h.app.inject({ method: 'GET', url: `/providers/${id}` })).json().status;

describe('automatic offline', () => {
  it('defaults the bound to three heartbeat intervals', async () => {
    const p = await register(h.app);
    expect(offlineAfterMs(h.config)).toBe(BOUND_MS);
    // Heard from a third of the bound ago: idle for two seconds more, however slowly the read comes.
    await ageProvider(h.database, p.id, BOUND_MS - 2000);
    expect(await shown(p.id)).toBe('idle');
    await ageProvider(h.database, p.id, BOUND_MS + 500);
    expect(await shown(p.id)).toBe('offline');
  });

  it('shows a silent provider as offline at once, in reads and in the status filter, before any sweep', async () => {
    const p = await register(h.app, { status: 'busy' });
    await ageProvider(h.database, p.id, BOUND_MS * 2);
    expect(await storedStatus(p.id)).toBe('busy');
    expect(await shown(p.id)).toBe('offline');
    const offline = (await h.app.inject({ method: 'GET', url: '/providers?status=offline&limit=1000' })).json();
    expect(offline.map((x: { id: string }) => x.id)).toContain(p.id);
    const busy = (await h.app.inject({ method: 'GET', url: '/providers?status=busy&limit=1000' })).json();
    expect(busy.map((x: { id: string }) => x.id)).not.toContain(p.id);
  });

  it('never moves maintenance to offline', async () => {
    const p = await register(h.app, { status: 'maintenance' });
    await ageProvider(h.database, p.id, BOUND_MS * 10);
    await h.app.registry.sweepOffline();
    expect(await shown(p.id)).toBe('maintenance');
    expect(await storedStatus(p.id)).toBe('maintenance');
  });

  it('stores offline and publishes each change exactly once while two instances sweep at once', async () => {
    const owner = `sweep-${Date.now()}`;
    const created = await Promise.all(
      Array.from({ length: 120 }, (_, i) => register(h.app, { owner_id: owner, name: `s-${i}` })),
    );
    const fresh = await register(h.app, { owner_id: owner, name: 'fresh' });
    await sql`UPDATE provider_liveness l SET last_seen_at = now() - interval '1 hour' FROM providers p
              WHERE p.id = l.provider_id AND p.owner_id = ${owner} AND p.name <> 'fresh'`.execute(h.database.db);
    // 'fresh' was heard from: held so for the test's length (a busy host may take more than the 3 s bound to get
    // through the sweeps and the events below).
    await sql`UPDATE provider_liveness SET last_seen_at = now() + interval '1 hour'
              WHERE provider_id = ${fresh.id}`.execute(h.database.db);
    const [a, b] = await Promise.all([h.app.registry.sweepOffline(10), second.app.registry.sweepOffline(10)]);
    expect(a + b).toBeGreaterThanOrEqual(120);
    await Promise.all([h.app.events.flush(), second.app.events.flush()]);
    const ids = new Set(created.map((p) => p.id));
    await events.waitFor(
      () =>
        events.messages.filter((m) => ids.has(String(m.data.provider_id)) && m.data.reason === 'offline_timeout')
          .length >= 120,
    );
    await new Promise((r) => setTimeout(r, 200));
    const offlineEvents = events.messages.filter(
      (m) => ids.has(String(m.data.provider_id)) && m.data.reason === 'offline_timeout',
    );
    expect(offlineEvents).toHaveLength(120);
    expect(new Set(offlineEvents.map((m) => m.data.provider_id)).size).toBe(120);
    expect(offlineEvents.every((m) => m.data.previous_status === 'idle' && m.data.status === 'offline')).toBe(true);
    const { rows } = await sql<{ status: string; n: number }>`
      SELECT status, count(*)::int AS n FROM providers WHERE owner_id = ${owner} GROUP BY status ORDER BY status`.execute(
      h.database.db,
    );
    expect(rows).toEqual([
      { status: 'idle', n: 1 },
      { status: 'offline', n: 120 },
    ]);
    expect(await storedStatus(fresh.id)).toBe('idle');
    // A second sweep finds nothing left to do.
    expect(await second.app.registry.sweepOffline()).toBe(0);
  });

  it('brings an offline provider back to idle with its next heartbeat, with an event', async () => {
    const p = await register(h.app, { status: 'error' });
    await ageProvider(h.database, p.id, BOUND_MS * 2);
    await h.app.registry.sweepOffline();
    expect(await storedStatus(p.id)).toBe('offline');
    // Each instance relays the events in the order they were recorded, but two relays run side by side.
    await h.app.events.flush();
    const res = await second.app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` });
    expect(res.json()).toMatchObject({ previous_status: 'offline', status: 'idle' });
    expect(await shown(p.id)).toBe('idle');
    await second.app.events.flush();
    await events.waitFor(() => events.about(p.id).some((e) => e.data.reason === 'heartbeat'));
    expect(events.about(p.id).map((e) => [e.data.previous_status, e.data.status, e.data.reason])).toEqual([
      [null, 'error', 'registered'],
      ['error', 'offline', 'offline_timeout'],
      ['offline', 'idle', 'heartbeat'],
    ]);
  });

  it('stores every silent state in one statement that reads each narrow row once, whatever the fleet', async () => {
    // A fleet in the proportions of a large one: 20,000 live providers and 5,000 gone for up to a month, their rows
    // mixed as heartbeats leave them (the live ones' last heartbeat is in the future, so that none falls silent while
    // the test runs), and one silent provider of each state that falls offline.
    const owner = `fleet-${Date.now()}`;
    await sql`
      INSERT INTO providers (id, owner_id, name, status)
      SELECT gen_random_uuid(), ${owner}, 'rig-' || i,
             CASE WHEN i % 5 = 0 THEN (ARRAY['offline', 'maintenance'])[1 + i / 5 % 2] ELSE 'idle' END
      FROM generate_series(1, 25000) AS i`.execute(h.database.db);
    await sql`
      UPDATE provider_liveness l
      SET last_seen_at = CASE WHEN l.status IN ('offline', 'maintenance')
                              THEN now() - interval '1 day' - random() * interval '30 days'
                              ELSE now() + interval '1 hour' - random() * interval '1 minute' END
      WHERE l.owner_id = ${owner}`.execute(h.database.db);
    const silent = await Promise.all(AUTO_OFFLINE_FROM.map((status) => register(h.app, { status })));
    for (const p of silent) await ageProvider(h.database, p.id, BOUND_MS * 2);
    await sql`ANALYZE providers, provider_liveness`.execute(h.database.db);
    const { rows: narrow } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM provider_liveness`.execute(
      h.database.db,
    );
    const pool = new pg.Pool({ connectionString: h.testDb.url, max: 1 });
    try {
      const statements: CompiledQuery[] = [];
      // The statement, analyzed with the silent providers still to store (and rolled back): its scans read each
      // narrow row at most once (a walk of each state, or of the gone ones, would read some twice), and the provider
      // rows by key only (a hash of the candidates' providers would read the whole table).
      const client = await pool.connect();
      let plan: PlanNode;
      try {
        await client.query('BEGIN');
        await sweepOffline(loggedOn(poolOf(client), statements), BOUND_MS);
        await client.query('ROLLBACK');
        await client.query('BEGIN');
        const { rows } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
          `EXPLAIN (ANALYZE, FORMAT JSON) ${statements[0]!.sql}`,
          statements[0]!.parameters as unknown[],
        );
        plan = rows[0]!['QUERY PLAN'][0].Plan;
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
      expect(statements).toHaveLength(1);
      const read = rowsReadOf(plan);
      expect(read.provider_liveness).toBeLessThanOrEqual(narrow[0]!.n);
      // (Earlier tests may have left silent providers of their own: every provider that falls is read twice at most,
      // for its lock and its update.)
      expect(read.providers).toBeGreaterThanOrEqual(2 * silent.length);
      expect(read.providers).toBeLessThan(narrow[0]!.n / 10);
      const swept = await sweepOffline(loggedOn(pool, []), BOUND_MS);
      expect(swept.map((r) => r.id)).toEqual(expect.arrayContaining(silent.map((p) => p.id)));
    } finally {
      await pool.end();
      await sql`DELETE FROM providers WHERE owner_id = ${owner}`.execute(h.database.db);
      await sql`ANALYZE providers, provider_liveness`.execute(h.database.db);
    }
  });

  it('sweeps a range of the narrow table pages, and the periodic slices the whole table within a cycle', async () => {
    // 3,000 providers over tens of pages of the narrow table, every tenth silent past the bound.
    const owner = `sliced-${Date.now()}`;
    await sql`
      INSERT INTO providers (id, owner_id, name, status)
      SELECT gen_random_uuid(), ${owner}, 'rig-' || i, 'idle' FROM generate_series(1, 3000) AS i`.execute(
      h.database.db,
    );
    await sql`
      UPDATE provider_liveness l SET last_seen_at = CASE WHEN p.name LIKE '%0' THEN now() - interval '1 hour'
                                                        ELSE now() + interval '1 hour' END
      FROM providers p WHERE p.id = l.provider_id AND p.owner_id = ${owner}`.execute(h.database.db);
    const { rows: silent } = await sql<{ id: string; page: number }>`
      SELECT l.provider_id AS id, (l.ctid::text::point)[0]::int AS page FROM provider_liveness l
      WHERE l.owner_id = ${owner} AND l.last_seen_at < now() ORDER BY page`.execute(h.database.db);
    const offline = async () =>
      (
        await sql<{ n: number }>`
        SELECT count(*)::int AS n FROM providers WHERE owner_id = ${owner} AND status = 'offline'`.execute(
          h.database.db,
        )
      ).rows[0]!.n;
    try {
      expect(silent).toHaveLength(300);
      const mid = silent[150]!.page;
      expect(mid).toBeGreaterThan(silent[0]!.page);
      // A range stores exactly the silent providers whose narrow rows are on its pages.
      const swept = await sweepOffline(h.database.db, BOUND_MS, 500, undefined, { from: 0, to: mid });
      const ours = new Set(silent.map((r) => r.id));
      expect(swept.filter((r) => ours.has(r.id)).map((r) => r.id)).toEqual(
        expect.arrayContaining(silent.filter((r) => r.page < mid).map((r) => r.id)),
      );
      expect(swept.filter((r) => ours.has(r.id))).toHaveLength(silent.filter((r) => r.page < mid).length);
      // The periodic slices: from wherever the last one ended, `slices` runs cover the table, one more a wrap.
      const slices = 4;
      for (let i = 0; i <= slices; i++) await h.app.registry.sweepSlice(slices);
      expect(await offline()).toBe(300);
    } finally {
      await sql`DELETE FROM providers WHERE owner_id = ${owner}`.execute(h.database.db);
    }
  });

  it('lets a heartbeat that lands before the sweep win', async () => {
    const p = await register(h.app);
    await ageProvider(h.database, p.id, BOUND_MS * 2);
    await h.app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` });
    await h.app.registry.sweepOffline();
    expect(await storedStatus(p.id)).toBe('idle');
  });
});

describe('periodic sweep', () => {
  it('marks a silent provider offline by itself, on the real clock', async () => {
    const boundMs = 1500;
    const timed = await startHarness({
      testDb: h.testDb,
      sweeper: true,
      config: { offline_after: `${boundMs}ms`, offline_sweep_interval: '100ms', messaging: h.config.messaging },
    });
    try {
      const p = await register(timed.app);
      const heartbeatAt = Date.now();
      const beat = await timed.app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` });
      // Its own answer (a later read may come after the sweep, on a busy machine).
      expect(beat.json()).toMatchObject({ status: 'idle' });
      // Poll rather than sleep a fixed time: a loaded machine must not make this flaky.
      let status = 'idle';
      while (status !== 'offline' && Date.now() - heartbeatAt < 15_000) {
        await new Promise((r) => setTimeout(r, 50));
        status = await storedStatus(p.id);
      }
      expect(status).toBe('offline');
      expect(Date.now() - heartbeatAt).toBeGreaterThanOrEqual(boundMs);
      await timed.app.events.flush();
      await events.waitFor(() => events.about(p.id).some((e) => e.data.reason === 'offline_timeout'));
    } finally {
      await timed.close();
    }
  });
});
