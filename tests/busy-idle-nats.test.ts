/**
 * The registry and billing over real NATS JetStream, both ways: a session that starts makes its machine busy at the
 * registry (billing's session events), the machine going offline ends the session at billing (the registry's status
 * events), and the ended session leaves the offline machine offline until a heartbeat brings it back to idle.
 */
import { randomUUID } from 'node:crypto';
import { connectPublisher, createLogger, type NatsPublisher, OutboxRelay } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type RegistryEventsConsumer,
  startRegistryEventsConsumer,
} from '../services/billing/src/adapters/registry-events-consumer.ts';
import { H100_X1, start } from '../services/billing/test/support/sessions.ts';
import { type BillingHarness, setupBilling } from '../services/billing/test/support/setup.ts';
import { type Harness, register, startHarness } from '../services/provider-registry/test/helpers.ts';

const logger = createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' });
let registry: Harness;
let billing: BillingHarness;
let nats: NatsPublisher;
let billingRelay: OutboxRelay;
let statuses: RegistryEventsConsumer;

beforeAll(async () => {
  registry = await startHarness({ consumeSessionEvents: true });
  const { messaging } = registry.config;
  const stream = `TEST_BILLING_${randomUUID().slice(0, 8)}`;
  billing = await setupBilling({
    config: {
      messaging: { stream, subjects: { events: messaging.subjects.billing_events } },
    },
  });
  nats = (await connectPublisher({
    url: messaging.nats_url,
    stream: { name: stream, subjects: [`${messaging.subjects.billing_events}.>`] },
  })) as NatsPublisher;
  billingRelay = new OutboxRelay(billing.db, nats, { subject: messaging.subjects.billing_events, logger });
  statuses = startRegistryEventsConsumer({
    connection: nats.connection,
    ctx: billing.ctx,
    subject: messaging.subjects.status,
    logger,
  });
});
afterAll(async () => {
  await statuses?.stop();
  await nats?.close();
  await billing?.close();
  await registry?.close();
  await registry?.testDb.drop();
});

async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, ms = 8000): Promise<T> {
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
  it('busy while rented, the session ended when the machine goes offline, idle after its next heartbeat', async () => {
    const machine = await register(registry.app);
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

    // billing's session.terminated reaches the registry, which keeps the machine offline.
    await billingRelay.flush();
    const rows = () =>
      registry.database.db.selectFrom('provider_sessions').selectAll().where('session_id', '=', sessionId).execute();
    expect((await until(rows, (r) => r[0]?.active === false))[0]?.active).toBe(false);
    expect(await machineStatus(machine.id)).toBe('offline');
    await registry.app.inject({ method: 'POST', url: `/providers/${machine.id}/heartbeat` });
    expect(await machineStatus(machine.id)).toBe('idle');
  });
});
