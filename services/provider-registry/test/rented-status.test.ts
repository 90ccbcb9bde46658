/**
 * A rented machine's status follows the GPUs billing holds on it: billing's statements move it between busy and idle.
 * Its owner, its daemon and admins alike are refused (409 STATUS_CONTRADICTS_SESSIONS) an explicit `idle` while it is
 * fully rented, through PATCH status and a full update; they may hold it `busy` (owner-hold.test.ts), take it
 * `offline`, into `maintenance` or `error`, or delete it (published as `provider.removed`); billing then ends its
 * sessions. Nothing is written on a refusal, and a refusal cannot be raced past by a concurrent statement of held GPUs.
 */
import type { Caller } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  deliver,
  EventCollector,
  endRental,
  type Harness,
  providerBody,
  register,
  rent,
  startHarness,
} from './helpers.ts';

let h: Harness;
let events: EventCollector;
let owner: Caller;
let daemon: Caller;

beforeAll(async () => {
  h = await startHarness();
  events = await EventCollector.start(h.subject);
  owner = await h.issuer.user(['provider']);
  daemon = await h.issuer.client('daemon', owner.id);
});
afterAll(async () => {
  await events?.close();
  await h?.close();
  await h?.testDb.drop();
});

const stored = async (id: string) =>
  (await h.database.db
    .selectFrom('providers as p')
    .innerJoin('provider_liveness as l', 'l.provider_id', 'p.id')
    .selectAll('p')
    .select('l.last_seen_at')
    .where('p.id', '=', id)
    .executeTakeFirstOrThrow()) as {
    status: string;
    name: string;
    last_seen_at: Date;
  };

const patch = (id: string, status: string, caller: Caller) =>
  h.app.inject({ method: 'PATCH', url: `/providers/${id}/status`, payload: { status }, headers: caller.headers });

/** One of the owner's machines, registered idle. */
const machine = () => register(h.app, { owner_id: owner.id });

describe('explicit status changes of a rented machine', () => {
  it('refuses idle while a session runs, to the owner, its daemon and an admin, and changes nothing', async () => {
    const p = await machine();
    await rent(h.app, p.id);
    const before = await stored(p.id);
    for (const caller of [owner, daemon, h.admin]) {
      const res = await patch(p.id, 'idle', caller);
      expect(res.statusCode).toBe(409);
      expect(res.headers['content-type']).toMatch(/application\/problem\+json/);
      expect(res.json()).toMatchObject({ status: 409, code: 'STATUS_CONTRADICTS_SESSIONS' });
    }
    expect(await stored(p.id)).toEqual(before);
    expect((await h.app.inject({ url: `/providers/${p.id}` })).json().status).toBe('busy');
  });

  it('lets the owner hold a rented machine as busy, and refuses idle while it is rented, held or not', async () => {
    const p = await machine();
    const session = await rent(h.app, p.id);
    expect((await patch(p.id, 'busy', owner)).statusCode).toBe(200);
    const res = await patch(p.id, 'idle', owner);
    expect(res.statusCode).toBe(409);
    expect(res.json().code).toBe('STATUS_CONTRADICTS_SESSIONS');
    // The renter leaves: the hold keeps it busy, and the owner's idle puts it back on the market.
    await endRental(h.app, p.id, session);
    expect((await stored(p.id)).status).toBe('busy');
    expect((await patch(p.id, 'idle', owner)).statusCode).toBe(200);
    expect((await stored(p.id)).status).toBe('idle');
  });

  it('refuses a full update that sets idle while rented, keeping every field; one without a status goes through', async () => {
    const p = await machine();
    const session = await rent(h.app, p.id);
    const url = `/providers/${p.id}`;
    const idle = await h.app.inject({
      method: 'PUT',
      url,
      payload: providerBody({ owner_id: owner.id, status: 'idle' }),
      headers: owner.headers,
    });
    expect(idle.statusCode).toBe(409);
    expect(idle.json().code).toBe('STATUS_CONTRADICTS_SESSIONS');
    expect((await stored(p.id)).name).toBe(p.name);
    // A daemon's update after its GPUs changed names no status: the machine stays busy.
    const body = providerBody({ owner_id: owner.id });
    const put = await h.app.inject({ method: 'PUT', url, payload: body, headers: daemon.headers });
    expect(put.statusCode).toBe(200);
    expect(put.json()).toMatchObject({ name: body.name, status: 'busy' });
    // Idle once billing ended the session, and accepted then.
    await endRental(h.app, p.id, session);
    expect((await stored(p.id)).status).toBe('idle');
    expect((await patch(p.id, 'idle', owner)).statusCode).toBe(200);
  });

  it('lets the owner take a rented machine offline, into maintenance or error, published for billing to end its sessions', async () => {
    for (const status of ['maintenance', 'offline', 'error']) {
      const p = await machine();
      const session = await rent(h.app, p.id);
      const res = await patch(p.id, status, status === 'error' ? daemon : owner);
      expect(res.statusCode).toBe(200);
      expect(res.json()).toMatchObject({ previous_status: 'busy', status });
      await h.app.events.flush();
      await events.waitFor(() => events.about(p.id).some((e) => e.data.status === status));
      expect(events.about(p.id).at(-1)?.data).toMatchObject({ previous_status: 'busy', status, reason: 'explicit' });
      // Still rented until billing's end arrives: idle is refused, then allowed.
      expect((await patch(p.id, 'idle', owner)).statusCode).toBe(409);
      await endRental(h.app, p.id, session);
      expect((await stored(p.id)).status).toBe(status);
      expect((await patch(p.id, 'idle', owner)).statusCode).toBe(200);
    }
  });

  it('never ends up idle with a running session when an explicit idle races a session report', async () => {
    for (let round = 0; round < 15; round++) {
      const p = await machine();
      const [, answer] = await Promise.all([rent(h.app, p.id), patch(p.id, 'idle', owner)]);
      // Either the idle came first (200, then the session made it busy) or the session did (409): busy either way.
      expect([200, 409]).toContain(answer.statusCode);
      expect((await stored(p.id)).status).toBe('busy');
    }
  });
});

describe('deleting a rented machine', () => {
  it('deletes it with the GPUs held and publishes its removal with the delete; another owner removes nothing', async () => {
    const p = await machine();
    const session = await rent(h.app, p.id);
    const stranger = await h.issuer.user(['provider']);
    const theirs = await h.app.inject({ method: 'DELETE', url: `/providers/${p.id}`, headers: stranger.headers });
    expect(theirs.statusCode).toBe(403);
    expect(theirs.json().code).toBe('NOT_PROVIDER_OWNER');
    expect((await stored(p.id)).status).toBe('busy');

    const correlation = 'removal-of-a-rented-machine';
    const res = await h.app.inject({
      method: 'DELETE',
      url: `/providers/${p.id}`,
      headers: { ...daemon.headers, 'x-correlation-id': correlation },
    });
    expect(res.statusCode).toBe(200);
    expect(
      await h.database.db.selectFrom('gpu_holds').select('provider_id').where('provider_id', '=', p.id).execute(),
    ).toEqual([]);
    await h.app.events.flush();
    await events.waitFor(() => events.about(p.id).some((e) => e.data.kind === 'provider.removed'));
    const removal = events.about(p.id).find((e) => e.data.kind === 'provider.removed')!;
    expect(removal.data).toEqual({
      event_id: removal.msgId,
      kind: 'provider.removed',
      type: 'provider.removed',
      provider_id: p.id,
      owner_id: owner.id,
      previous_status: 'busy',
      status: null,
      reason: 'removed',
      occurred_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
    });
    expect(removal.correlationId).toBe(correlation);
    // Billing's late statement of the machine, and of the session's end, find no machine.
    const late = await deliver(h.app, 'lease.held', {
      provider_id: p.id,
      version: Number.MAX_SAFE_INTEGER,
      gpu_indices: [],
    });
    expect(late.json()).toEqual({ kind: 'lease.held', outcome: 'unapplicable' });
    const lateEnd = await deliver(h.app, 'session.completed', { session: { id: session, provider_id: p.id } });
    expect(lateEnd.json()).toEqual({ kind: 'session.completed', outcome: 'unapplicable' });
    expect(
      (await h.app.inject({ method: 'DELETE', url: `/providers/${p.id}`, headers: owner.headers })).statusCode,
    ).toBe(404);
  });
});
