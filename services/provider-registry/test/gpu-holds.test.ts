/**
 * Billing owns which GPUs are free; the registry shows what billing states. Billing's statements of a machine's held
 * GPUs over real NATS JetStream (a durable consumer) and over HTTP move a provider idle -> busy -> idle; the newest
 * version wins whatever order they arrive in, duplicates are harmless; offline, error and maintenance are never
 * overridden; a rental's end is counted once in the machine's reliability.
 */
import { randomUUID } from 'node:crypto';
import { connectPublisher, migrateToLatest, type NatsPublisher, openDatabase } from '@gpu/common';
import { createTestDatabase } from '@gpu/common/testing';
import { jetstreamManager } from '@nats-io/jetstream';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../src/db/migrations/index.ts';
import { deliver, EventCollector, gpu, type Harness, register, startHarness } from './helpers.ts';

let h: Harness;
let billing: NatsPublisher;
let events: EventCollector;
const billingStream = `TEST_BILLING_EVENTS_${randomUUID().slice(0, 8)}`;

beforeAll(async () => {
  h = await startHarness({ consumeSessionEvents: true });
  billing = (await connectPublisher({
    url: h.config.messaging.nats_url,
    credentials: h.config.messaging.nats_credentials,
    stream: { name: billingStream, subjects: [`${h.config.messaging.subjects.billing_events}.>`] },
  })) as NatsPublisher;
  events = await EventCollector.start(h.subject);
});
afterAll(async () => {
  await events?.close();
  await h?.close();
  const jsm = await jetstreamManager(billing.connection);
  await jsm.streams.delete(billingStream).catch(() => {});
  await billing?.close();
  await h?.testDb.drop();
});

/** Publishes one of billing's events (its envelope and body), as billing's relay does. */
async function publish(kind: string, body: object) {
  const id = randomUUID();
  await billing.publish(
    `${h.config.messaging.subjects.billing_events}.${kind}`,
    { event_id: id, kind, occurred_at: new Date().toISOString(), ...body },
    { msgId: id },
  );
}

/** Billing's statement of the machine's held GPUs (`lease.held`). */
const held = (providerId: string, version: number, gpuIndices: number[]) =>
  publish('lease.held', { provider_id: providerId, version, gpu_indices: gpuIndices });

/** Billing's event of a session's end (the part of the session the registry reads). */
const ended = (providerId: string, sessionId: string, endReason: string | null, kind = 'session.completed') =>
  publish(kind, {
    session: { id: sessionId, provider_id: providerId, status: kind.split('.')[1], end_reason: endReason },
  });

const statusOf = async (id: string) => (await h.app.inject({ url: `/providers/${id}` })).json().status as string;
const holdsOf = (id: string) => h.app.holds.of(id);
/** The machine's free GPUs as its offers show them. */
const freeGpus = async (id: string) =>
  (await h.database.db.selectFrom('offers').select('free_gpus').where('provider_id', '=', id).execute()).reduce(
    (n, o) => n + o.free_gpus,
    0,
  );

async function until<T>(read: () => Promise<T>, want: (v: T) => boolean, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  let now = await read();
  while (!want(now) && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 50));
    now = await read();
  }
  return now;
}
const untilStatus = (id: string, status: string) =>
  until(
    () => statusOf(id),
    (s) => s === status,
  );

/**
 * Waits until the holds consumer has handled everything published so far: it handles messages in order, so once a
 * probe machine's statement (published last) shows it busy, every earlier one was applied.
 */
async function drained() {
  const probe = await register(h.app);
  await held(probe.id, 1, [0]);
  expect(await untilStatus(probe.id, 'busy')).toBe('busy');
}

describe("billing's statements of held GPUs over NATS", () => {
  it('shows a machine busy once fully held and idle once freed, publishing each change', async () => {
    const p = await register(h.app, { gpus: Array.from({ length: 8 }, () => gpu()) });
    await held(p.id, 1, [0, 1, 2, 3]);
    expect(
      await until(
        () => holdsOf(p.id),
        (x) => x.version === 1,
      ),
    ).toEqual({ version: 1, gpuIndices: [0, 1, 2, 3] });
    expect(await statusOf(p.id)).toBe('idle'); // four left to rent
    await held(p.id, 2, [0, 1, 2, 3, 4, 5, 6, 7]);
    expect(await untilStatus(p.id, 'busy')).toBe('busy');
    await held(p.id, 3, [4, 5, 6, 7]);
    expect(await untilStatus(p.id, 'idle')).toBe('idle');
    expect(await freeGpus(p.id)).toBe(4);

    await h.app.events.flush();
    await events.waitFor(() => events.about(p.id).length === 3);
    expect(events.about(p.id).map((e) => [e.data.previous_status, e.data.status, e.data.reason])).toEqual([
      [null, 'idle', 'registered'],
      ['idle', 'busy', 'session_started'],
      ['busy', 'idle', 'session_ended'],
    ]);
  });

  it('keeps the newest statement whatever the order and however often they arrive', async () => {
    const p = await register(h.app);
    await held(p.id, 5, [0]);
    expect(await untilStatus(p.id, 'busy')).toBe('busy');
    // An older statement arrives late, then the same newest again (a redelivery past JetStream's duplicate window).
    await held(p.id, 4, []);
    await held(p.id, 5, [0]);
    await drained();
    expect(await holdsOf(p.id)).toEqual({ version: 5, gpuIndices: [0] });
    expect(await statusOf(p.id)).toBe('busy');
    await held(p.id, 7, []);
    await held(p.id, 6, [0]);
    await drained();
    expect(await holdsOf(p.id)).toEqual({ version: 7, gpuIndices: [] });
    expect(await statusOf(p.id)).toBe('idle');
  });

  it('never overrides offline, error or maintenance, and GPUs freed meanwhile leave them too', async () => {
    const kept: Record<string, string> = {};
    for (const status of ['offline', 'error', 'maintenance']) {
      const p = await register(h.app);
      await h.app.inject({ method: 'PATCH', url: `/providers/${p.id}/status`, payload: { status } });
      await held(p.id, 1, [0]);
      await held(p.id, 2, []);
      await held(p.id, 3, [0]);
      kept[p.id] = status;
    }
    await drained();
    for (const [id, status] of Object.entries(kept)) expect(await statusOf(id)).toBe(status);

    // A busy machine that goes offline stays offline when its GPUs are freed; a heartbeat brings it back to idle.
    const p = await register(h.app);
    await held(p.id, 1, [0]);
    expect(await untilStatus(p.id, 'busy')).toBe('busy');
    await h.app.inject({ method: 'PATCH', url: `/providers/${p.id}/status`, payload: { status: 'offline' } });
    await held(p.id, 2, []);
    await drained();
    expect(await statusOf(p.id)).toBe('offline');
    await h.app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` });
    expect(await statusOf(p.id)).toBe('idle');
  });

  it("counts ended sessions in the machine's reliability once each, the machine's faults against it", async () => {
    const p = await register(h.app);
    const [a, b] = [randomUUID(), randomUUID()];
    await publish('session.started', { session: { id: a, provider_id: p.id, status: 'active' } });
    await ended(p.id, a, 'provider_offline', 'session.terminated');
    await ended(p.id, a, 'provider_offline', 'session.terminated'); // billing published it twice
    await ended(p.id, b, 'ended');
    const reliability = async () => (await h.app.inject({ url: `/providers/${p.id}/reliability` })).json();
    expect(await until(reliability, (r) => r.sessions_ended >= 2)).toMatchObject({
      sessions_ended: 2,
      sessions_failed: 1,
      session_success: 0.5,
    });
    // A session's running events hold nothing: the GPUs come with billing's statements.
    expect(await statusOf(p.id)).toBe('idle');
  });

  it('acknowledges events it can never apply (unknown provider, malformed) and goes on', async () => {
    await held(randomUUID(), 1, [0]);
    await publish('lease.held', { provider_id: randomUUID(), version: 2, gpu_indices: [1, 1] });
    await publish('lease.held', { nonsense: true });
    await ended(randomUUID(), randomUUID(), 'ended');
    await drained();
    const jsm = await jetstreamManager(billing.connection);
    for (const durable of [h.config.messaging.lease_consumer, h.config.messaging.session_consumer]) {
      const info = await until(
        () => jsm.consumers.info(billingStream, durable),
        (i) => i.num_pending === 0 && i.num_ack_pending === 0,
      );
      expect(info.num_pending, durable).toBe(0);
    }
  });
});

describe("billing's messages through the inbox (billing without NATS)", () => {
  const put = (id: string, statement: Record<string, unknown>) =>
    deliver(h.app, 'lease.held', { provider_id: id, ...statement });

  it('keeps the greatest version: an older or repeated statement changes nothing', async () => {
    const p = await register(h.app, { gpus: [gpu(), gpu()] });
    const first = await put(p.id, { version: 10, gpu_indices: [1, 0] });
    expect(first.statusCode, first.body).toBe(200);
    expect(first.json()).toEqual({ kind: 'lease.held', outcome: 'applied' });
    expect(await holdsOf(p.id)).toEqual({ version: 10, gpuIndices: [0, 1] });
    expect(await statusOf(p.id)).toBe('busy');
    for (const older of [10, 9]) {
      expect((await put(p.id, { version: older, gpu_indices: [] })).statusCode).toBe(200);
      expect(await holdsOf(p.id)).toEqual({ version: 10, gpuIndices: [0, 1] });
    }
    expect((await put(p.id, { version: 11, gpu_indices: [0] })).statusCode).toBe(200);
    expect(await statusOf(p.id)).toBe('idle');
    expect(await freeGpus(p.id)).toBe(1);
  });

  it('refuses an explicit idle while fully held', async () => {
    const p = await register(h.app);
    await put(p.id, { version: 1, gpu_indices: [0] });
    const idle = await h.app.inject({ method: 'PATCH', url: `/providers/${p.id}/status`, payload: { status: 'idle' } });
    expect(idle.statusCode).toBe(409);
    expect(idle.json().code).toBe('STATUS_CONTRADICTS_SESSIONS');
  });

  it('answers concurrent statements as if one after another: the greatest version is kept', async () => {
    const p = await register(h.app, { gpus: Array.from({ length: 8 }, () => gpu()) });
    const versions = Array.from({ length: 40 }, (_, i) => i + 1).sort(() => Math.random() - 0.5);
    await Promise.all(versions.map((v) => put(p.id, { version: v, gpu_indices: v === 40 ? [3] : [v % 8] })));
    expect(await holdsOf(p.id)).toEqual({ version: 40, gpuIndices: [3] });
    expect(await freeGpus(p.id)).toBe(7);
  });

  it('answers an unknown machine unapplicable, and bad messages 400 naming the field, with problem bodies', async () => {
    const missing = await put(randomUUID(), { version: 1, gpu_indices: [] });
    expect(missing.json()).toEqual({ kind: 'lease.held', outcome: 'unapplicable' });
    const p = await register(h.app);
    for (const [bad, field] of [
      [{ version: 0, gpu_indices: [] }, 'body.version'],
      [{ version: 1, gpu_indices: [1, 1] }, 'body.gpu_indices'],
      [{ version: 1, gpu_indices: [64] }, 'body.gpu_indices'],
      [{ version: 1.5, gpu_indices: [] }, 'body.version'],
      [{ gpu_indices: [] }, 'body.version'],
      [{ version: 1 }, 'body.gpu_indices'],
    ] as const) {
      const res = await put(p.id, bad);
      expect(res.statusCode, JSON.stringify(bad)).toBe(400);
      expect(res.headers['content-type']).toMatch(/problem\+json/);
      expect(res.json().errors[0].path, JSON.stringify(bad)).toMatch(new RegExp(`^${field.replace('.', '\\.')}`));
    }
    // A kind the registry does not take, and no kind at all.
    for (const body of [{ kind: 'deposit.confirmed' }, { provider_id: p.id }]) {
      const res = await h.app.inject({ method: 'POST', url: '/messages', payload: body });
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
    }
    expect(await holdsOf(p.id)).toEqual({ version: 0, gpuIndices: [] });
    // Only platform services (and admins) post messages.
    const renter = await h.issuer.user(['renter']);
    const forged = await deliver(
      h.app,
      'lease.held',
      { provider_id: p.id, version: 99, gpu_indices: [0] },
      renter.headers,
    );
    expect(forged.statusCode).toBe(403);
    expect(await holdsOf(p.id)).toEqual({ version: 0, gpuIndices: [] });
  });

  it('remembers counted ends for sessions.retention, then forgets them', async () => {
    const p = await register(h.app);
    const [old, recent] = [randomUUID(), randomUUID()];
    for (const s of [old, recent]) {
      const res = await deliver(h.app, 'session.completed', { session: { id: s, provider_id: p.id } });
      expect(res.json()).toEqual({ kind: 'session.completed', outcome: 'applied' });
    }
    const db = h.database.db;
    await db
      .updateTable('counted_session_ends')
      .set({ counted_at: new Date(Date.now() - 8 * 86_400_000) })
      .where('session_id', '=', old)
      .execute();
    expect(await h.app.holds.purgeCountedEnds(7 * 86_400_000)).toBeGreaterThanOrEqual(1);
    const kept = await db
      .selectFrom('counted_session_ends')
      .select('session_id')
      .where('provider_id', '=', p.id)
      .execute();
    expect(kept).toEqual([{ session_id: recent }]);
  });
});

describe('the held GPUs migration', () => {
  it("keeps what billing's leases held then, as version 0, and the ends counted; none of the registry's own leases", async () => {
    const testDb = await createTestDatabase('registry_gpu_holds_migration');
    const database = await openDatabase({ url: testDb.url, poolSize: 2 });
    try {
      // biome-ignore lint/suspicious/noExplicitAny: migrations run on Kysely<any>, as the migrator does
      const db = database.db as Kysely<any>;
      const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < '20250115'));
      await migrateToLatest(db, 'provider-registry', before);
      const [a, b, c] = ['a', 'b', 'c'].map((_, i) => `00000000-0000-4000-8000-00000000000${i + 1}`);
      await sql`INSERT INTO providers (id, owner_id, name, status) VALUES
        (${a}, 'o', 'a', 'busy'), (${b}, 'o', 'b', 'idle'), (${c}, 'o', 'c', 'idle')`.execute(db);
      for (const id of [a, b, c]) {
        for (const idx of [0, 1, 2, 3]) {
          await sql`INSERT INTO gpus (provider_id, idx, model_name, vram, driver_version)
            VALUES (${id}, ${idx}, 'NVIDIA A100-SXM4-80GB', 81920, '550')`.execute(db);
        }
      }
      const [s1, s2, s3, r1, r2] = Array.from({ length: 5 }, () => randomUUID());
      await sql`INSERT INTO provider_sessions (session_id, provider_id, active, gpu_indices, kind, expires_at) VALUES
        (${s1}, ${a}, true, NULL, 'session', NULL),
        (${s2}, ${b}, true, '{2}', 'session', NULL),
        (${r1}, ${b}, true, '{0,1}', 'reservation', now() + interval '1 minute'),
        (${r2}, ${c}, true, '{3}', 'reservation', now() - interval '1 second'),
        (${s3}, ${c}, false, '{1}', 'session', NULL)`.execute(db);

      await migrateToLatest(db, 'provider-registry', migrations);
      const { rows: held } = await sql`
        SELECT provider_id, version::int, gpu_indices FROM gpu_holds ORDER BY provider_id`.execute(db);
      expect(held).toEqual([
        { provider_id: a, version: 0, gpu_indices: [0, 1, 2, 3] }, // a session that named none held every GPU
        { provider_id: b, version: 0, gpu_indices: [0, 1, 2] }, // a session and a live reservation
      ]); // c: a lapsed reservation and an ended session hold nothing
      const { rows: counted } = await sql`SELECT session_id FROM counted_session_ends`.execute(db);
      expect(counted).toEqual([{ session_id: s3 }]);
      const { rows: gone } = await sql`SELECT 1 FROM pg_class WHERE relname = 'provider_sessions'`.execute(db);
      expect(gone).toEqual([]);
    } finally {
      await database.close();
      await testDb.drop();
    }
  });
});
