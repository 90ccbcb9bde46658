/**
 * A daemon acts for its own machines only: a machine is bound to the daemon client that registered it, and another
 * daemon client of the same owner (a second install, stolen credentials of another machine) can neither beat it (HTTP,
 * a batch, NATS), park it (status), rewrite nor delete it, nor take it over; the owner re-binds it (after a reinstall
 * with a new client), a daemon claims a machine bound to none, and each binding is an event for billing.
 */
import { randomUUID } from 'node:crypto';
import { type Caller, lockWaiters, testEnv } from '@gpu/common/testing';
import { connect, type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventCollector, type Harness, providerBody, startHarness } from './helpers.ts';

let h: Harness;
let nc: NatsConnection;
let events: EventCollector;
let owner: Caller;
/** The daemon that registers the machines, and a second daemon client of the same owner. */
let first: Caller;
let second: Caller;

beforeAll(async () => {
  h = await startHarness({ takeHeartbeats: true });
  nc = await connect(testEnv.natsConnectOptions());
  events = await EventCollector.start(h.subject);
  owner = await h.issuer.user(['provider']);
  first = await h.issuer.client('daemon', owner.id);
  second = await h.issuer.client('daemon', owner.id);
});
afterAll(async () => {
  await events?.close();
  await nc?.close();
  await h?.close();
  await h?.testDb.drop();
});

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
const call = (caller: Caller, method: Method, url: string, payload?: object) =>
  h.app.inject({ method, url, headers: caller.headers, ...(payload === undefined ? {} : { payload }) });

/** A machine registered by `by` (a daemon: bound to it; the owner: bound to none). */
async function machine(by: Caller) {
  const body = providerBody({ owner_id: owner.id });
  const res = await call(by, 'POST', '/providers', body);
  expect(res.statusCode, res.body).toBe(201);
  return { ...(res.json() as { id: string; daemon_client_id: string | null }), body };
}

const read = async (id: string) =>
  (await call(owner, 'GET', `/providers/${id}`)).json() as {
    status: string;
    last_seen_at: string;
    daemon_client_id: string | null;
    name: string;
  };

/** A heartbeat over NATS as `caller`: the answer. */
async function natsBeat(caller: Caller, id: string) {
  const hdrs = natsHeaders();
  hdrs.set('Authorization', caller.headers.authorization);
  const answer = await nc.request(`${h.config.messaging.subjects.heartbeats}.${id}`, '', {
    headers: hdrs,
    timeout: 20_000,
  });
  return answer.json<{ status_code: number; problem?: { code: string } }>();
}

/** Every way a daemon writes a machine, as `caller`: each answer's status and code. */
async function writes(caller: Caller, id: string, body: Record<string, unknown>) {
  const code = (res: { statusCode: number; json: () => { code?: string } }) =>
    res.statusCode === 200 ? 200 : `${res.statusCode} ${res.json().code}`;
  const batch = await call(caller, 'POST', '/providers/heartbeats', { heartbeats: [{ provider_id: id }] });
  const batchResult = batch.json().results[0] as { status_code: number; problem?: { code: string } };
  const nats = await natsBeat(caller, id);
  return {
    heartbeat: code(await call(caller, 'POST', `/providers/${id}/heartbeat`, {})),
    batch: batchResult.status_code === 200 ? 200 : `${batchResult.status_code} ${batchResult.problem?.code}`,
    nats: nats.status_code === 200 ? 200 : `${nats.status_code} ${nats.problem?.code}`,
    status: code(await call(caller, 'PATCH', `/providers/${id}/status`, { status: 'idle' })),
    update: code(await call(caller, 'PUT', `/providers/${id}`, { ...body, location: 'elsewhere' })),
  };
}

const REFUSED = '403 NOT_MACHINE_DAEMON';
const ALL_REFUSED = { heartbeat: REFUSED, batch: REFUSED, nats: REFUSED, status: REFUSED, update: REFUSED };
const ALL_TAKEN = { heartbeat: 200, batch: 200, nats: 200, status: 200, update: 200 };

describe('a machine bound to the daemon that registered it', () => {
  it('refuses every write of another daemon client of the same owner, and leaves the machine as it was', async () => {
    const m = await machine(first);
    expect(m.daemon_client_id).toBe(first.id);
    await call(owner, 'PATCH', `/providers/${m.id}/status`, { status: 'maintenance' });
    const before = await read(m.id);

    expect(await writes(second, m.id, m.body)).toEqual(ALL_REFUSED);
    expect((await call(second, 'DELETE', `/providers/${m.id}`)).json().code).toBe('NOT_MACHINE_DAEMON');
    // Nor may it take the machine over.
    const claim = await call(second, 'PUT', `/providers/${m.id}/daemon`, { client_id: second.id });
    expect([claim.statusCode, claim.json().code]).toEqual([403, 'NOT_MACHINE_DAEMON']);
    // Nothing moved: not the clock, not the status, not the record.
    expect(await read(m.id)).toEqual(before);

    // Its own daemon does all of it, and deletes it.
    expect(await writes(first, m.id, m.body)).toEqual(ALL_TAKEN);
    expect((await call(first, 'DELETE', `/providers/${m.id}`)).statusCode).toBe(200);
  });

  it('answers each heartbeat of a batch by the binding, and a beat of the other daemon written together with one of its own stays refused', async () => {
    const mine = await machine(second);
    const theirs = await machine(first);
    const batch = await call(second, 'POST', '/providers/heartbeats', {
      heartbeats: [{ provider_id: mine.id }, { provider_id: theirs.id }],
    });
    expect(batch.json().results.map((r: { status_code: number }) => r.status_code)).toEqual([200, 403]);
    // Both daemons beat one machine at once (one group commit): the machine's own daemon is answered, the other not.
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        call(i % 2 ? second : first, 'POST', `/providers/${theirs.id}/heartbeat`, {
          gpu_metrics: [{ index: 0, temperature: i % 2 ? 99 : 40 }],
        }),
      ),
    );
    expect(answers.map((a) => a.statusCode)).toEqual(Array.from({ length: 20 }, (_, i) => (i % 2 ? 403 : 200)));
    const gpus = (await call(owner, 'GET', `/providers/${theirs.id}`)).json().gpus as { temperature: number }[];
    expect(gpus[0]!.temperature).toBe(40);
  });
});

describe('binding a machine', () => {
  it('lets the owner re-bind a machine to another daemon client: the new one writes it, the old one no longer', async () => {
    const m = await machine(first);
    const rebound = await call(owner, 'PUT', `/providers/${m.id}/daemon`, { client_id: second.id });
    expect(rebound.statusCode, rebound.body).toBe(200);
    expect(rebound.json().daemon_client_id).toBe(second.id);
    expect(await writes(first, m.id, m.body)).toEqual(ALL_REFUSED);
    expect(await writes(second, m.id, m.body)).toEqual(ALL_TAKEN);
    // The event billing moves the machine's running sessions by.
    await events.waitFor(() => events.about(m.id).some((e) => e.data.kind === 'provider.daemon_bound'));
    expect(events.about(m.id).find((e) => e.data.kind === 'provider.daemon_bound')?.data).toMatchObject({
      type: 'provider.daemon_bound',
      provider_id: m.id,
      owner_id: owner.id,
      daemon_client_id: second.id,
    });
    // Another owner cannot bind it, nor can a renter.
    const stranger = await h.issuer.user(['provider']);
    expect((await call(stranger, 'PUT', `/providers/${m.id}/daemon`, { client_id: null })).json().code).toBe(
      'NOT_PROVIDER_OWNER',
    );
    const missing = await call(owner, 'PUT', `/providers/${randomUUID()}/daemon`, { client_id: null });
    expect(missing.statusCode).toBe(404);
    const bad = await call(owner, 'PUT', `/providers/${m.id}/daemon`, { client_id: 'not a client' });
    expect(bad.statusCode).toBe(400);
  });

  it('lets a daemon claim a machine bound to none, for itself only, and then keeps the others out', async () => {
    const m = await machine(owner);
    expect(m.daemon_client_id).toBeNull();
    // Bound to none: its owner's daemons beat it (a machine from before bindings keeps working) until one claims it.
    expect((await call(second, 'POST', `/providers/${m.id}/heartbeat`, {})).statusCode).toBe(200);
    const forOther = await call(first, 'PUT', `/providers/${m.id}/daemon`, { client_id: second.id });
    expect([forOther.statusCode, forOther.json().code]).toEqual([403, 'NOT_MACHINE_DAEMON']);
    const claimed = await call(first, 'PUT', `/providers/${m.id}/daemon`, { client_id: first.id });
    expect(claimed.statusCode, claimed.body).toBe(200);
    expect(claimed.json().daemon_client_id).toBe(first.id);
    // Claiming again is harmless; the other daemon can no longer claim it.
    expect((await call(first, 'PUT', `/providers/${m.id}/daemon`, { client_id: first.id })).statusCode).toBe(200);
    expect((await call(second, 'PUT', `/providers/${m.id}/daemon`, { client_id: second.id })).statusCode).toBe(403);
    expect(await writes(second, m.id, m.body)).toEqual(ALL_REFUSED);
    // The owner unbinds it: any of its daemons again.
    const unbound = await call(owner, 'PUT', `/providers/${m.id}/daemon`, { client_id: null });
    expect(unbound.json().daemon_client_id).toBeNull();
    expect((await call(second, 'POST', `/providers/${m.id}/heartbeat`, {})).statusCode).toBe(200);
  });

  it('lets two daemons that claim one machine at once have one winner', async () => {
    const m = await machine(owner);
    const answers = await Promise.all(
      [first, second].map((d) => call(d, 'PUT', `/providers/${m.id}/daemon`, { client_id: d.id })),
    );
    expect(answers.map((a) => a.statusCode).sort()).toEqual([200, 403]);
    const winner = answers.findIndex((a) => a.statusCode === 200);
    expect((await read(m.id)).daemon_client_id).toBe([first, second][winner]!.id);
  });
});

describe('a full update under way', () => {
  it('is refused when the machine changed hands or was unbound from its daemon before it wrote', async () => {
    for (const change of ['owner', 'daemon'] as const) {
      const m = await machine(first);
      const newOwner = randomUUID();
      let put: ReturnType<typeof call> | undefined;
      // The change (an admin's transfer, the owner's re-binding) holds the row, uncommitted, while the update, checked
      // against the machine as it was, waits to write it.
      await h.database.db.transaction().execute(async (trx) => {
        await sql`SELECT 1 FROM providers WHERE id = ${m.id} FOR UPDATE`.execute(trx);
        await trx
          .updateTable('providers')
          .set(change === 'owner' ? { owner_id: newOwner } : { daemon_client_id: second.id })
          .where('id', '=', m.id)
          .execute();
        put = call(first, 'PUT', `/providers/${m.id}`, { ...m.body, name: `renamed-${randomUUID().slice(0, 8)}` });
        await lockWaiters(h.database.db, 1);
      });
      const res = await put!;
      expect(res.statusCode, res.body).toBe(403);
      const row = await h.database.db
        .selectFrom('providers')
        .select(['owner_id', 'daemon_client_id', 'name'])
        .where('id', '=', m.id)
        .executeTakeFirstOrThrow();
      expect(row).toMatchObject(
        change === 'owner'
          ? { owner_id: newOwner, name: m.body.name }
          : { daemon_client_id: second.id, name: m.body.name },
      );
    }
  });
});
