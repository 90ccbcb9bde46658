/**
 * Who may call which billing route (the README's access table): every route × every kind of caller, with tokens
 * from the issuer the app trusts, and the rules the table cannot show (a renter against the provider's owner,
 * history scoped to its parties, money never moved by a daemon, NATS), each as a test of its own.
 *
 * In the table the `owner` caller (a user with the provider and renter roles) holds a user wallet, holds the
 * provider wallet of a machine (`providerId`), and rents that machine; `daemon` acts for `owner`.
 */
import {
  type AccessRule,
  accessCallers,
  type CallerName,
  checkAccessTable,
  type TableCaller,
  uninjected,
} from '@gpu/common/testing';
import { Keypair } from '@solana/web3.js';
import { beforeAll, describe, expect, it } from 'vitest';
import { insertJob } from '../src/db/job-repository.ts';
import type { Wallet } from '../src/domain/wallets/wallets.ts';
import { H100_X1 } from './support/sessions.ts';
import { useBillingHarness } from './support/setup.ts';

const h = useBillingHarness();
let callers: Record<CallerName, TableCaller>;
let ownerWallet: Wallet;
let providerWallet: Wallet;
let providerId: string;

beforeAll(async () => {
  callers = await accessCallers(h.issuer);
  ownerWallet = await h.fundedWallet('100000', 'user', undefined, { ownerId: callers.owner.id });
  providerWallet = await h.fundedWallet('1000', 'provider', undefined, { holderId: callers.owner.id });
  providerId = providerWallet.ownerId;
});

const address = () => Keypair.generate().publicKey.toBase58();
let storagePeriods = 0;

/** A running session: `owner` rents the machine of `owner`'s provider wallet (started by an admin). */
async function ownersSession(workload?: object): Promise<string> {
  const res = await h.app.inject({
    method: 'POST',
    url: '/api/v1/billing/start-session',
    payload: {
      user_id: callers.owner.id,
      wallet_id: ownerWallet.id,
      provider_id: providerId,
      job_id: crypto.randomUUID(),
      ...H100_X1,
      ...(workload ? { workload } : {}),
    },
  });
  expect(res.statusCode).toBe(201);
  return res.json().session.id;
}

/** A queued job of `owner`'s, written as a submit writes it (this harness has no registry to submit through). */
async function ownersJob(): Promise<string> {
  const now = new Date();
  const row = await insertJob(h.db, {
    id: crypto.randomUUID(),
    user_id: callers.owner.id,
    wallet_id: ownerWallet.id,
    name: null,
    idempotency_key: null,
    terms: JSON.stringify({ gpu_count: 1, max_price_per_gpu_hour: '5' }),
    workload: JSON.stringify({ command: ['true'], max_runtime_seconds: 60, env: {}, inputs: [], network: false }),
    max_attempts: 3,
    retry_on_failure: false,
    spend_cap: '1',
    state: 'queued',
    reason: null,
    session_id: null,
    place_after: now,
    placing_until: null,
    queued_until: null,
    created_at: now,
    updated_at: now,
    ended_at: null,
  });
  return row.id;
}

const report = (sessionId: string) => ({
  session_id: sessionId,
  timestamp: new Date().toISOString(),
  gpu_utilization: 50,
  power_draw_w: 200,
  message_id: crypto.randomUUID(),
});

/** A renter's own (`ok`), admins' and services' too, other renters `others`; no machine client (jobs). */
const RENTERS = (ok: number, others: number) =>
  ({
    owner: ok,
    admin: ok,
    service: ok,
    others,
    gateway: 403,
    scheduler: 403,
    daemon: 403,
    other_daemon: 403,
  }) as const;

/** The holder (a user's own token), admins and services; nobody else. */
const HOLDER = (ok: number) => ({ owner: ok, admin: ok, service: ok, others: 403 }) as const;
/** A session's parties (renter and provider owner, and that owner's daemon), admins and services. */
const PARTY = (ok: number) => ({ ...HOLDER(ok), daemon: ok }) as const;
const EVERYONE = (ok: number) => Object.fromEntries(['others', 'anonymous', 'forged', 'expired'].map((c) => [c, ok]));
const SIGNATURE = '5'.repeat(88);
const WORKLOAD = { command: ['true'], max_runtime_seconds: 60 };

function table(): Record<string, AccessRule> {
  const w = () => `/api/v1/wallet/${ownerWallet.id}`;
  return {
    // Opening a wallet for someone else: admins and services only (a user opens their own; see below).
    'POST /api/v1/wallet': {
      request: () => ({
        payload: { owner_type: 'user', owner_id: crypto.randomUUID(), solana_address: address() },
      }),
      expect: { admin: 201, service: 201, others: 403 },
    },
    // Every user lists their own (wallets.test.ts: nobody else's); a machine client holds none and lists none.
    'GET /api/v1/wallet': {
      request: () => ({}),
      expect: { others: 200, daemon: 403, other_daemon: 403, gateway: 403, scheduler: 403 },
    },
    'GET /api/v1/wallet/:walletID': { request: () => ({ url: w() }), expect: HOLDER(200) },
    'POST /api/v1/wallet/:walletID/address-challenge': {
      request: () => ({ url: `${w()}/address-challenge` }),
      expect: HOLDER(201),
    },
    // Whoever gets past the rule finds no pending challenge for this signature (or a proven address: 200).
    'POST /api/v1/wallet/:walletID/address-proof': {
      request: () => ({ url: `${w()}/address-proof`, payload: { signature: '1'.repeat(64) } }),
      expect: HOLDER(422),
    },
    'GET /api/v1/wallet/:walletID/balance': { request: () => ({ url: `${w()}/balance` }), expect: HOLDER(200) },
    'GET /api/v1/wallet/:walletID/transactions': {
      request: () => ({ url: `${w()}/transactions` }),
      expect: HOLDER(200),
    },
    // No chain in this harness: whoever gets past the rule meets 503 SOLANA_NOT_CONFIGURED.
    'GET /api/v1/wallet/:walletID/chain-balance': {
      request: () => ({ url: `${w()}/chain-balance` }),
      expect: HOLDER(503),
    },
    // Admins only; without a chain in this harness, 503 SOLANA_NOT_CONFIGURED once past the role.
    'GET /api/v1/billing/audit': {
      request: () => ({ url: '/api/v1/billing/audit' }),
      expect: { admin: 200, others: 403 },
    },
    'GET /api/v1/billing/audit/verify': {
      request: () => ({ url: '/api/v1/billing/audit/verify' }),
      expect: { admin: 200, others: 403 },
    },
    'GET /api/v1/billing/reserves': {
      request: () => ({ url: '/api/v1/billing/reserves' }),
      expect: { admin: 503, others: 403 },
    },
    // Resuming checks the reserves first: 503 without a chain.
    'POST /api/v1/billing/reserves/resume': {
      request: () => ({ url: '/api/v1/billing/reserves/resume', payload: { reason: 'covered again' } }),
      expect: { admin: 503, others: 403 },
    },
    'POST /api/v1/billing/reserves/pause': {
      request: () => ({ url: '/api/v1/billing/reserves/pause', payload: { reason: 'drill' } }),
      expect: { admin: 200, others: 403 },
    },
    // Public, and without a chain in this harness: 503 SOLANA_NOT_CONFIGURED for everyone.
    'GET /api/v1/deposits/instructions': {
      request: () => ({ url: '/api/v1/deposits/instructions' }),
      expect: EVERYONE(503),
      public: true,
    },
    'POST /api/v1/wallet/:walletID/deposit': {
      // The owner's address is not proven here: whoever gets past the rule meets 409 ADDRESS_NOT_PROVEN.
      request: () => ({ url: `${w()}/deposit`, payload: { signature: SIGNATURE } }),
      expect: HOLDER(409),
    },
    'POST /api/v1/wallet/:walletID/withdraw': {
      request: () => ({ url: `${w()}/withdraw`, payload: { amount: '1' } }),
      expect: HOLDER(503),
    },
    'GET /api/v1/provider/:providerID/earnings': {
      request: () => ({ url: `/api/v1/provider/${providerId}/earnings` }),
      expect: PARTY(200),
    },
    'POST /api/v1/provider/:providerID/payout': {
      request: () => ({ url: `/api/v1/provider/${providerId}/payout`, payload: { amount: '10' } }),
      expect: HOLDER(503),
    },
    'GET /api/v1/provider/:providerID/payout-settings': {
      request: () => ({ url: `/api/v1/provider/${providerId}/payout-settings` }),
      expect: PARTY(200),
    },
    // Turning it off needs no chain; turning it on is tested in auto-payout.test.ts.
    'PUT /api/v1/provider/:providerID/payout-settings': {
      request: () => ({ url: `/api/v1/provider/${providerId}/payout-settings`, payload: { auto_payout: false } }),
      expect: HOLDER(200),
    },
    'GET /api/v1/provider/:providerID/rates': {
      request: () => ({ url: `/api/v1/provider/${providerId}/rates` }),
      expect: EVERYONE(200),
      public: true,
    },
    'PUT /api/v1/provider/:providerID/rates': {
      request: () => ({
        url: `/api/v1/provider/${providerId}/rates`,
        payload: { base_rates: {}, vram_rate_per_gb_hour: null, power_rate_per_watt_hour: null },
      }),
      expect: HOLDER(200),
    },
    'POST /api/v1/pricing/calculate': {
      request: () => ({ payload: { ...H100_X1 } }),
      expect: EVERYONE(200),
      public: true,
    },
    'GET /api/v1/pricing/rates': { request: () => ({}), expect: EVERYONE(200), public: true },
    'POST /api/v1/billing/start-session': {
      request: () => ({
        payload: {
          user_id: callers.owner.id,
          wallet_id: ownerWallet.id,
          provider_id: providerId,
          job_id: crypto.randomUUID(),
          ...H100_X1,
          accepted_hourly_rate: '5.10',
        },
      }),
      expect: HOLDER(201),
    },
    // Without a registry (this harness) a renter's own submit gets as far as placing: 409 JOBS_NEED_A_REGISTRY.
    'POST /api/v1/billing/jobs': {
      request: () => ({
        payload: {
          wallet_id: ownerWallet.id,
          gpu_count: 1,
          max_price_per_gpu_hour: '5',
          spend_cap: '1',
          workload: { command: ['true'], max_runtime_seconds: 60 },
        },
      }),
      expect: { ...RENTERS(409, 403), admin: 403, service: 400 },
    },
    'GET /api/v1/billing/jobs': {
      request: () => ({}),
      expect: RENTERS(200, 200),
    },
    'GET /api/v1/billing/jobs/:jobID': {
      request: async () => ({ url: `/api/v1/billing/jobs/${await ownersJob()}` }),
      expect: RENTERS(200, 404),
    },
    'POST /api/v1/billing/jobs/:jobID/cancel': {
      request: async () => ({ url: `/api/v1/billing/jobs/${await ownersJob()}/cancel` }),
      expect: RENTERS(200, 404),
    },
    'POST /api/v1/billing/end-session': {
      request: async () => ({ payload: { session_id: await ownersSession() } }),
      expect: PARTY(200),
    },
    // Only the renter changes what the renter pays (and admins, services); this session is on demand (without a
    // registry billing takes no bids), so those who may ask are answered 409 SESSION_NOT_INTERRUPTIBLE.
    'POST /api/v1/billing/sessions/:sessionID/bid': {
      request: async () => ({ url: `/api/v1/billing/sessions/${await ownersSession()}/bid`, payload: { bid: '1' } }),
      expect: RENTERS(409, 403),
    },
    'GET /api/v1/billing/current-usage/:sessionID': {
      request: async () => ({ url: `/api/v1/billing/current-usage/${await ownersSession()}` }),
      expect: PARTY(200),
    },
    'GET /api/v1/billing/sessions/:sessionID/workload': {
      request: async () => ({ url: `/api/v1/billing/sessions/${await ownersSession(WORKLOAD)}/workload` }),
      expect: PARTY(200),
    },
    'POST /api/v1/billing/sessions/:sessionID/workload/state': {
      request: async () => ({
        url: `/api/v1/billing/sessions/${await ownersSession(WORKLOAD)}/workload/state`,
        payload: { state: 'preparing', at: new Date().toISOString() },
      }),
      expect: PARTY(200),
    },
    // Without a storage service here, a caller who may ask gets 409 WORKLOAD_FILES_UNAVAILABLE (the daemon's test
    // tools/provider-daemon/test/workload-files.test.ts has the grants themselves, with storage).
    'POST /api/v1/billing/sessions/:sessionID/workload/grants': {
      request: async () => ({
        url: `/api/v1/billing/sessions/${await ownersSession(WORKLOAD)}/workload/grants`,
        payload: { outputs: ['result.bin'] },
      }),
      expect: PARTY(409),
    },
    // Reach: the renter alone (anyone else's 404 hides the session); a workload that has not run yet is 409 here
    // (tools/provider-daemon/test/reach.test.ts opens streams into running ones).
    'GET /api/v1/billing/sessions/:sessionID/exec': {
      request: async () => ({ url: `/api/v1/billing/sessions/${await ownersSession(WORKLOAD)}/exec?command=true` }),
      expect: { owner: 409, other_user: 404, renter: 404, admin: 404, others: 403 },
    },
    'GET /api/v1/billing/sessions/:sessionID/port-forward': {
      request: async () => ({
        url: `/api/v1/billing/sessions/${await ownersSession(WORKLOAD)}/port-forward?port=8888`,
      }),
      expect: { owner: 409, other_user: 404, renter: 404, admin: 404, others: 403 },
    },
    'GET /api/v1/billing/sessions/:sessionID/ssh': {
      request: async () => ({ url: `/api/v1/billing/sessions/${await ownersSession(WORKLOAD)}/ssh` }),
      expect: { owner: 409, other_user: 404, renter: 404, admin: 404, others: 403 },
    },
    ...Object.fromEntries(
      ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].map((method) => [
        `${method} /api/v1/billing/sessions/:sessionID/ports/:port/*`,
        {
          request: async () => ({
            method,
            url: `/api/v1/billing/sessions/${await ownersSession(WORKLOAD)}/ports/8888/api`,
          }),
          expect: { owner: 409, other_user: 404, renter: 404, admin: 404, others: 403 },
        },
      ]),
    ),
    // A browser's link to a port: the renter alone, as the streams (the workload here has not run: 409).
    'POST /api/v1/billing/sessions/:sessionID/port-links': {
      request: async () => ({
        url: `/api/v1/billing/sessions/${await ownersSession(WORKLOAD)}/port-links`,
        payload: { port: 8888 },
      }),
      expect: { owner: 409, other_user: 404, renter: 404, admin: 404, others: 403 },
    },
    // A port host's requests are checked by their grant's cookie, not a token: on any other host, no route for anyone
    // (tools/provider-daemon/test/reach-ports.test.ts has them on port hosts).
    ...Object.fromEntries(
      ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'].map((method) => [
        `${method} /api/v1/billing/port-host/*`,
        { request: () => ({ method, url: '/api/v1/billing/port-host/lab' }), expect: EVERYONE(404), public: true },
      ]),
    ),
    // The platform's SSH host key is public.
    'GET /api/v1/billing/reach/ssh-host-key': { request: () => ({}), expect: EVERYONE(200), public: true },
    // A machine's daemon connection: daemons only; without a registry to ask who owns the machine, 503.
    'GET /api/v1/billing/reach/daemon': {
      request: () => ({ url: `/api/v1/billing/reach/daemon?provider_id=${providerId}` }),
      expect: { daemon: 503, other_daemon: 503, others: 403 },
    },
    'GET /api/v1/billing/reach/dial': {
      request: () => ({ url: `/api/v1/billing/reach/dial?provider_id=${providerId}&ticket=${'t'.repeat(32)}` }),
      expect: { daemon: 503, other_daemon: 503, others: 403 },
    },
    'POST /api/v1/billing/sessions/:sessionID/workload/outputs': {
      request: async () => ({
        url: `/api/v1/billing/sessions/${await ownersSession(WORKLOAD)}/workload/outputs`,
        payload: { files: [{ path: 'result.bin', size: 1 }] },
      }),
      expect: PARTY(409),
    },
    // A renter's own session keeps no checkpoint (a job's does): 409 NO_CHECKPOINT to the parties that may say one.
    'POST /api/v1/billing/sessions/:sessionID/workload/checkpoint': {
      request: async () => ({
        url: `/api/v1/billing/sessions/${await ownersSession(WORKLOAD)}/workload/checkpoint`,
        payload: { size: 1 },
      }),
      expect: PARTY(409),
    },
    'POST /api/v1/billing/usage-update': {
      request: async () => ({ payload: report(await ownersSession()) }),
      expect: PARTY(201),
    },
    // Callers with a reporting role get 200 with one result per report (each 403 when not theirs, below).
    'POST /api/v1/billing/usage-updates': {
      request: async () => ({ payload: { reports: [report(await ownersSession())] } }),
      expect: { ...PARTY(200), other_user: 200, other_daemon: 200 },
    },
    'GET /api/v1/billing/sessions': {
      request: () => ({}),
      expect: { ...PARTY(200), other_user: 200, renter: 200, other_daemon: 200, others: 403 },
    },
    // Session events, scoped to the caller's sessions as the list above.
    'GET /api/v1/billing/events': {
      request: () => ({}),
      expect: { ...PARTY(200), other_user: 200, renter: 200, other_daemon: 200, others: 403 },
    },
    // Everyone with a user's or daemon's role reads their own history (scoped: below).
    'GET /api/v1/billing/history': {
      request: () => ({}),
      expect: { ...PARTY(200), other_user: 200, renter: 200, other_daemon: 200, others: 403 },
    },
    // The storage service (a platform service) and admins report stored bytes; each call a period of its own.
    'POST /api/v1/billing/storage-usage': {
      request: () => {
        const end = Date.UTC(2026, 0, 1) + ++storagePeriods * 3_600_000;
        const period_start = new Date(end - 3_600_000).toISOString();
        return {
          payload: { user_id: callers.owner.id, period_start, period_end: new Date(end).toISOString(), bytes: 1 },
        };
      },
      expect: { admin: 201, service: 201, others: 403 },
    },
    // The scheduler's own client, platform services and admins hold GPUs for a renter; this billing has no registry,
    // so they get as far as the machine (409), everyone else is refused first.
    'POST /api/v1/billing/reservations': {
      request: () => ({
        payload: { user_id: callers.owner.id, provider_id: providerId, gpu_model: 'H100', gpu_count: 1 },
      }),
      expect: { admin: 409, service: 409, scheduler: 409, others: 403 },
    },
    'DELETE /api/v1/billing/reservations/:reservationID': {
      request: () => ({ url: `/api/v1/billing/reservations/${crypto.randomUUID()}` }),
      expect: { admin: 404, service: 404, scheduler: 404, others: 403 },
    },
    // Users read their own storage charges (scoped), with their own token; the privileged anyone's.
    'GET /api/v1/billing/storage-usage': {
      request: () => ({}),
      expect: { owner: 200, other_user: 200, renter: 200, admin: 200, service: 200, others: 403 },
    },
  };
}

const as = (name: CallerName) => callers[name].headers;

describe('access table of billing', () => {
  it('answers every route as the table says, for every kind of caller, and has a rule for every route', async () => {
    const report = await checkAccessTable(h.app, callers, table());
    expect(report).toEqual({ unlisted: [], unknown: [], mismatches: [] });
  });
});

describe('billing ownership beyond the table', () => {
  it('lets a user open their own wallet, never one for someone else, and never name its holder', async () => {
    const user = await h.issuer.user(['renter']);
    const open = (headers: Record<string, string>, body: Record<string, unknown>) =>
      uninjected(h.app)({ method: 'POST', url: '/api/v1/wallet', headers, payload: body });
    const mine = await open(user.headers, { owner_type: 'user', owner_id: user.id, solana_address: address() });
    expect(mine.statusCode).toBe(201);
    expect(mine.json()).toMatchObject({ owner_id: user.id, holder_id: user.id });
    const named = await open(user.headers, {
      owner_type: 'provider',
      owner_id: crypto.randomUUID(),
      holder_id: user.id,
      solana_address: address(),
    });
    expect(named.statusCode).toBe(403);
    // Without a provider registry, billing cannot tell who owns a machine: only admins and services open its wallet.
    const provider = await open(callers.owner.headers, {
      owner_type: 'provider',
      owner_id: crypto.randomUUID(),
      solana_address: address(),
    });
    expect(provider.statusCode).toBe(403);
    expect(provider.json().code).toBe('NOT_PROVIDER_OWNER');
    // The daemon acting for a user does not open wallets for them.
    const daemonUser = crypto.randomUUID();
    const daemon = await h.issuer.client('daemon', daemonUser);
    expect(
      (await open(daemon.headers, { owner_type: 'user', owner_id: daemonUser, solana_address: address() })).statusCode,
    ).toBe(403);
  });

  it("keeps a renter and the provider's owner apart: the renter never reports usage, the owner's daemon does", async () => {
    const renter = await h.issuer.user(['renter']);
    const owner = await h.issuer.user(['provider']);
    const daemon = await h.issuer.client('daemon', owner.id);
    const wallet = await h.fundedWallet('100', 'user', undefined, { ownerId: renter.id });
    const machine = await h.fundedWallet('0', 'provider', undefined, { holderId: owner.id });
    const call = (headers: Record<string, string>, method: 'GET' | 'POST', url: string, payload?: unknown) =>
      uninjected(h.app)({ method, url: `/api/v1${url}`, headers, ...(payload ? { payload } : {}) });
    const body = {
      user_id: renter.id,
      wallet_id: wallet.id,
      provider_id: machine.ownerId,
      job_id: crypto.randomUUID(),
      ...H100_X1,
      accepted_hourly_rate: '5.10',
    };
    // The provider's owner cannot start a session on the renter's wallet; the renter can.
    expect((await call(owner.headers, 'POST', '/billing/start-session', body)).statusCode).toBe(403);
    const started = await call(renter.headers, 'POST', '/billing/start-session', body);
    expect(started.statusCode).toBe(201);
    const sessionId = started.json().session.id as string;
    expect(started.json().session).toMatchObject({ provider_id: machine.ownerId });

    const byRenter = await call(renter.headers, 'POST', '/billing/usage-update', report(sessionId));
    expect(byRenter.statusCode).toBe(403);
    expect(byRenter.json().code).toBe('ROLE_REQUIRED');
    // A renter who is also a provider still reports only for machines they own.
    const otherProvider = await h.issuer.user(['provider', 'renter']);
    const byOther = await call(otherProvider.headers, 'POST', '/billing/usage-update', report(sessionId));
    expect(byOther.statusCode).toBe(403);
    expect(byOther.json().code).toBe('NOT_SESSION_PROVIDER');
    const batch = await call(otherProvider.headers, 'POST', '/billing/usage-updates', {
      reports: [report(sessionId)],
    });
    expect(batch.json().results[0]).toMatchObject({ status: 403, problem: { code: 'NOT_SESSION_PROVIDER' } });
    const records = () => h.db.selectFrom('usage_records').select('id').where('session_id', '=', sessionId).execute();
    expect(await records()).toHaveLength(0);

    expect((await call(daemon.headers, 'POST', '/billing/usage-update', report(sessionId))).statusCode).toBe(201);
    // The daemon finds the running sessions on its owner's machine; another provider does not see them.
    const running = async (headers: Record<string, string>) =>
      (
        (await call(headers, 'GET', `/billing/sessions?provider_id=${machine.ownerId}&status=running`)).json() as {
          id: string;
        }[]
      ).map((x) => x.id);
    expect(await running(daemon.headers)).toEqual([sessionId]);
    expect(await running(renter.headers)).toEqual([sessionId]);
    expect(await running(otherProvider.headers)).toEqual([]);
    // Bad filters are a 400 problem naming the parameter.
    for (const query of ['status=bogus', 'status=running,done', 'provider_id=not-a-uuid', 'limit=0', 'cursor=x']) {
      const bad = await call(daemon.headers, 'GET', `/billing/sessions?${query}`);
      expect(bad.statusCode, query).toBe(400);
      expect(bad.headers['content-type']).toMatch(/^application\/problem\+json/);
    }
    expect(await records()).toHaveLength(1);
    // Both parties read it; the renter ends it.
    expect((await call(daemon.headers, 'GET', `/billing/current-usage/${sessionId}`)).statusCode).toBe(200);
    expect((await call(renter.headers, 'GET', `/billing/current-usage/${sessionId}`)).statusCode).toBe(200);
    expect((await call(otherProvider.headers, 'GET', `/billing/current-usage/${sessionId}`)).statusCode).toBe(403);
    expect((await call(renter.headers, 'POST', '/billing/end-session', { session_id: sessionId })).statusCode).toBe(
      200,
    );

    // History: each party sees the session, nobody else does, whatever filter they send.
    const ids = async (headers: Record<string, string>, query = '') =>
      ((await call(headers, 'GET', `/billing/history?limit=200${query}`)).json() as { session_id: string }[]).map(
        (r) => r.session_id,
      );
    expect(await ids(renter.headers)).toEqual([sessionId]);
    expect(await ids(owner.headers)).toEqual([sessionId]);
    expect(await ids(daemon.headers)).toEqual([sessionId]);
    expect(await ids(otherProvider.headers, `&user_id=${renter.id}`)).toEqual([]);
    expect(await ids(as('admin'), `&user_id=${renter.id}`)).toEqual([sessionId]);
  });

  it("never lets a daemon act on its owner's rentals, and shows the renter's balance to the renter only", async () => {
    const renter = await h.issuer.user(['renter', 'provider']);
    const rentersDaemon = await h.issuer.client('daemon', renter.id);
    const owner = await h.issuer.user(['provider']);
    const wallet = await h.fundedWallet('100', 'user', undefined, { ownerId: renter.id });
    const machine = await h.fundedWallet('0', 'provider', undefined, { holderId: owner.id });
    const call = (headers: Record<string, string>, method: 'GET' | 'POST', url: string, payload?: unknown) =>
      uninjected(h.app)({ method, url: `/api/v1${url}`, headers, ...(payload ? { payload } : {}) });
    const started = await call(renter.headers, 'POST', '/billing/start-session', {
      user_id: renter.id,
      wallet_id: wallet.id,
      provider_id: machine.ownerId,
      job_id: crypto.randomUUID(),
      ...H100_X1,
      accepted_hourly_rate: '5.10',
    });
    const sessionId = started.json().session.id as string;
    // The renter's own daemon (a machine credential on the renter's GPU host) cannot end or read the rental.
    expect(
      (await call(rentersDaemon.headers, 'POST', '/billing/end-session', { session_id: sessionId })).statusCode,
    ).toBe(403);
    expect((await call(rentersDaemon.headers, 'GET', `/billing/current-usage/${sessionId}`)).statusCode).toBe(403);
    const listed = await call(rentersDaemon.headers, 'GET', '/billing/sessions');
    expect(listed.json().map((s: { id: string }) => s.id)).not.toContain(sessionId);
    // The renter sees their balance; the provider's owner sees the session without it.
    const mine = (await call(renter.headers, 'GET', `/billing/current-usage/${sessionId}`)).json();
    expect(mine.available_balance).toBe('94.900000');
    const theirs = (await call(owner.headers, 'GET', `/billing/current-usage/${sessionId}`)).json();
    expect(theirs.available_balance).toBeNull();
    expect(theirs.hold_amount).toBe(mine.hold_amount);
  });

  it("records the machine's side ending a rental as provider_ended, a reason nobody may claim", async () => {
    const renter = await h.issuer.user(['renter']);
    const owner = await h.issuer.user(['provider']);
    const daemon = await h.issuer.client('daemon', owner.id);
    const call = (headers: Record<string, string>, method: 'GET' | 'POST', url: string, payload?: unknown) =>
      uninjected(h.app)({ method, url: `/api/v1${url}`, headers, ...(payload ? { payload } : {}) });
    const machine = await h.fundedWallet('0', 'provider', undefined, { holderId: owner.id });
    const wallets = new Map<string, string>();
    const rent = async (user: { id: string; headers: Record<string, string> }) => {
      if (!wallets.has(user.id)) {
        wallets.set(user.id, (await h.fundedWallet('100', 'user', undefined, { ownerId: user.id })).id);
      }
      const wallet = { id: wallets.get(user.id)! };
      const started = await call(user.headers, 'POST', '/billing/start-session', {
        user_id: user.id,
        wallet_id: wallet.id,
        provider_id: machine.ownerId,
        job_id: crypto.randomUUID(),
        ...H100_X1,
        accepted_hourly_rate: '5.10',
      });
      expect(started.statusCode, started.body).toBe(201);
      return started.json().session.id as string;
    };
    const endAs = (headers: Record<string, string>, sessionId: string, reason?: string) =>
      call(headers, 'POST', '/billing/end-session', { session_id: sessionId, ...(reason ? { reason } : {}) });

    // The renter may not write it against the machine, however it is spelled.
    const first = await rent(renter);
    for (const reason of ['provider_ended', 'Provider_Ended', ' PROVIDER_ENDED ']) {
      const res = await endAs(renter.headers, first, reason);
      expect(res.statusCode, reason).toBe(400);
      expect(res.json().errors[0].path).toBe('body.reason');
    }
    // The machine's owner (or its daemon) ends it: provider_ended, whatever reason it gave.
    const byOwner = await endAs(owner.headers, first, 'renter asked');
    expect(byOwner.statusCode).toBe(200);
    expect(byOwner.json().billing_record.end_reason).toBe('provider_ended');
    const second = await rent(renter);
    expect((await endAs(daemon.headers, second)).json().billing_record.end_reason).toBe('provider_ended');
    // An owner renting their own machine ends it as its renter.
    const own = await rent(owner);
    expect((await endAs(owner.headers, own, 'done')).json().billing_record.end_reason).toBe('done');
  });

  it('sends an admin’s or a service’s withdrawal only to the wallet’s own address, and a provider wallet only through payouts', async () => {
    const withdraw = (headers: Record<string, string>, payload: object) =>
      uninjected(h.app)({ method: 'POST', url: `/api/v1/wallet/${ownerWallet.id}/withdraw`, headers, payload });
    for (const role of ['service', 'admin'] as const) {
      const elsewhere = await withdraw(as(role), { amount: '1', destination: address() });
      expect(elsewhere.statusCode, role).toBe(403);
      expect(elsewhere.json().code).toBe('DESTINATION_NOT_ALLOWED');
      // To its own address it goes on (to the chain, which this harness has not).
      expect((await withdraw(as(role), { amount: '1' })).statusCode, role).toBe(503);
      // Naming the wallet's own address is no other destination.
      expect((await withdraw(as(role), { amount: '1', destination: ownerWallet.solanaAddress })).statusCode).toBe(503);
    }
    // Its holder names any destination (past the check: the chain answers).
    expect((await withdraw(as('owner'), { amount: '1', destination: address() })).statusCode).toBe(503);
    const fromProvider = await uninjected(h.app)({
      method: 'POST',
      url: `/api/v1/wallet/${providerWallet.id}/withdraw`,
      headers: as('owner'),
      payload: { amount: '1' },
    });
    expect(fromProvider.statusCode).toBe(409);
    expect(fromProvider.json().code).toBe('USE_PROVIDER_PAYOUT');
  });

  it('never lets a daemon move its owner’s money, and keeps a payout to the provider wallet’s holder', async () => {
    const daemon = callers.daemon.headers;
    const withdraw = await uninjected(h.app)({
      method: 'POST',
      url: `/api/v1/wallet/${ownerWallet.id}/withdraw`,
      headers: daemon,
      payload: { amount: '1' },
    });
    expect(withdraw.statusCode).toBe(403);
    const payout = await uninjected(h.app)({
      method: 'POST',
      url: `/api/v1/provider/${providerId}/payout`,
      headers: daemon,
      payload: { amount: '10' },
    });
    expect(payout.statusCode).toBe(403);
    const stranger = await uninjected(h.app)({
      method: 'POST',
      url: `/api/v1/provider/${providerId}/payout`,
      headers: as('other_user'),
      payload: { amount: '10' },
    });
    expect(stranger.statusCode).toBe(403);
    expect(stranger.json().code).toBe('NOT_PROVIDER_OWNER');
    // An admin or a service pays the provider wallet's own address only; its owner any.
    const payoutAs = (name: CallerName, destination: string) =>
      uninjected(h.app)({
        method: 'POST',
        url: `/api/v1/provider/${providerId}/payout`,
        headers: as(name),
        payload: { amount: '10', destination },
      });
    for (const name of ['admin', 'service'] as const) {
      const elsewhere = await payoutAs(name, address());
      expect(elsewhere.statusCode, name).toBe(403);
      expect(elsewhere.json().code).toBe('DESTINATION_NOT_ALLOWED');
    }
    expect((await payoutAs('owner', address())).statusCode).toBe(503);
    expect(await h.balanceOf(providerWallet.id)).toMatchObject({ pending: '0.000000' });
  });

  it("answers 403 on someone else's machine before anything tells whether it has a provider wallet", async () => {
    // One machine with a wallet (the owner's), one without: an outsider must not tell them apart.
    const bare = crypto.randomUUID();
    const routes: [method: 'GET' | 'POST' | 'PUT', path: string, payload?: object][] = [
      ['POST', 'payout', { amount: '10' }],
      ['POST', 'payout', {}],
      ['GET', 'earnings'],
      ['GET', 'payout-settings'],
      ['PUT', 'payout-settings', { auto_payout: false }],
      ['PUT', 'rates', { base_rates: {} }],
    ];
    for (const [method, path, payload] of routes) {
      for (const name of ['other_user', 'other_daemon', 'renter'] as const) {
        const answers = [];
        for (const machine of [providerId, bare]) {
          const res = await uninjected(h.app)({
            method,
            url: `/api/v1/provider/${machine}/${path}`,
            headers: as(name),
            ...(payload ? { payload } : {}),
          });
          answers.push({ status: res.statusCode, code: res.json().code });
        }
        const label = `${name} ${method} ${path}`;
        expect(answers[0]!.status, label).toBe(403);
        expect(answers[1], label).toEqual(answers[0]);
      }
    }
    // The privileged learn that it has no wallet (they may act on any machine).
    const missing = await h.app.inject({ method: 'GET', url: `/api/v1/provider/${bare}/earnings` });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().code).toBe('WALLET_NOT_FOUND');
    expect(await h.balanceOf(providerWallet.id)).toMatchObject({ pending: '0.000000' });
  });

  it('scopes an Idempotency-Key to its caller: another caller with the same key and body never gets the answer', async () => {
    const key = `k-${crypto.randomUUID()}`;
    const body = {
      user_id: callers.owner.id,
      wallet_id: ownerWallet.id,
      provider_id: providerId,
      job_id: crypto.randomUUID(),
      ...H100_X1,
      accepted_hourly_rate: '5.10',
    };
    const post = (name: CallerName) =>
      uninjected(h.app)({
        method: 'POST',
        url: '/api/v1/billing/start-session',
        headers: { ...as(name), 'idempotency-key': key },
        payload: body,
      });
    const first = await post('owner');
    expect(first.statusCode).toBe(201);
    const replay = await post('owner');
    expect(replay.statusCode).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.json().session.id).toBe(first.json().session.id);
    // Someone else replaying the owner's key and body: refused by the rule, not handed the owner's answer.
    const other = await post('other_user');
    expect(other.statusCode).toBe(403);
    expect(other.headers['idempotent-replayed']).toBeUndefined();
  });
});
