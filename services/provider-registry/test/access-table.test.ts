/**
 * Who may call which registry route (the README's access table): every route × every kind of caller, with tokens
 * from the issuer the app trusts. Each request touches a machine owned by the `owner` caller.
 */
import {
  type AccessRule,
  accessCallers,
  type CallerName,
  checkAccessTable,
  type TableCaller,
} from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Harness, providerBody, register, startHarness } from './helpers.ts';

let h: Harness;
let callers: Record<CallerName, TableCaller>;

beforeAll(async () => {
  h = await startHarness({ nats: false });
  callers = await accessCallers(h.issuer);
});
afterAll(() => h?.close());

/** A machine of the `owner` caller, registered by an admin. */
const ownersMachine = async () => (await register(h.app, { owner_id: callers.owner.id })).id;

/** The owner, its daemon, admins and platform services manage the owner's machine; nobody else does. */
const MANAGE = (ok: number) => ({ owner: ok, daemon: ok, admin: ok, service: ok, others: 403 }) as const;
/** Rental sessions are reported by billing (a platform service) and admins only: the machine's owner cannot. */
const PRIVILEGED = { admin: 200, service: 200, others: 403 } as const;
/** Discovery and single reads: managers, the scheduler and the gateway; another provider and renters do not. */
const READ = { ...MANAGE(200), scheduler: 200, gateway: 200 } as const;

/** Statements of held GPUs the table makes: each greater than the last. */
let version = 0;

function table(): Record<string, AccessRule> {
  return {
    'POST /providers': {
      request: () => ({ payload: providerBody({ owner_id: callers.owner.id }) }),
      expect: MANAGE(201),
    },
    'GET /providers': {
      request: () => ({}),
      // A provider (or its daemon) lists its own machines; the list of someone with none is empty, not refused.
      expect: { ...READ, other_user: 200, other_daemon: 200 },
    },
    'GET /providers/:providerID': {
      request: async () => ({ url: `/providers/${await ownersMachine()}` }),
      expect: READ,
    },
    'GET /providers/:providerID/reliability': {
      request: async () => ({ url: `/providers/${await ownersMachine()}/reliability` }),
      // Anyone with a token, renters and other providers included: it names nothing of the owner.
      expect: { ...READ, other_user: 200, other_daemon: 200, renter: 200 },
    },
    'GET /offers': {
      request: () => ({}),
      // The market: anyone with a token.
      expect: { ...READ, other_user: 200, other_daemon: 200, renter: 200 },
    },
    'PUT /providers/:providerID': {
      request: async () => ({
        url: `/providers/${await ownersMachine()}`,
        payload: providerBody({ owner_id: callers.owner.id }),
      }),
      expect: MANAGE(200),
    },
    'PUT /providers/:providerID/daemon': {
      // Each caller binds the owner's machine (bound to none) to itself: the owner's daemon claims it; the owner, admins
      // and services may bind it to any client (README, "Bound daemons").
      request: async (c) => ({ url: `/providers/${await ownersMachine()}/daemon`, payload: { client_id: c.id } }),
      expect: MANAGE(200),
    },
    'PATCH /providers/:providerID/status': {
      request: async () => ({ url: `/providers/${await ownersMachine()}/status`, payload: { status: 'maintenance' } }),
      expect: MANAGE(200),
    },
    'POST /providers/:providerID/heartbeat': {
      request: async () => ({ url: `/providers/${await ownersMachine()}/heartbeat`, payload: {} }),
      expect: MANAGE(200),
    },
    'POST /providers/heartbeats': {
      request: async () => ({ payload: { heartbeats: [{ provider_id: await ownersMachine() }] } }),
      // Another provider or daemon may send the batch: each heartbeat of a machine not theirs is a 403 in its place
      // (heartbeat-batches.test.ts), and writes nothing.
      expect: { ...MANAGE(200), other_user: 200, other_daemon: 200 },
    },
    'POST /messages': {
      request: async () => {
        version += 1;
        return {
          payload: {
            event_id: crypto.randomUUID(),
            kind: 'lease.held',
            occurred_at: new Date().toISOString(),
            provider_id: await ownersMachine(),
            version,
            gpu_indices: [0],
          },
        };
      },
      expect: PRIVILEGED,
    },
    'DELETE /providers/:providerID': {
      request: async () => ({ url: `/providers/${await ownersMachine()}` }),
      expect: MANAGE(200),
    },
  };
}

describe('access table of the provider registry', () => {
  it('answers every route as the table says, for every kind of caller, and has a rule for every route', async () => {
    const report = await checkAccessTable(h.app, callers, table());
    expect(report).toEqual({ unlisted: [], unknown: [], mismatches: [] });
  });

  it('lists only the caller’s own machines to a provider and its daemon, every machine to the scheduler', async () => {
    const mine = await ownersMachine();
    const theirs = (await register(h.app, { owner_id: callers.other_user.id })).id;
    const ids = async (c: TableCaller) =>
      ((await h.app.inject({ url: '/providers?limit=1000', headers: c.headers })).json() as { id: string }[]).map(
        (p) => p.id,
      );
    for (const c of [callers.owner, callers.daemon]) {
      expect(await ids(c)).toContain(mine);
      expect(await ids(c)).not.toContain(theirs);
    }
    expect(await ids(callers.other_daemon)).toEqual([theirs]);
    expect(await ids(callers.scheduler)).toEqual(expect.arrayContaining([mine, theirs]));
  });

  it('refuses a provider moving its machine to another owner, and leaves the record as it was', async () => {
    const id = await ownersMachine();
    const res = await h.app.inject({
      method: 'PUT',
      url: `/providers/${id}`,
      headers: callers.owner.headers,
      payload: providerBody({ owner_id: callers.other_user.id }),
    });
    expect(res.statusCode).toBe(403);
    expect(res.json().code).toBe('NOT_PROVIDER_OWNER');
    const after = await h.app.inject({ url: `/providers/${id}`, headers: callers.admin.headers });
    expect(after.json().owner_id).toBe(callers.owner.id);
  });

  it('answers an anonymous request 401 with WWW-Authenticate before looking at its body', async () => {
    const res = await h.app.inject({
      method: 'POST',
      url: '/providers',
      headers: { authorization: undefined },
      payload: { nonsense: true },
    });
    expect(res.statusCode).toBe(401);
    expect(res.headers['www-authenticate']).toMatch(/^Bearer/);
  });
});
