import { randomBytes } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import { type Kysely, sql } from 'kysely';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  connectPublisher,
  createLogger,
  type Database,
  type EventPublisher,
  ensureStream,
  Outbox,
  type OutboxDatabase,
  OutboxRelay,
  openDatabase,
} from '../src/index.ts';
import { createTestDatabase, type TestDatabase, testEnv } from '../src/testing/index.ts';

const suffix = randomBytes(4).toString('hex');
const streamName = `TEST_OUTBOX_${suffix}`;
const prefix = `outbox.${suffix}`;
let testDb: TestDatabase;
let database: Database<OutboxDatabase>;
let db: Kysely<OutboxDatabase>;
let nc: NatsConnection;
let publisher: EventPublisher;
const quietLogger = () => createLogger({ service: 'outbox-test', instanceId: 'test', level: 'silent' });

beforeAll(async () => {
  testDb = await createTestDatabase('common_outbox');
  database = await openDatabase<OutboxDatabase>({ url: testDb.url, poolSize: 4 });
  db = database.db;
  await sql`CREATE TABLE outbox_events (
    id uuid PRIMARY KEY, kind text NOT NULL, payload jsonb NOT NULL, correlation_id text,
    created_at timestamptz NOT NULL DEFAULT now(), published_at timestamptz, trace_context jsonb)`.execute(db);
  nc = await connect(testEnv.natsConnectOptions());
  publisher = await connectPublisher({
    url: testEnv.natsUrl,
    credentials: testEnv.natsCredentials,
    name: 'outbox-test',
    stream: { name: streamName, subjects: [`${prefix}.ok.>`] },
  });
});

afterAll(async () => {
  await publisher?.close();
  const jsm = await jetstreamManager(nc);
  await jsm.streams.delete(streamName).catch(() => {});
  await nc?.drain();
  await database?.close();
  await testDb?.drop();
});

/**
 * Listens on `subject` for every message NATS carries there, duplicates included (a core subscription sees each
 * publish); resolves once the server has the subscription (a publish before that would be missed).
 */
async function listen(subject: string) {
  const seen: {
    subject: string;
    data: Record<string, unknown>;
    msgId?: string;
    correlationId?: string;
    traceparent?: string;
  }[] = [];
  const sub: Subscription = nc.subscribe(subject);
  void (async () => {
    for await (const m of sub) {
      seen.push({
        subject: m.subject,
        data: m.json(),
        msgId: m.headers?.get('Nats-Msg-Id'),
        correlationId: m.headers?.get('X-Correlation-ID'),
        traceparent: m.headers?.has('traceparent') ? m.headers.get('traceparent') : undefined,
      });
    }
  })();
  await nc.flush();
  return {
    seen,
    /**
     * Waits until `expected` messages arrived (NATS hands them to the subscription's iterator asynchronously: a flush
     * of this connection does not mean the loop above has taken them), then a moment more for any duplicate, and
     * stops listening.
     */
    async drained(expected: number) {
      const deadline = Date.now() + 20_000;
      while (seen.length < expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      await nc.flush();
      await new Promise((r) => setTimeout(r, 100));
      sub.unsubscribe();
    },
    stop: () => sub.unsubscribe(),
  };
}

// A test that failed half-way must not hand its unpublished events to the next one's relay (which would count them).
afterEach(async () => {
  await sql`UPDATE outbox_events SET published_at = now() WHERE published_at IS NULL`.execute(db);
});

const unpublished = async () =>
  Number(
    (await sql<{ n: string }>`SELECT count(*) AS n FROM outbox_events WHERE published_at IS NULL`.execute(db)).rows[0]!
      .n,
  );

describe('transactional outbox', () => {
  it('publishes an event once its transaction commits, and never one whose transaction rolled back', async () => {
    const outbox = new Outbox();
    const relay = new OutboxRelay(db, publisher, { subject: `${prefix}.ok`, logger: quietLogger() });
    const wire = await listen(`${prefix}.ok.>`);
    await db
      .transaction()
      .execute((trx) =>
        outbox.record(trx, [{ kind: 'thing.done', data: { thing_id: 't-1' }, id: crypto.randomUUID() }], 'corr-1'),
      );
    await expect(
      db.transaction().execute(async (trx) => {
        await outbox.record(trx, [{ kind: 'thing.done', data: { thing_id: 't-rolled-back' } }]);
        throw new Error('the change failed');
      }),
    ).rejects.toThrow('the change failed');

    expect(await relay.flush()).toBe(1);
    expect(await relay.flush()).toBe(0);
    await wire.drained(1);
    expect(wire.seen).toHaveLength(1);
    const [msg] = wire.seen;
    expect(msg).toMatchObject({
      subject: `${prefix}.ok.thing.done`,
      correlationId: 'corr-1',
      data: { kind: 'thing.done', thing_id: 't-1' },
    });
    expect(msg!.msgId).toBe(msg!.data.event_id);
    expect(Date.parse(msg!.data.occurred_at as string)).not.toBeNaN();
    // Tracing is off here (no OTLP endpoint): nothing of a trace is kept with the event, nor sent with the message.
    const kept = await sql<{ trace_context: unknown }>`
      SELECT trace_context FROM outbox_events WHERE id = ${msg!.data.event_id as string}`.execute(db);
    expect(kept.rows).toEqual([{ trace_context: null }]);
    expect(msg!.traceparent).toBeUndefined();
  });

  it('sends the events of one transaction in the order they were recorded, over several calls', async () => {
    const outbox = new Outbox();
    const relay = new OutboxRelay(db, publisher, { subject: `${prefix}.ok.ordered`, logger: quietLogger() });
    const wire = await listen(`${prefix}.ok.ordered.>`);
    await db.transaction().execute(async (trx) => {
      await outbox.record(
        trx,
        [1, 2, 3, 4, 5].map((n) => ({ kind: 'step', data: { n } })),
      );
      await outbox.record(trx, [{ kind: 'step', data: { n: 6 } }]);
      await outbox.record(
        trx,
        [7, 8].map((n) => ({ kind: 'step', data: { n } })),
      );
    });
    expect(await relay.flush()).toBe(8);
    await wire.drained(8);
    expect(wire.seen.map((m) => m.data.n)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });

  it('keeps events while NATS refuses them and sends them, in order, once it accepts again', async () => {
    const outbox = new Outbox();
    // No stream captures this subject yet: JetStream answers "no responders" and the publish fails.
    const relay = new OutboxRelay(db, publisher, { subject: `${prefix}.late`, logger: quietLogger() });
    await db.transaction().execute((trx) =>
      outbox.record(trx, [
        { kind: 'a', data: { n: 1 } },
        { kind: 'b', data: { n: 2 } },
      ]),
    );
    expect(await relay.flush()).toBe(0);
    expect(await unpublished()).toBe(2);

    const jsm = await jetstreamManager(nc);
    await ensureStream(jsm, { name: streamName, subjects: [`${prefix}.late.>`] });
    const wire = await listen(`${prefix}.late.>`);
    expect(await relay.flush()).toBe(2);
    await wire.drained(2);
    expect(wire.seen.map((m) => m.data.n)).toEqual([1, 2]);
    expect(await unpublished()).toBe(0);
  });

  it('retries quietly while the receiver is not up yet, warns once it stays down past quietMs, and says when it works again', async () => {
    const lines: { level: string; msg: string; failing_for_ms?: number }[] = [];
    const logger = createLogger({
      service: 'outbox-test',
      instanceId: 'test',
      level: 'debug',
      destination: { write: (line: string) => lines.push(JSON.parse(line)) },
    });
    const outbox = new Outbox();
    // The relay reads this clock, not the wall's: a flush slowed down by a busy machine moves no failure past quietMs.
    let now = Date.parse('2026-01-01T00:00:00Z');
    // As in the test above: no stream captures the subject yet, so every publish fails.
    const relay = new OutboxRelay(db, publisher, { subject: `${prefix}.quiet`, logger, quietMs: 400, now: () => now });
    await db.transaction().execute((trx) => outbox.record(trx, [{ kind: 'a', data: { n: 1 } }]));
    const seen = () => lines.map((l) => `${l.level} ${l.msg}`);
    expect(await relay.flush()).toBe(0);
    now += 399;
    expect(await relay.flush()).toBe(0);
    expect(seen()).toEqual(['debug event publish failed; will retry', 'debug event publish failed; will retry']);

    now += 1;
    lines.length = 0;
    expect(await relay.flush()).toBe(0);
    // Warned of once, then quiet again until another quietMs has passed.
    now += 399;
    expect(await relay.flush()).toBe(0);
    now += 1;
    expect(await relay.flush()).toBe(0);
    expect(seen()).toEqual([
      'warn event publish failing for 0 s; will retry',
      'debug event publish failed; will retry',
      'warn event publish failing for 1 s; will retry',
    ]);
    expect(lines.map((l) => l.failing_for_ms)).toEqual([400, 799, 800]);

    const jsm = await jetstreamManager(nc);
    await ensureStream(jsm, { name: streamName, subjects: [`${prefix}.quiet.>`] });
    lines.length = 0;
    now += 50;
    expect(await relay.flush()).toBe(1);
    expect(seen()).toEqual(['info event publishing works again']);
    expect(lines[0]).toMatchObject({ failed_for_ms: 850 });
  });

  it('publishes each event once when several relays (instances) flush at the same time', async () => {
    const outbox = new Outbox();
    const events = Array.from({ length: 250 }, (_, n) => ({ kind: 'many', data: { n } }));
    await db.transaction().execute((trx) => outbox.record(trx, events));
    const wire = await listen(`${prefix}.ok.many`);
    const relays = Array.from(
      { length: 3 },
      () => new OutboxRelay(db, publisher, { subject: `${prefix}.ok`, logger: quietLogger(), batch: 40 }),
    );
    const sent = await Promise.all(relays.map((r) => r.flush()));
    await wire.drained(250);
    expect(sent.reduce((a, b) => a + b, 0)).toBe(250);
    expect(wire.seen).toHaveLength(250);
    expect(new Set(wire.seen.map((m) => m.msgId)).size).toBe(250);
    expect(await unpublished()).toBe(0);
  });

  it('publishes soon after a commit when started with its outbox, without waiting for the interval', async () => {
    const outbox = new Outbox();
    const relay = new OutboxRelay(db, publisher, { subject: `${prefix}.ok`, logger: quietLogger() });
    relay.start(60_000, outbox);
    const wire = await listen(`${prefix}.ok.soon`);
    try {
      await db.transaction().execute((trx) => outbox.record(trx, [{ kind: 'soon', data: {} }]));
      const deadline = Date.now() + 20_000;
      while (wire.seen.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(wire.seen).toHaveLength(1);
    } finally {
      wire.stop();
      await relay.stop();
    }
  });

  it('records nothing when disabled (no publisher configured)', async () => {
    const before = Number((await sql<{ n: string }>`SELECT count(*) AS n FROM outbox_events`.execute(db)).rows[0]!.n);
    await db.transaction().execute((trx) => Outbox.disabled.record(trx, [{ kind: 'x', data: {} }]));
    const after = Number((await sql<{ n: string }>`SELECT count(*) AS n FROM outbox_events`.execute(db)).rows[0]!.n);
    expect(after).toBe(before);
  });
});
