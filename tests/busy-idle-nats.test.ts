/**
 * The registry and billing over real NATS JetStream, both ways: a session that starts makes its machine busy at the
 * registry (billing's statements of the GPUs it holds), the machine going offline ends the session at billing (the registry's status
 * events), and the ended session leaves the offline machine offline until a heartbeat brings it back to idle. What
 * the owner may do with a rented machine: take it into maintenance, or delete it; either ends its session at billing
 * at the last reported minute, once, whichever billing instance hears of it and however often.
 */
import { randomUUID } from 'node:crypto';
import { connectPublisher, createLogger, type NatsPublisher, Outbox, OutboxRelay } from '@gpu/common';
import type { Caller } from '@gpu/common/testing';
import { jetstreamManager } from '@nats-io/jetstream';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  PROVIDER_STATUS_CONSUMER,
  type RegistryEventsConsumer,
  registryMessages,
  startRegistryEventsConsumer,
} from '../services/billing/src/adapters/registry-events-consumer.ts';
import { billingContext } from '../services/billing/src/app.ts';
import { openBillingDatabase } from '../services/billing/src/db/open.ts';
import type { BillingContext } from '../services/billing/src/domain/context.ts';
import { endSessionsOfStoppedProvider, REMOVED } from '../services/billing/src/domain/sessions/provider-offline.ts';
import { H100_X1, manualClock, start } from '../services/billing/test/support/sessions.ts';
import { type BillingHarness, setupBilling } from '../services/billing/test/support/setup.ts';
import { DAEMON_BOUND, eventKindOf } from '../services/provider-registry/src/domain/status-events.ts';
import { gpu, type Harness, register, startHarness } from '../services/provider-registry/test/helpers.ts';
import { registryInProcess } from './support/registry-in-process.ts';

const logger = createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' });
// Billing's clock, moved by hand: sessions start an hour before the real time the registry stamps its events with.
const clock = manualClock(Date.now() - 3600_000);
let registry: Harness;
let billing: BillingHarness;
let nats: NatsPublisher;
let billingRelay: OutboxRelay;
let statuses: RegistryEventsConsumer;
/** A second billing instance on the same database, pulling from the same durable consumer. */
let second: { ctx: BillingContext; statuses: RegistryEventsConsumer; close(): Promise<void> };

beforeAll(async () => {
  registry = await startHarness({ consumeSessionEvents: true });
  const { messaging } = registry.config;
  const stream = `TEST_BILLING_${randomUUID().slice(0, 8)}`;
  billing = await setupBilling({
    now: clock.now,
    config: {
      messaging: { stream, subjects: { events: messaging.subjects.billing_events } },
    },
    providers: registryInProcess(() => registry),
  });
  nats = (await connectPublisher({
    url: messaging.nats_url,
    credentials: messaging.nats_credentials,
    stream: { name: stream, subjects: [`${messaging.subjects.billing_events}.>`] },
  })) as NatsPublisher;
  billingRelay = new OutboxRelay(billing.db, nats, { subject: messaging.subjects.billing_events, logger });
  statuses = startRegistryEventsConsumer({
    connection: nats.connection,
    ctx: billing.ctx,
    subject: messaging.subjects.status,
    logger,
  });
  const database = await openBillingDatabase(billing.config);
  const ctx = billingContext({
    config: billing.config,
    logger,
    db: database.db,
    chain: null,
    outbox: new Outbox(),
    now: clock.now,
  });
  const secondStatuses = startRegistryEventsConsumer({
    connection: nats.connection,
    ctx,
    subject: messaging.subjects.status,
    logger,
  });
  second = {
    ctx,
    statuses: secondStatuses,
    close: async () => {
      await secondStatuses.stop();
      await database.close();
    },
  };
});
afterAll(async () => {
  await second?.close();
  await statuses?.stop();
  await nats?.close();
  await billing?.close();
  await registry?.close();
  await registry?.testDb.drop();
});

/** A one-GPU machine of what `H100_X1` asks (its price: 5.10 an hour), at the registry. */
const h100Machine = (over: Record<string, unknown> = {}) =>
  register(registry.app, {
    owner_id: randomUUID(),
    gpus: [gpu({ model_name: H100_X1.gpu_model, vram: H100_X1.requested_vram_mb, power_consumption: 300 })],
    ...over,
  });

// Polls until `done` holds: a generous deadline costs nothing when it does, and a busy machine can be slow.
async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

const machineStatus = async (id: string) => (await registry.app.inject({ url: `/providers/${id}` })).json().status;
const sessionOf = (id: string) =>
  billing.db.selectFrom('rental_sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

describe('registry and billing over NATS', () => {
  it("billing's bus takes each kind the registry publishes on its status subject, and refuses a malformed one", async () => {
    const bus = registryMessages(billing.ctx);
    expect(bus.kinds().sort()).toEqual([DAEMON_BOUND, eventKindOf('explicit'), eventKindOf('removed')].sort());
    const missingStatus = { kind: eventKindOf('explicit'), provider_id: 'p', occurred_at: new Date().toISOString() };
    expect(await bus.deliver(missingStatus)).toMatchObject({ outcome: 'malformed', kind: 'provider.status_changed' });
  });

  it('busy while rented, the session ended when the machine goes offline, idle after its next heartbeat', async () => {
    const machine = await h100Machine();
    const provider = await billing.fundedWallet('0', 'provider', undefined, { ownerId: machine.id });
    const renter = await billing.fundedWallet('20', 'user');
    const res = await start(billing, {
      user_id: renter.ownerId,
      wallet_id: renter.id,
      provider_id: machine.id,
      job_id: randomUUID(),
      ...H100_X1,
    });
    expect(res.statusCode).toBe(201);
    const sessionId = res.json().session.id as string;
    expect(provider.id).toBe(res.json().session.provider_wallet_id);

    await billingRelay.flush();
    expect(
      await until(
        () => machineStatus(machine.id),
        (s) => s === 'busy',
      ),
    ).toBe('busy');

    const off = await registry.app.inject({
      method: 'PATCH',
      url: `/providers/${machine.id}/status`,
      payload: { status: 'offline' },
    });
    expect(off.statusCode).toBe(200);
    await registry.app.events.flush();
    const ended = await until(
      () => sessionOf(sessionId),
      (s) => s.status !== 'active',
    );
    expect(ended).toMatchObject({ status: 'terminated', end_reason: 'provider_offline', billed_minutes: 0 });
    expect((await billing.balanceOf(renter.id)).total).toBe('20.000000');
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);

    // Billing's statement that the machine's GPU is free reaches the registry, which keeps the machine offline.
    await billingRelay.flush();
    const holds = () => registry.app.holds.of(machine.id);
    expect(await until(holds, (x) => x.gpuIndices.length === 0)).toMatchObject({ version: 2, gpuIndices: [] });
    expect(await machineStatus(machine.id)).toBe('offline');
    await registry.app.inject({ method: 'POST', url: `/providers/${machine.id}/heartbeat` });
    expect(await machineStatus(machine.id)).toBe('idle');
  });
});

/** A usage report of the session now (as an admin: this billing has no registry to name the machine's owner). */
const report = (sessionId: string) =>
  billing.app.inject({
    method: 'POST',
    url: '/api/v1/billing/usage-update',
    payload: { session_id: sessionId, timestamp: clock.now().toISOString(), gpu_utilization: 90, power_draw_w: 300 },
  });

/** Waits until billing's consumer has handled every registry event published so far. */
async function drained() {
  const jsm = await jetstreamManager(nats.connection);
  await until(
    () => jsm.consumers.info(registry.config.messaging.stream, PROVIDER_STATUS_CONSUMER),
    (i) => i.num_pending === 0 && i.num_ack_pending === 0,
  );
}

/** A machine of `owner`'s, rented by a renter with 20 tokens and busy at the registry. */
async function rentedMachine(owner: Caller) {
  const machine = await h100Machine({ owner_id: owner.id });
  const provider = await billing.fundedWallet('0', 'provider', undefined, { ownerId: machine.id });
  const renter = await billing.fundedWallet('20', 'user');
  const res = await start(billing, {
    user_id: renter.ownerId,
    wallet_id: renter.id,
    provider_id: machine.id,
    job_id: randomUUID(),
    ...H100_X1,
  });
  expect(res.statusCode).toBe(201);
  await billingRelay.flush();
  expect(
    await until(
      () => machineStatus(machine.id),
      (s) => s === 'busy',
    ),
  ).toBe('busy');
  return { machine, provider, renter, sessionId: res.json().session.id as string };
}

describe('what the owner may do with a rented machine', () => {
  it('takes it into maintenance: the session ends at the last reported minute and the machine stays there', async () => {
    const owner = await registry.issuer.user(['provider']);
    const { machine, provider, renter, sessionId } = await rentedMachine(owner);
    // Idle is refused while the session runs.
    const idle = await registry.app.inject({
      method: 'PATCH',
      url: `/providers/${machine.id}/status`,
      payload: { status: 'idle' },
      headers: owner.headers,
    });
    expect(idle.statusCode).toBe(409);
    expect(idle.json().code).toBe('STATUS_CONTRADICTS_SESSIONS');

    clock.advance(2 * 60_000 + 5_000);
    expect((await report(sessionId)).statusCode).toBe(201);
    clock.advance(60_000);
    const res = await registry.app.inject({
      method: 'PATCH',
      url: `/providers/${machine.id}/status`,
      payload: { status: 'maintenance' },
      headers: owner.headers,
    });
    expect(res.statusCode).toBe(200);
    await registry.app.events.flush();
    const ended = await until(
      () => sessionOf(sessionId),
      (s) => s.status !== 'active',
    );
    // 2 reported minutes at 5.10/h = 0.17: the fee 0.0085, the provider 0.1615; the minute after is not paid.
    expect(ended).toMatchObject({
      status: 'terminated',
      end_reason: 'provider_maintenance',
      billed_minutes: 2,
      total_cost: '0.170000',
    });
    expect(await billing.balanceOf(renter.id)).toMatchObject({ total: '19.830000', locked: '0.000000' });
    expect((await billing.balanceOf(provider.id)).available).toBe('0.161500');
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);

    await billingRelay.flush();
    const holds = () => registry.app.holds.of(machine.id);
    expect(await until(holds, (x) => x.version === 2)).toMatchObject({ gpuIndices: [] });
    expect(await machineStatus(machine.id)).toBe('maintenance');
  });

  it('deletes it: the session ends once at the last reported minute, whichever instance hears of it and however often', async () => {
    const owner = await registry.issuer.user(['provider']);
    const { machine, provider, renter, sessionId } = await rentedMachine(owner);
    clock.advance(3 * 60_000 + 5_000);
    expect((await report(sessionId)).statusCode).toBe(201);
    clock.advance(2 * 60_000);

    const del = await registry.app.inject({
      method: 'DELETE',
      url: `/providers/${machine.id}`,
      headers: owner.headers,
    });
    expect(del.statusCode).toBe(200);
    await registry.app.events.flush();
    const ended = await until(
      () => sessionOf(sessionId),
      (s) => s.status !== 'active',
    );
    // 3 reported minutes at 5.10/h = 0.255: the fee 0.01275, the provider 0.24225.
    expect(ended).toMatchObject({
      status: 'terminated',
      end_reason: 'provider_removed',
      billed_minutes: 3,
      total_cost: '0.255000',
    });

    // The removal again: redelivered to either instance (new message IDs: past JetStream's duplicate window), and
    // handled by both instances at once.
    const [removal] = await registry.database.db
      .selectFrom('outbox_events')
      .select('payload')
      .where('kind', '=', 'provider.removed')
      .where(sql<boolean>`payload->>'provider_id' = ${machine.id}`)
      .execute();
    expect(removal?.payload).toMatchObject({ provider_id: machine.id, owner_id: owner.id, status: null });
    for (let i = 0; i < 4; i++) {
      await nats.publish(registry.config.messaging.subjects.status, removal!.payload, { msgId: randomUUID() });
    }
    const change = { providerId: machine.id, status: REMOVED, occurredAt: new Date() };
    const again = await Promise.all([
      endSessionsOfStoppedProvider(billing.ctx, change),
      endSessionsOfStoppedProvider(second.ctx, change),
    ]);
    expect(again.flat()).toEqual([]);
    await drained();

    const records = await billing.db
      .selectFrom('billing_records')
      .select(['total_cost', 'provider_earnings'])
      .where('session_id', '=', sessionId)
      .execute();
    expect(records).toEqual([{ total_cost: '0.255000', provider_earnings: '0.242250' }]);
    expect(await billing.balanceOf(renter.id)).toMatchObject({
      total: '19.745000',
      available: '19.745000',
      locked: '0.000000',
    });
    expect((await billing.balanceOf(provider.id)).available).toBe('0.242250');
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);

    // Usage reports for the session are refused from now on.
    const late = await report(sessionId);
    expect(late.statusCode).toBe(409);
    expect(late.json().code).toBe('SESSION_NOT_ACTIVE');
    expect((await registry.app.inject({ url: `/providers/${machine.id}` })).statusCode).toBe(404);
  });
});
