/**
 * A provider that goes offline or into error stops costing: the registry's status events over real NATS JetStream
 * (a durable consumer) end its running sessions `terminated` with the reason, billed to the minutes of the last
 * usage report; the ledger balances; other providers' sessions run on; redeliveries end nothing twice.
 */
import { randomUUID } from 'node:crypto';
import { connectPublisher, createLogger, type NatsPublisher, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RegistryEventsConsumer, startRegistryEventsConsumer } from '../src/adapters/registry-events-consumer.ts';
import { runBillingCycle } from '../src/domain/sessions/biller.ts';
import { applyUsageUpdate } from '../src/domain/sessions/usage-updates.ts';
import { H100_X1, manualClock, start, startBody } from './support/sessions.ts';
import { useBillingHarness } from './support/setup.ts';

// Sessions start an hour before the real time the registry stamps its events with.
const clock = manualClock(Date.now() - 3600_000);
const h = useBillingHarness({ now: clock.now });
const suffix = randomUUID().slice(0, 8);
const subject = `test.${suffix}.registry.providers.status`;
const stream = `TEST_REGISTRY_${suffix}`;
let registry: NatsPublisher;
let consumer: RegistryEventsConsumer;

beforeAll(async () => {
  registry = (await connectPublisher({
    url: testEnv.natsUrl,
    credentials: testEnv.natsCredentials,
    stream: { name: stream, subjects: [subject] },
  })) as NatsPublisher;
  consumer = startRegistryEventsConsumer({
    connection: registry.connection,
    ctx: h.ctx,
    subject,
    logger: createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' }),
  });
  // The consumer finds the registry's stream and makes its durable consumer in the background.
  const jsm = await jetstreamManager(registry.connection);
  await until(
    () => jsm.consumers.info(stream, 'billing-provider-status').catch(() => null),
    (i) => i !== null,
  );
});
afterAll(async () => {
  await consumer?.stop();
  const jsm = await jetstreamManager(registry.connection);
  await jsm.streams.delete(stream).catch(() => {});
  await registry?.close();
});

/** Publishes the registry's status event for a provider, as the registry's outbox relay does. */
async function statusEvent(providerId: string, status: string, occurredAt = new Date(), eventId = randomUUID()) {
  await registry.publish(
    subject,
    {
      event_id: eventId,
      kind: 'provider.status_changed',
      type: 'provider.status_changed',
      occurred_at: occurredAt.toISOString(),
      provider_id: providerId,
      owner_id: randomUUID(),
      previous_status: 'busy',
      status,
      reason: 'offline_timeout',
    },
    { msgId: eventId },
  );
}

const session = (id: string) =>
  h.db.selectFrom('rental_sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

// Polls until `done` holds: a generous deadline costs nothing when it does, and a busy machine can be slow.
async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Waits until the consumer has handled everything published so far (it handles messages in order). */
async function drained() {
  const jsm = await jetstreamManager(registry.connection);
  await until(
    () => jsm.consumers.info(stream, 'billing-provider-status'),
    (i) => i.num_pending === 0 && i.num_ack_pending === 0,
  );
}

/** A usage report of the session's daemon, now. */
const report = (sessionId: string) =>
  applyUsageUpdate(h.ctx, {
    sender: UNCHECKED_PRINCIPAL,
    sessionId,
    messageId: randomUUID(),
    timestamp: clock.now(),
    gpuUtilization: 90,
    powerDrawW: 300,
  });

describe('a provider that stops delivering', () => {
  it('ends its running sessions at the last reported minute, leaves other providers alone, and balances', async () => {
    const p = await h.fundedWallet('0', 'provider');
    const other = await h.fundedWallet('0', 'provider');
    const renterA = await h.fundedWallet('10', 'user');
    const renterB = await h.fundedWallet('10', 'user');
    const renterC = await h.fundedWallet('10', 'user');
    const begin = async (renter: typeof renterA, provider: typeof p) => {
      const res = await start(h, startBody({ renter, provider }, H100_X1));
      expect(res.statusCode).toBe(201);
      return res.json().session.id as string;
    };
    const reported = await begin(renterA, p);
    const silent = await begin(renterB, p);
    const elsewhere = await begin(renterC, other);

    // The daemon reports at minutes 2 and 4, then the machine dies; the biller goes on holding minutes.
    clock.advance(2 * 60_000 + 5_000);
    await report(reported);
    clock.advance(2 * 60_000);
    await report(reported);
    clock.advance(3 * 60_000);
    await runBillingCycle(h.ctx);
    expect((await session(reported)).billed_minutes).toBe(7);

    await statusEvent(p.ownerId, 'offline');
    const ended = await until(
      () => session(reported),
      (s) => s.status !== 'active',
    );
    // 4 minutes at 5.10/h = 0.34: the fee 0.017, the provider 0.323; the 3 unreported minutes are released.
    expect(ended).toMatchObject({
      status: 'terminated',
      end_reason: 'provider_offline',
      billed_minutes: 4,
      total_cost: '0.340000',
    });
    expect(
      await until(
        () => session(silent),
        (s) => s.status !== 'active',
      ),
    ).toMatchObject({
      status: 'terminated',
      end_reason: 'provider_offline',
      billed_minutes: 0,
      total_cost: '0.000000',
    });
    expect((await h.balanceOf(renterA.id)).total).toBe('9.660000');
    expect((await h.balanceOf(renterB.id)).total).toBe('10.000000');
    expect((await h.balanceOf(p.id)).available).toBe('0.323000');
    const records = await h.db
      .selectFrom('billing_records')
      .select(['session_id', 'status', 'end_reason', 'billed_minutes'])
      .where('session_id', 'in', [reported, silent])
      .execute();
    expect(records).toHaveLength(2);
    expect(records.every((r) => r.status === 'terminated' && r.end_reason === 'provider_offline')).toBe(true);

    // Another provider's session runs on.
    expect((await session(elsewhere)).status).toBe('active');
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);

    // The same event again (redelivered past JetStream's duplicate window: a new message ID) ends nothing twice.
    await statusEvent(p.ownerId, 'offline');
    await drained();
    expect(
      await h.db.selectFrom('billing_records').select('id').where('session_id', 'in', [reported, silent]).execute(),
    ).toHaveLength(2);
    expect((await h.balanceOf(renterA.id)).total).toBe('9.660000');
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('ends sessions on `error` too, ignores busy and idle, and never ends a session started after the change', async () => {
    const p = await h.fundedWallet('0', 'provider');
    const renter = await h.fundedWallet('10', 'user');
    const res = await start(h, startBody({ renter, provider: p }, H100_X1));
    const id = res.json().session.id as string;
    const startedAt = new Date((await session(id)).started_at);
    // A change from before the session started (late, or redelivered after the machine came back).
    await statusEvent(p.ownerId, 'offline', new Date(startedAt.getTime() - 1000));
    for (const status of ['busy', 'idle']) await statusEvent(p.ownerId, status);
    await statusEvent(p.ownerId, 'nonsense-without-fields');
    await registry.publish(subject, { nonsense: true });
    await drained();
    expect((await session(id)).status).toBe('active');

    clock.advance(90_000);
    await report(id);
    await statusEvent(p.ownerId, 'error');
    expect(
      await until(
        () => session(id),
        (s) => s.status !== 'active',
      ),
    ).toMatchObject({
      status: 'terminated',
      end_reason: 'provider_error',
      billed_minutes: 1,
    });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });
  it('drops an event dated out of the timestamps range (a registry clock in 2500) and ends nothing', async () => {
    const p = await h.fundedWallet('0', 'provider');
    const renter = await h.fundedWallet('10', 'user');
    const id = (await start(h, startBody({ renter, provider: p }, H100_X1))).json().session.id as string;
    await statusEvent(p.ownerId, 'offline', new Date('2500-01-01T00:00:00Z'));
    const jsm = await jetstreamManager(registry.connection);
    const last = (await jsm.streams.info(stream)).state.last_seq;
    // Settled: acknowledged (terminated), not waiting for an acknowledgement or another delivery.
    const info = await until(
      () => jsm.consumers.info(stream, 'billing-provider-status'),
      (i) => i.ack_floor.stream_seq >= last,
    );
    expect(info.ack_floor.stream_seq).toBeGreaterThanOrEqual(last);
    expect(info.num_ack_pending).toBe(0);
    expect((await session(id)).status).toBe('active');
  });

  it('ends sessions on `maintenance`, billed to the last report before the change', async () => {
    const p = await h.fundedWallet('0', 'provider');
    const renter = await h.fundedWallet('10', 'user');
    const id = (await start(h, startBody({ renter, provider: p }, H100_X1))).json().session.id as string;
    clock.advance(3 * 60_000 + 1_000);
    await report(id);
    await statusEvent(p.ownerId, 'maintenance');
    expect(
      await until(
        () => session(id),
        (s) => s.status !== 'active',
      ),
    ).toMatchObject({ status: 'terminated', end_reason: 'provider_maintenance', billed_minutes: 3 });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('ends every session of a removed machine once (however late it started), at the last report before the removal', async () => {
    const p = await h.fundedWallet('0', 'provider');
    const renter = await h.fundedWallet('10', 'user');
    const late = await h.fundedWallet('10', 'user');
    const id = (await start(h, startBody({ renter, provider: p }, H100_X1))).json().session.id as string;
    clock.advance(2 * 60_000 + 1_000);
    await report(id);
    const removedAt = clock.now();
    clock.advance(60_000);
    // A report that arrives after the removal (before billing heard of it) pays nothing more.
    await report(id);
    // A session that started after the removal's time (billing asked the registry just before the delete).
    const lateId = (await start(h, startBody({ renter: late, provider: p }, H100_X1))).json().session.id as string;
    const removal = (eventId: string) =>
      registry.publish(
        subject,
        {
          event_id: eventId,
          kind: 'provider.removed',
          type: 'provider.removed',
          occurred_at: removedAt.toISOString(),
          provider_id: p.ownerId,
          owner_id: randomUUID(),
          previous_status: 'busy',
          status: null,
          reason: 'removed',
        },
        { msgId: eventId },
      );
    // Delivered, then redelivered (a new message ID: past JetStream's duplicate window).
    await removal(randomUUID());
    await removal(randomUUID());
    await drained();
    // 2 minutes at 5.10/h = 0.17: the fee 0.0085, the provider 0.1615.
    expect(await session(id)).toMatchObject({
      status: 'terminated',
      end_reason: 'provider_removed',
      billed_minutes: 2,
      total_cost: '0.170000',
    });
    expect(await session(lateId)).toMatchObject({
      status: 'terminated',
      end_reason: 'provider_removed',
      billed_minutes: 0,
    });
    const records = await h.db
      .selectFrom('billing_records')
      .select(['session_id', 'total_cost'])
      .where('session_id', 'in', [id, lateId])
      .execute();
    expect(records).toHaveLength(2);
    expect((await h.balanceOf(renter.id)).total).toBe('9.830000');
    expect((await h.balanceOf(renter.id)).available).toBe('9.830000');
    expect((await h.balanceOf(late.id)).total).toBe('10.000000');
    expect((await h.balanceOf(p.id)).available).toBe('0.161500');
    // Usage reports for the ended session are refused from now on.
    await expect(report(id)).rejects.toMatchObject({ code: 'SESSION_NOT_ACTIVE' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });
});
