/**
 * Rented providers are busy: billing's session events over real NATS JetStream (a durable consumer) and billing's
 * HTTP reports move a provider idle -> busy -> idle; duplicates and reordering are harmless; offline, error and
 * maintenance are never overridden.
 */
import { randomUUID } from 'node:crypto';
import { connectPublisher, type NatsPublisher } from '@gpu/common';
import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventCollector, gpu, type Harness, register, startHarness } from './helpers.ts';

let h: Harness;
let billing: NatsPublisher;
let events: EventCollector;
const billingStream = `TEST_BILLING_EVENTS_${randomUUID().slice(0, 8)}`;

beforeAll(async () => {
  h = await startHarness({ consumeSessionEvents: true });
  billing = (await connectPublisher({
    url: h.config.messaging.nats_url,
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

type Kind = 'started' | 'grace_period' | 'resumed' | 'low_balance' | 'completed' | 'terminated';

/**
 * Publishes billing's session event (its envelope and the part of the session the registry reads), as billing's relay
 * does; `session` adds to the session's JSON (`gpu_indices`).
 */
async function sessionEvent(
  kind: Kind,
  providerId: string,
  sessionId: string,
  eventId = randomUUID(),
  endReason: string | null = null,
  session: Record<string, unknown> = {},
) {
  const status =
    { started: 'active', grace_period: 'grace_period', resumed: 'active', low_balance: 'active' }[kind as string] ??
    kind;
  await billing.publish(
    `${h.config.messaging.subjects.billing_events}.session.${kind}`,
    {
      event_id: eventId,
      kind: `session.${kind}`,
      occurred_at: new Date().toISOString(),
      session: { id: sessionId, provider_id: providerId, status, billed_minutes: 0, end_reason: endReason, ...session },
    },
    { msgId: eventId },
  );
}

const statusOf = async (id: string) => (await h.app.inject({ url: `/providers/${id}` })).json().status as string;

async function until(id: string, status: string, ms = 5000) {
  const end = Date.now() + ms;
  let now = await statusOf(id);
  while (now !== status && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 50));
    now = await statusOf(id);
  }
  return now;
}

/**
 * Waits until the consumer has handled everything published so far: it handles messages in order, so once a probe
 * provider's session (published last) shows it busy, every earlier message was applied.
 */
async function drained() {
  const probe = await register(h.app);
  await sessionEvent('started', probe.id, randomUUID());
  expect(await until(probe.id, 'busy')).toBe('busy');
}

const sessionRows = (providerId: string) =>
  h.database.db
    .selectFrom('provider_sessions')
    .select(['session_id', 'active'])
    .where('provider_id', '=', providerId)
    .orderBy('session_id')
    .execute();

describe('billing session events over NATS', () => {
  it('shows a provider busy while its session runs and idle after, publishing each change', async () => {
    const p = await register(h.app);
    const s = randomUUID();
    await sessionEvent('started', p.id, s);
    expect(await until(p.id, 'busy')).toBe('busy');
    await sessionEvent('grace_period', p.id, s);
    await sessionEvent('resumed', p.id, s);
    await sessionEvent('completed', p.id, s);
    expect(await until(p.id, 'idle')).toBe('idle');

    await h.app.events.flush();
    await events.waitFor(() => events.about(p.id).length === 3);
    expect(events.about(p.id).map((e) => [e.data.previous_status, e.data.status, e.data.reason])).toEqual([
      [null, 'idle', 'registered'],
      ['idle', 'busy', 'session_started'],
      ['busy', 'idle', 'session_ended'],
    ]);
  });

  it("counts ended sessions in the machine's reliability once each, the machine's faults against it", async () => {
    const p = await register(h.app);
    const [a, b] = [randomUUID(), randomUUID()];
    await sessionEvent('started', p.id, a);
    await sessionEvent('low_balance', p.id, a);
    expect(await until(p.id, 'busy')).toBe('busy');
    const ended = randomUUID();
    await sessionEvent('terminated', p.id, a, ended, 'provider_offline');
    await sessionEvent('terminated', p.id, a, randomUUID(), 'provider_offline'); // billing published it twice
    await sessionEvent('started', p.id, b);
    await sessionEvent('completed', p.id, b, randomUUID(), 'ended');
    const reliability = async () => (await h.app.inject({ url: `/providers/${p.id}/reliability` })).json();
    const deadline = Date.now() + 5000;
    while ((await reliability()).sessions_ended < 2 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    expect(await until(p.id, 'idle')).toBe('idle');
    expect(await reliability()).toMatchObject({ sessions_ended: 2, sessions_failed: 1, session_success: 0.5 });
  });

  it("prices the market from billing's price events: the platform's card, then a machine's own rates", async () => {
    const where = `r-${randomUUID().slice(0, 8)}`;
    const p = await register(h.app, { location: where });
    const prefix = h.config.messaging.subjects.billing_events;
    const publish = async (kind: string, body: object) => {
      const id = randomUUID();
      await billing.publish(
        `${prefix}.${kind}`,
        { event_id: id, kind, occurred_at: new Date().toISOString(), ...body },
        { msgId: id },
      );
    };
    const at = new Date().toISOString();
    await publish('pricing.platform_rates', {
      card: {
        occurred_at: at,
        base_rates: { default: '1.5' },
        vram_rate_per_gb_hour: '0',
        power_rate_per_watt_hour: '0',
        factors: { default: { demand: '2', supply: '1' } },
      },
    });
    const price = async () =>
      ((await h.app.inject({ url: `/offers?region=${where}` })).json() as { price_per_gpu_hour: string }[])[0]
        ?.price_per_gpu_hour;
    const settle = async (want: string) => {
      const deadline = Date.now() + 5000;
      while (Number(await price()) !== Number(want) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      return Number(await price());
    };
    expect(await settle('3')).toBe(3); // 1.5 × demand 2
    await publish('pricing.provider_rates', {
      provider_id: p.id,
      rates: {
        occurred_at: at,
        base_rates: { default: '4' },
        vram_rate_per_gb_hour: null,
        power_rate_per_watt_hour: null,
      },
    });
    expect(await settle('8')).toBe(8);
  });

  it('stays busy until the last of several sessions ends, whatever the order and however often events arrive', async () => {
    const p = await register(h.app);
    const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
    await sessionEvent('started', p.id, a);
    await sessionEvent('started', p.id, b);
    const aStarted = randomUUID();
    await sessionEvent('started', p.id, a, aStarted);
    await sessionEvent('terminated', p.id, a);
    expect(await until(p.id, 'busy')).toBe('busy');
    // c ends before its start arrives (reordered), then the start comes, twice (a redelivery past JetStream's
    // duplicate window has a new message ID): an ended session never runs again.
    await sessionEvent('completed', p.id, c);
    await sessionEvent('started', p.id, c);
    await sessionEvent('started', p.id, c);
    // a's start redelivered after its end.
    await sessionEvent('started', p.id, a);
    await drained();
    expect(await statusOf(p.id)).toBe('busy');
    await sessionEvent('completed', p.id, b);
    await sessionEvent('completed', p.id, b);
    expect(await until(p.id, 'idle')).toBe('idle');
    await drained();
    expect(await statusOf(p.id)).toBe('idle');
    expect(await sessionRows(p.id)).toEqual([a, b, c].sort().map((session_id) => ({ session_id, active: false })));
  });

  it('holds the GPUs a session names (none: every GPU): busy only once no GPU group is left to rent', async () => {
    const p = await register(h.app, { gpus: Array.from({ length: 8 }, () => gpu()) });
    const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
    await sessionEvent('started', p.id, a, undefined, null, { gpu_indices: [0, 1, 2, 3] });
    await drained();
    expect(await statusOf(p.id)).toBe('idle');
    // A grace period's event names none: the session keeps its GPUs.
    await sessionEvent('grace_period', p.id, a, undefined, null, { gpu_indices: null });
    await sessionEvent('started', p.id, b, undefined, null, { gpu_indices: [7, 6, 5, 4] });
    expect(await until(p.id, 'busy')).toBe('busy');
    await sessionEvent('completed', p.id, a);
    expect(await until(p.id, 'idle')).toBe('idle');
    const held = await h.database.db
      .selectFrom('provider_sessions')
      .select(['session_id', 'active', 'gpu_indices'])
      .where('provider_id', '=', p.id)
      .execute();
    expect(held.sort((x, y) => Number(x.active) - Number(y.active))).toEqual([
      { session_id: a, active: false, gpu_indices: [0, 1, 2, 3] },
      { session_id: b, active: true, gpu_indices: [4, 5, 6, 7] },
    ]);
    // A session of the whole machine (billing's sessions before per-GPU leases name none).
    await sessionEvent('started', p.id, c);
    expect(await until(p.id, 'busy')).toBe('busy');
    // A start with a malformed list can never apply: acknowledged, and nothing changes. An end does not depend on it.
    const d = randomUUID();
    await sessionEvent('started', p.id, d, undefined, null, { gpu_indices: [1, 1] });
    await drained();
    expect((await sessionRows(p.id)).map((r) => r.session_id)).not.toContain(d);
    await sessionEvent('completed', p.id, c, undefined, null, { gpu_indices: 'all' });
    expect(await until(p.id, 'idle')).toBe('idle');

    await h.app.events.flush();
    await events.waitFor(() => events.about(p.id).length === 5);
    expect(events.about(p.id).map((e) => [e.data.previous_status, e.data.status, e.data.reason])).toEqual([
      [null, 'idle', 'registered'],
      ['idle', 'busy', 'session_started'],
      ['busy', 'idle', 'session_ended'],
      ['idle', 'busy', 'session_started'],
      ['busy', 'idle', 'session_ended'],
    ]);
  });

  it("holds a reservation's GPUs from billing's lease events until released or expired, counting no end", async () => {
    const p = await register(h.app, { gpus: Array.from({ length: 8 }, () => gpu()) });
    const lease = (kind: 'reserved' | 'released', id: string, gpuIndices: number[], expiresAt: Date) => {
      const eventId = randomUUID();
      return billing.publish(
        `${h.config.messaging.subjects.billing_events}.lease.${kind}`,
        {
          event_id: eventId,
          kind: `lease.${kind}`,
          occurred_at: new Date().toISOString(),
          reservation: {
            id,
            provider_id: p.id,
            user_id: randomUUID(),
            gpu_indices: gpuIndices,
            expires_at: expiresAt.toISOString(),
          },
        },
        { msgId: eventId },
      );
    };
    const rows = () =>
      h.database.db
        .selectFrom('provider_sessions')
        .select(['session_id', 'active', 'kind', 'gpu_indices'])
        .where('provider_id', '=', p.id)
        .execute();
    const [r1, r2] = [randomUUID(), randomUUID()];
    await lease('reserved', r1, [0, 1, 2, 3, 4, 5, 6, 7], new Date(Date.now() + 60_000));
    expect(await until(p.id, 'busy')).toBe('busy');
    await lease('released', r1, [0, 1, 2, 3, 4, 5, 6, 7], new Date(Date.now() + 60_000));
    expect(await until(p.id, 'idle')).toBe('idle');
    // A malformed one can never apply: acknowledged, and the next is applied.
    await billing.publish(`${h.config.messaging.subjects.billing_events}.lease.reserved`, { kind: 'lease.reserved' });
    await lease('reserved', r2, [0, 1, 2, 3, 4, 5, 6, 7], new Date(Date.now() + 500));
    expect(await until(p.id, 'busy')).toBe('busy');
    expect(await rows()).toEqual(
      expect.arrayContaining([
        { session_id: r1, active: false, kind: 'reservation', gpu_indices: [0, 1, 2, 3, 4, 5, 6, 7] },
        { session_id: r2, active: true, kind: 'reservation', gpu_indices: [0, 1, 2, 3, 4, 5, 6, 7] },
      ]),
    );
    await new Promise((r) => setTimeout(r, 600));
    await h.app.sessions.expireReservations();
    expect(await statusOf(p.id)).toBe('idle');
    expect((await h.app.inject({ url: `/providers/${p.id}/reliability` })).json()).toMatchObject({
      sessions_ended: 0,
    });
  });

  it('never overrides offline, error or maintenance, and a session that ends meanwhile leaves them too', async () => {
    const held: Record<string, string> = {};
    for (const status of ['offline', 'error', 'maintenance']) {
      const p = await register(h.app);
      await h.app.inject({ method: 'PATCH', url: `/providers/${p.id}/status`, payload: { status } });
      const s = randomUUID();
      await sessionEvent('started', p.id, s);
      held[p.id] = status;
      await sessionEvent('completed', p.id, s);
      await sessionEvent('started', p.id, randomUUID());
    }
    await drained();
    for (const [id, status] of Object.entries(held)) expect(await statusOf(id)).toBe(status);

    // A busy provider that goes offline stays offline when its session ends; a heartbeat brings it back to idle.
    const p = await register(h.app);
    const s = randomUUID();
    await sessionEvent('started', p.id, s);
    expect(await until(p.id, 'busy')).toBe('busy');
    await h.app.inject({ method: 'PATCH', url: `/providers/${p.id}/status`, payload: { status: 'offline' } });
    await sessionEvent('terminated', p.id, s);
    await drained();
    expect(await statusOf(p.id)).toBe('offline');
    await h.app.inject({ method: 'POST', url: `/providers/${p.id}/heartbeat` });
    expect(await statusOf(p.id)).toBe('idle');
  });

  it('acknowledges events it can never apply (unknown provider, malformed) and goes on', async () => {
    await sessionEvent('started', randomUUID(), randomUUID());
    await billing.publish(`${h.config.messaging.subjects.billing_events}.session.started`, { nonsense: true });
    await drained();
    const jsm = await jetstreamManager(billing.connection);
    const info = await jsm.consumers.info(billingStream, h.config.messaging.session_consumer);
    expect(info.num_pending).toBe(0);
  });
});

describe('billing session reports over HTTP (billing without NATS)', () => {
  const url = (p: string, s: string) => `/providers/${p}/sessions/${s}`;

  it('PUT marks a session running (busy), DELETE ended (idle); both idempotent; an ended session is 409', async () => {
    const p = await register(h.app);
    const s = randomUUID();
    const put = await h.app.inject({ method: 'PUT', url: url(p.id, s) });
    expect(put.statusCode).toBe(200);
    expect(put.json()).toMatchObject({
      provider_id: p.id,
      session_id: s,
      active: true,
      previous_status: 'idle',
      status: 'busy',
    });
    expect((await h.app.inject({ method: 'PUT', url: url(p.id, s) })).json()).toMatchObject({
      active: true,
      previous_status: 'busy',
      status: 'busy',
    });
    const del = await h.app.inject({ method: 'DELETE', url: url(p.id, s) });
    expect(del.json()).toMatchObject({ active: false, previous_status: 'busy', status: 'idle' });
    expect((await h.app.inject({ method: 'DELETE', url: url(p.id, s) })).json()).toMatchObject({ status: 'idle' });
    const again = await h.app.inject({ method: 'PUT', url: url(p.id, s) });
    expect(again.statusCode).toBe(409);
    expect(again.json().code).toBe('SESSION_ENDED');
    expect(await statusOf(p.id)).toBe('idle');
  });

  it('keeps an ended session for sessions.retention, then deletes it; a running one is never deleted', async () => {
    const p = await register(h.app);
    const [old, recent, running] = [randomUUID(), randomUUID(), randomUUID()];
    for (const s of [old, recent, running]) await h.app.inject({ method: 'PUT', url: url(p.id, s) });
    for (const s of [old, recent]) await h.app.inject({ method: 'DELETE', url: url(p.id, s) });
    const db = h.database.db;
    await db
      .updateTable('provider_sessions')
      .set({ updated_at: new Date(Date.now() - 8 * 86_400_000) })
      .where('session_id', 'in', [old, running])
      .execute();
    expect(await h.app.sessions.purgeEnded(7 * 86_400_000)).toBeGreaterThanOrEqual(1);
    const kept = await db
      .selectFrom('provider_sessions')
      .select(['session_id', 'active'])
      .where('provider_id', '=', p.id)
      .orderBy('active')
      .execute();
    expect(kept).toEqual([
      { session_id: recent, active: false },
      { session_id: running, active: true },
    ]);
    // The running one still holds the machine.
    expect(await statusOf(p.id)).toBe('busy');
  });

  it('answers an unknown provider 404 and malformed IDs 400, with problem bodies', async () => {
    const missing = await h.app.inject({ method: 'PUT', url: url(randomUUID(), randomUUID()) });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().code).toBe('PROVIDER_NOT_FOUND');
    const p = await register(h.app);
    const bad = await h.app.inject({ method: 'DELETE', url: url(p.id, 'not-a-uuid') });
    expect(bad.statusCode).toBe(400);
    expect(bad.headers['content-type']).toMatch(/problem\+json/);
  });
});
