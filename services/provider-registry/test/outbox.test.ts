/** Status events go through the transactional outbox: recorded with their change, relayed on NATS. */
import { createLogger, type EventPublisher, eventBody } from '@gpu/common';
import { injectAs } from '@gpu/common/testing';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.ts';
import { STATUS_CHANGED } from '../src/domain/status-events.ts';
import { EventCollector, gpu, type Harness, register, startHarness } from './helpers.ts';

let h: Harness;
let events: EventCollector;

beforeAll(async () => {
  h = await startHarness();
  events = await EventCollector.start(h.subject);
});
afterAll(async () => {
  await events.close();
  await h.close();
  await h.testDb.drop();
});

/** The outbox rows about one provider: their reason and whether they went out. */
async function outboxRows(db: Harness['database']['db'], providerId: string) {
  const { rows } = await sql<{ reason: string; published: boolean }>`
    SELECT payload->>'reason' AS reason, published_at IS NOT NULL AS published FROM outbox_events
    WHERE payload->>'provider_id' = ${providerId} ORDER BY created_at`.execute(db);
  return rows;
}

describe('status events through the outbox', () => {
  it("publishes the outbox's envelope and the change, with the row's ID as Nats-Msg-Id", async () => {
    const p = await register(h.app);
    await h.app.events.flush();
    await events.waitFor(() => events.about(p.id).length === 1);
    const [event] = events.about(p.id);
    const envelope = eventBody({ kind: STATUS_CHANGED, data: {}, id: 'x' });
    expect(Object.keys(event!.data).sort()).toEqual(
      [...Object.keys(envelope), 'type', 'provider_id', 'owner_id', 'previous_status', 'status', 'reason'].sort(),
    );
    expect(event!.data).toMatchObject({ kind: STATUS_CHANGED, type: STATUS_CHANGED, occurred_at: p.registered_at });
    expect(event!.msgId).toBe(event!.data.event_id);
    expect(await outboxRows(h.database.db, p.id)).toEqual([{ reason: 'registered', published: true }]);
  });

  it('records no event for a heartbeat that is rolled back (UNKNOWN_GPU_INDEX)', async () => {
    const p = await register(h.app, { gpus: [gpu()] });
    await h.app.inject({ method: 'PATCH', url: `/providers/${p.id}/status`, payload: { status: 'offline' } });
    const res = await h.app.inject({
      method: 'POST',
      url: `/providers/${p.id}/heartbeat`,
      payload: { gpu_metrics: [{ index: 1, temperature: 50 }] },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().errors).toEqual([{ path: 'body.gpu_metrics', message: 'index 1 is not in 0..0' }]);
    expect((await outboxRows(h.database.db, p.id)).map((r) => r.reason)).toEqual(['registered', 'explicit']);
  });

  it('keeps an event that could not be published, and any instance publishes it later', async () => {
    const away: EventPublisher = {
      enabled: true,
      publish: async () => {
        throw new Error('NATS is away');
      },
      ping: async () => {},
      close: async () => {},
    };
    const logger = createLogger({ service: 'provider-registry', instanceId: 'away', level: 'silent' });
    const cut = await buildApp({ config: h.config, logger, database: h.database, publisher: away, sweeper: false });
    await cut.ready();
    injectAs(cut, h.admin);
    const p = await register(cut);
    await cut.events.flush();
    await cut.close();
    // Kept: the instance that recorded it could not publish it (the other instance's relay, which runs every second,
    // may already have: only it can have).
    expect((await outboxRows(h.database.db, p.id)).map((r) => r.reason)).toEqual(['registered']);

    await h.app.events.flush();
    await events.waitFor(() => events.about(p.id).length === 1);
    expect(events.about(p.id)[0]?.data).toMatchObject({ reason: 'registered', previous_status: null });
    expect(await outboxRows(h.database.db, p.id)).toEqual([{ reason: 'registered', published: true }]);
  });
});

describe('without NATS', () => {
  it('records nothing', async () => {
    const quiet = await startHarness({ nats: false });
    try {
      const p = await register(quiet.app);
      await quiet.app.inject({ method: 'PATCH', url: `/providers/${p.id}/status`, payload: { status: 'error' } });
      await quiet.app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` });
      await quiet.app.registry.sweepOffline();
      const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM outbox_events`.execute(
        quiet.database.db,
      );
      expect(rows[0]?.n).toBe(0);
    } finally {
      await quiet.close();
      await quiet.testDb.drop();
    }
  });
});
