/**
 * Billing without NATS tells the real provider registry which sessions run on a machine, over HTTP with its own
 * machine client: the registry shows the machine busy while the session runs and idle after. The calls go through
 * billing's transactional outbox, so a call that fails (registry away) is made again by the next relay run. Billing
 * hears of the registry's state by asking: a rented machine its owner deleted or took into maintenance has its
 * session ended at the last reported minute when billing next looks.
 */
import { randomUUID } from 'node:crypto';
import type { TokenSource } from '@gpu/client';
import { createLogger, OutboxRelay, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '../services/auth/src/domain/clients.ts';
import { registrySessionPublisher } from '../services/billing/src/adapters/registry-sessions.ts';
import { expireReservations } from '../services/billing/src/domain/leases/held.ts';
import { Dec } from '../services/billing/src/domain/ledger/money.ts';
import { announcePrices } from '../services/billing/src/domain/pricing/provider-rates.ts';
import { checkRunningProviders } from '../services/billing/src/domain/sessions/provider-offline.ts';
import { end, H100_X1, manualClock, start } from '../services/billing/test/support/sessions.ts';
import { type BillingHarness, setupBilling } from '../services/billing/test/support/setup.ts';
import { gpusHeldEventSchema } from '../services/provider-registry/src/wire/gpu-holds.ts';
import { gpu, providerBody } from '../services/provider-registry/test/helpers.ts';
import { useAuthAndRegistry } from './support/auth-and-registry.ts';

const platform = useAuthAndRegistry();
let billing: BillingHarness;
const clock = manualClock(Date.now());
const logger = createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' });

beforeAll(async () => {
  const { client, secret } = await createClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `billing-${randomUUID()}`,
    role: 'service',
  });
  billing = await setupBilling({
    now: clock.now,
    config: {
      provider_registry: {
        url: platform.registryUrl,
        auth_url: platform.authUrl,
        client_id: client.id,
        client_secret: secret,
      },
    },
  });
});
afterAll(async () => {
  await billing?.close();
});

/** A relay of billing's outbox that reports sessions to the registry at `url` (the real one unless given). */
function relayTo(url = platform.registryUrl) {
  const publisher = registrySessionPublisher({ ...billing.config.provider_registry, url, timeout: '500ms' }, logger);
  return new OutboxRelay(billing.db, publisher!, { subject: 'unused', logger });
}

/**
 * Calls the real registry as an admin's tooling would (a `service` machine client of the real auth service), or with
 * the token of `as`.
 */
async function registry(method: string, path: string, body?: unknown, as?: TokenSource) {
  const token = await (as ?? (await platform.machineClient('service'))).get();
  const res = await fetch(`${platform.registryUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { ...((await res.json()) as { id: string; status: string; code?: string }), http: res.status };
}

const statusOf = async (id: string) => (await registry('GET', `/providers/${id}`)).status;

/** A machine at the registry (of `ownerId`), its provider wallet at billing, and a funded renter. */
async function rental(ownerId: string = randomUUID()) {
  const machine = await registry('POST', '/providers', providerBody({ owner_id: ownerId }));
  const provider = await billing.fundedWallet('0', 'provider', undefined, { ownerId: machine.id });
  const renter = await billing.fundedWallet('50', 'user');
  const body = {
    user_id: renter.ownerId,
    wallet_id: renter.id,
    provider_id: machine.id,
    job_id: randomUUID(),
    // The machine's model (an A100: providerBody's), with H100_X1's count and estimates.
    ...H100_X1,
    gpu_model: 'A100',
  };
  return { machine, provider, renter, body };
}

/** The registry's offers in a region (what a renter's search answers). */
async function offersIn(region: string) {
  const token = await (await platform.machineClient('service')).get();
  const res = await fetch(`${platform.registryUrl}/offers?region=${region}`, {
    headers: { authorization: `Bearer ${token}` },
  });
  expect(res.status).toBe(200);
  return (await res.json()) as {
    provider_id: string;
    gpu_count: number;
    free_gpus: number;
    price_per_gpu_hour: string;
  }[];
}

describe('the market without NATS', () => {
  it("prices offers as billing quotes them: the platform's card at start-up, then the machine's own rates", async () => {
    const relay = relayTo();
    const owner = await platform.providerUser();
    const where = `r-${randomUUID().slice(0, 8)}`;
    const machine = await registry('POST', '/providers', providerBody({ owner_id: owner.id, location: where }));
    await announcePrices(billing.ctx);
    await relay.flush();
    const quote = async () => {
      const res = await billing.app.inject({
        method: 'POST',
        url: '/api/v1/pricing/calculate',
        payload: { gpu_model: 'A100', provider_id: machine.id, duration_hours: '1' },
      });
      expect(res.statusCode, res.body).toBe(200);
      return res.json() as { total_hourly_rate: string; gpu_count: number };
    };
    const agree = async () => {
      const [offer] = await offersIn(where);
      const q = await quote();
      expect(offer!.provider_id).toBe(machine.id);
      // A quote for the machine's GPUs costs what the offer says per GPU-hour, to the last digit.
      expect(Number(q.gpu_count)).toBe(offer!.gpu_count);
      expect(new Dec(offer!.price_per_gpu_hour).mul(offer!.gpu_count).eq(q.total_hourly_rate)).toBe(true);
      return offer!.price_per_gpu_hour;
    };
    const platformPrice = await agree();

    const set = await billing.app.inject({
      method: 'PUT',
      url: `/api/v1/provider/${machine.id}/rates`,
      payload: { base_rates: { 'nvidia-tesla-a100': '3.25' }, vram_rate_per_gb_hour: '0.05' },
    });
    expect(set.statusCode, set.body).toBe(200);
    await relay.flush();
    const ownPrice = await agree();
    expect(ownPrice).not.toBe(platformPrice);
  });
});

describe('busy and idle without NATS', () => {
  it('shows the machine busy while its session runs and idle once it ended', async () => {
    const relay = relayTo();
    const { machine, body } = await rental();
    const started = await start(billing, body);
    expect(started.statusCode).toBe(201);
    await relay.flush();
    expect(await statusOf(machine.id)).toBe('busy');
    expect((await end(billing, started.json().session.id)).statusCode).toBe(200);
    await relay.flush();
    expect(await statusOf(machine.id)).toBe('idle');
  });

  it('makes a failed call again on the next relay run: nothing is lost while the registry is away', async () => {
    const { machine, body } = await rental();
    const started = await start(billing, body);
    expect(started.statusCode).toBe(201);
    // Nothing listens on port 9: the call fails, the event stays in the outbox.
    await relayTo('http://127.0.0.1:9').flush();
    expect(await statusOf(machine.id)).toBe('idle');
    const pending = await billing.db
      .selectFrom('outbox_events')
      .select('kind')
      .where('published_at', 'is', null)
      .execute();
    expect(pending.map((r) => r.kind)).toContain('session.started');
    await relayTo().flush();
    expect(await statusOf(machine.id)).toBe('busy');
  });
});

describe("the scheduler's reservations on the market, without NATS", () => {
  it('takes reserved GPUs off the offers until the reservation is used, cancelled or expires', async () => {
    const relay = relayTo();
    await announcePrices(billing.ctx);
    const owner = await platform.providerUser();
    const where = `r-${randomUUID().slice(0, 8)}`;
    const gpus = Array.from({ length: 4 }, () => gpu());
    const machine = await registry('POST', '/providers', providerBody({ owner_id: owner.id, location: where, gpus }));
    await billing.fundedWallet('0', 'provider', undefined, { ownerId: machine.id });
    const renter = await billing.fundedWallet('50', 'user');
    const free = async () => {
      await relay.flush();
      return (await offersIn(where)).map((o) => o.free_gpus);
    };
    const reserve = (count: number, ttlSeconds?: number) =>
      billing.app.inject({
        method: 'POST',
        url: '/api/v1/billing/reservations',
        payload: {
          user_id: renter.ownerId,
          provider_id: machine.id,
          gpu_model: 'A100',
          gpu_count: count,
          ttl_seconds: ttlSeconds,
        },
      });
    expect(await free()).toEqual([4]);
    const reserved = await reserve(3);
    expect(reserved.statusCode, reserved.body).toBe(201);
    expect(await free()).toEqual([1]);

    // The renter's start takes the free GPU, then one reserved for them: the reservation keeps two.
    const started = await start(billing, {
      user_id: renter.ownerId,
      wallet_id: renter.id,
      provider_id: machine.id,
      job_id: randomUUID(),
      ...H100_X1,
      gpu_model: 'A100',
      gpu_count: 2,
    });
    expect(started.statusCode, started.body).toBe(201);
    expect(started.json().session.gpu_indices).toEqual([0, 3]);
    expect(await free()).toEqual([]);
    expect(await statusOf(machine.id)).toBe('busy');
    // The registry keeps billing's statement: the session's GPUs and the reservation's, not whose they are.
    expect(await platform.registry.app.holds.of(machine.id)).toMatchObject({ gpuIndices: [0, 1, 2, 3] });

    // Cancelled: its two GPUs are on the market again.
    const cancelled = await billing.app.inject({
      method: 'DELETE',
      url: `/api/v1/billing/reservations/${reserved.json().id}`,
    });
    expect(cancelled.statusCode).toBe(204);
    expect(await free()).toEqual([2]);
    expect(await statusOf(machine.id)).toBe('idle');

    // Used whole by a start that names it: released at once.
    const second = await reserve(1);
    expect(await free()).toEqual([1]);
    const used = await start(billing, {
      user_id: renter.ownerId,
      wallet_id: renter.id,
      provider_id: machine.id,
      job_id: randomUUID(),
      ...H100_X1,
      gpu_model: 'A100',
      reservation_id: second.json().id,
    });
    expect(used.statusCode, used.body).toBe(201);
    expect(await free()).toEqual([1]);

    // Expired: billing's expiry sweep states the machine again at billing's time of expiry; the registry sweeps
    // nothing of its own.
    expect((await reserve(1, 1)).statusCode).toBe(201);
    expect(await free()).toEqual([]);
    clock.advance(1001);
    expect(await free()).toEqual([]);
    expect(await expireReservations(billing.ctx)).toBeNull();
    expect(await free()).toEqual([1]);
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);

    // With NATS the same events are the messages the registry's consumer reads: each one parses as it expects, and
    // their versions grow by one with each statement of the machine.
    const statements = await billing.db
      .selectFrom('outbox_events')
      .select(['kind', 'payload'])
      .where('kind', '=', 'lease.held')
      .where(sql<boolean>`payload::jsonb ->> 'provider_id' = ${machine.id}`)
      .orderBy('created_at')
      .execute();
    const bodies = statements.map((e) =>
      gpusHeldEventSchema.parse(typeof e.payload === 'string' ? JSON.parse(e.payload) : e.payload),
    );
    expect(bodies.map((b) => [b.version, b.gpu_indices])).toEqual([
      [1, [0, 1, 2]], // reserved 3
      [2, [0, 1, 2, 3]], // a start took the free one and one reserved
      [3, [0, 3]], // cancelled
      [4, [0, 1, 3]], // reserved 1
      [5, [0, 1, 3]], // used whole by a start
      [6, [0, 1, 2, 3]], // reserved 1 for a second
      [7, [0, 1, 3]], // lapsed
    ]);
  });
});

describe('which GPUs are free: one owner, billing', () => {
  it('shows at the registry exactly what billing holds after each wave of concurrent starts, ends, reservations and expiries', async () => {
    const relay = relayTo();
    const owner = await platform.providerUser();
    const where = `r-${randomUUID().slice(0, 8)}`;
    const gpus = Array.from({ length: 8 }, () => gpu());
    const machine = await registry('POST', '/providers', providerBody({ owner_id: owner.id, location: where, gpus }));
    await billing.fundedWallet('0', 'provider', undefined, { ownerId: machine.id });
    const renters = await Promise.all(Array.from({ length: 6 }, () => billing.fundedWallet('1000', 'user')));
    const running: string[] = [];
    const answers = new Map<number, number>();
    const count = (code: number) => answers.set(code, (answers.get(code) ?? 0) + 1);

    /** Billing's leases and the registry's market agree: the same GPUs, the same version, the offers and status. */
    const agree = async (wave: number) => {
      const now = clock.now();
      const billed = await billing.db
        .selectFrom('gpu_leases')
        .select('gpu_index')
        .where('provider_id', '=', machine.id)
        .where((eb) => eb.or([eb('session_id', 'is not', null), eb('expires_at', '>', now)]))
        .orderBy('gpu_index')
        .execute();
      const held = billed.map((r) => r.gpu_index);
      const version = await billing.db
        .selectFrom('machine_lease_versions')
        .select('version')
        .where('provider_id', '=', machine.id)
        .executeTakeFirst();
      const shown = await platform.registry.app.holds.of(machine.id);
      expect(shown, `wave ${wave}`).toEqual({ version: Number(version?.version ?? 0), gpuIndices: held });
      const offers = await platform.registry.database.db
        .selectFrom('offers')
        .select('free_gpus')
        .where('provider_id', '=', machine.id)
        .execute();
      expect(
        offers.map((o) => o.free_gpus),
        `wave ${wave}`,
      ).toEqual([held.length === 8 ? 0 : 8 - held.length]);
      expect(await statusOf(machine.id), `wave ${wave}`).toBe(held.length === 8 ? 'busy' : 'idle');
    };

    for (let wave = 0; wave < 8; wave++) {
      const work: Promise<unknown>[] = [];
      for (let i = 0; i < 10; i++) {
        const renter = renters[(wave + i) % renters.length]!;
        work.push(
          start(billing, {
            user_id: renter.ownerId,
            wallet_id: renter.id,
            provider_id: machine.id,
            job_id: randomUUID(),
            ...H100_X1,
            gpu_model: 'A100',
            gpu_count: 1 + (i % 3),
          }).then((res) => {
            count(res.statusCode);
            if (res.statusCode === 201) running.push(res.json().session.id);
            else expect(res.json().code, res.body).toBe('PROVIDER_NOT_AVAILABLE');
          }),
        );
      }
      // Half of what runs ends meanwhile.
      for (const id of running.splice(0, Math.ceil(running.length / 2))) {
        work.push(end(billing, id).then((res) => expect(res.statusCode, res.body).toBe(200)));
      }
      for (let i = 0; i < 6; i++) {
        work.push(
          billing.app
            .inject({
              method: 'POST',
              url: '/api/v1/billing/reservations',
              payload: {
                user_id: renters[i]!.ownerId,
                provider_id: machine.id,
                gpu_model: 'A100',
                gpu_count: 1 + (i % 2),
                ttl_seconds: i % 2 === 0 ? 1 : 5,
              },
            })
            .then((res) => count(res.statusCode)),
        );
      }
      // The relay publishes while the changes commit: statements arrive out of the order they were made in.
      work.push(relay.flush(), relay.flush());
      await Promise.all(work);
      await relay.flush();
      await agree(wave);
      // The wave's short reservations lapse: billing's sweep states the machine again, one message.
      clock.advance(2_000);
      await expireReservations(billing.ctx);
      await relay.flush();
      await agree(wave);
    }
    // The waves did run into each other: starts and reservations both won and were refused.
    expect(answers.get(201)).toBeGreaterThan(20);
    expect(answers.get(409)).toBeGreaterThan(10);
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });
});

/** A usage report of the session now (as an admin). */
const report = (sessionId: string) =>
  billing.app.inject({
    method: 'POST',
    url: '/api/v1/billing/usage-update',
    payload: { session_id: sessionId, timestamp: clock.now().toISOString(), gpu_utilization: 90, power_draw_w: 300 },
  });

const sessionOf = (id: string) =>
  billing.db.selectFrom('rental_sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

describe('a rented machine its owner takes away, without NATS', () => {
  it('deleted: billing finds it gone, ends the session once at the last reported minute, refuses later reports', async () => {
    const relay = relayTo();
    const owner = await platform.providerUser();
    const daemon = await platform.machineClient('daemon', owner.id);
    const { machine, provider, renter, body } = await rental(owner.id);
    const started = await start(billing, body);
    expect(started.statusCode).toBe(201);
    const sessionId = started.json().session.id as string;
    await relay.flush();
    expect(await statusOf(machine.id)).toBe('busy');

    clock.advance(2 * 60_000 + 5_000);
    expect((await report(sessionId)).statusCode).toBe(201);
    clock.advance(90_000);
    expect((await registry('DELETE', `/providers/${machine.id}`, undefined, daemon)).http).toBe(200);

    const ended = await checkRunningProviders(billing.ctx);
    expect(ended.map((e) => e.session.id)).toEqual([sessionId]);
    // 2 reported minutes of the registry's A100 80 GB, 400 W (4.00/h) = 0.133333: the fee 0.006667, the provider
    // 0.126666; the 1.5 minutes after the report are not paid.
    expect(await sessionOf(sessionId)).toMatchObject({
      status: 'terminated',
      end_reason: 'provider_removed',
      billed_minutes: 2,
      total_cost: '0.133333',
    });
    expect(await checkRunningProviders(billing.ctx)).toEqual([]);
    expect(await billing.balanceOf(renter.id)).toMatchObject({ total: '49.866667', locked: '0.000000' });
    expect((await billing.balanceOf(provider.id)).available).toBe('0.126666');
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
    const late = await report(sessionId);
    expect(late.statusCode).toBe(409);
    expect(late.json().code).toBe('SESSION_NOT_ACTIVE');
    // The session's end reaches the registry, which no longer knows the machine: delivered, nothing left to send.
    await relay.flush();
    const pending = await billing.db
      .selectFrom('outbox_events')
      .select('kind')
      .where('published_at', 'is', null)
      .execute();
    expect(pending).toEqual([]);
  });

  it('taken into maintenance by its daemon: the session ends at the last reported minute, the machine stays there', async () => {
    const relay = relayTo();
    const owner = await platform.providerUser();
    const daemon = await platform.machineClient('daemon', owner.id);
    const { machine, body } = await rental(owner.id);
    const sessionId = (await start(billing, body)).json().session.id as string;
    await relay.flush();
    const idle = await registry('PATCH', `/providers/${machine.id}/status`, { status: 'idle' }, daemon);
    expect([idle.http, idle.code]).toEqual([409, 'STATUS_CONTRADICTS_SESSIONS']);

    clock.advance(60_000 + 5_000);
    expect((await report(sessionId)).statusCode).toBe(201);
    expect((await registry('PATCH', `/providers/${machine.id}/status`, { status: 'maintenance' }, daemon)).http).toBe(
      200,
    );
    expect((await checkRunningProviders(billing.ctx)).map((e) => e.session.id)).toEqual([sessionId]);
    expect(await sessionOf(sessionId)).toMatchObject({
      status: 'terminated',
      end_reason: 'provider_maintenance',
      billed_minutes: 1,
    });
    await relay.flush();
    expect(await statusOf(machine.id)).toBe('maintenance');
    // The end reached the registry with its reason (DELETE ...?end_reason=): a fault of the machine's.
    expect(await registry('GET', `/providers/${machine.id}/reliability`)).toMatchObject({
      sessions_ended: 1,
      sessions_failed: 1,
    });
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });
});
