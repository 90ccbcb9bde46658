import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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

const storedStatus = async (id: string) =>
  (await h.database.db.selectFrom('providers').select('status').where('id', '=', id).executeTakeFirstOrThrow()).status;
const shown = async (id: string) => (await h.app.inject({ method: 'GET', url: `/providers/${id}` })).json().status;

describe('automatic offline', () => {
  it('defaults the bound to three heartbeat intervals', async () => {
    const p = await register(h.app);
    await ageProvider(h.database, p.id, BOUND_MS - 500);
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
    await sql`UPDATE providers SET last_seen_at = now() - interval '1 hour' WHERE owner_id = ${owner} AND name <> 'fresh'`.execute(
      h.database.db,
    );
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
      await timed.app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` });
      expect(await storedStatus(p.id)).toBe('idle');
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
