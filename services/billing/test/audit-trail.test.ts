/**
 * Billing's audit trail: every answer of a money-out route and of a deposit, allowed or refused, is appended with who,
 * from where, in which request, what and the outcome, and every automatic payout with what was paid where, each after
 * a `requested` event written before anything is done (so a crash before the outcome's event leaves a trace); admins
 * read it; the database refuses to change it. Against the local chain.
 */

import { readFile } from 'node:fs/promises';
import { lockWaiters } from '@gpu/common/testing';
import { Keypair } from '@solana/web3.js';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { settleAutoPayouts } from '../src/domain/wallets/auto-payout.ts';
import { type Localnet, setupLocalnet } from './support/localnet.ts';
import { type BillingHarness, setupBilling } from './support/setup.ts';

let h: BillingHarness;
let L: Localnet;

/** The trail's events matching `query`, once at least `n` are there (each is written once its answer is sent). */
async function eventually(query: string, n: number, harness: BillingHarness = h) {
  const read = async () => (await harness.app.inject({ url: `/api/v1/billing/audit?${query}` })).json();
  let events = await read();
  // Up to 20 s of polling (it stops once they are there): a busy machine can be slow to write them, or to answer at
  // all (a harness with a short request time limit answers a problem then, and is asked again).
  for (let i = 0; i < 400 && (!Array.isArray(events) || events.length < n); i++) {
    await new Promise((r) => setTimeout(r, 50));
    events = await read();
  }
  return events;
}

interface AuditEvent {
  id: string;
  action: string;
  outcome: string;
  actor_id: string | null;
  target: string | null;
  request_id: string | null;
  details: Record<string, unknown>;
}

/**
 * The outcomes among `events` (in the trail's order), each checked to name the `requested` event its request wrote
 * before its handler ran (same action, actor, target and request), and every `requested` event there named by one.
 */
function outcomesOf(events: AuditEvent[]): AuditEvent[] {
  const requested = new Map(events.filter((e) => e.outcome === 'requested').map((e) => [e.id, e]));
  const outcomes = events.filter((e) => e.outcome !== 'requested');
  for (const o of outcomes) {
    const asked = requested.get(o.details.requested as string);
    expect(asked, `the requested event of ${JSON.stringify(o)}`).toMatchObject({
      action: o.action,
      actor_id: o.actor_id,
      target: o.target,
      request_id: o.request_id,
    });
  }
  const named = new Set(outcomes.map((o) => o.details.requested));
  expect([...requested.keys()].filter((id) => !named.has(id))).toEqual([]);
  return outcomes;
}

/**
 * Runs `act` while the database refuses to append `target`'s events that meet `when` (a condition on `NEW`), as the
 * test server's superuser can make it; its result once every event of its answer is appended or refused.
 */
async function refusingEvents<T>(target: string, when: string, act: () => Promise<T>): Promise<T> {
  await sql`
    CREATE FUNCTION refuse_events() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.target = ${sql.lit(target)} AND ${sql.raw(when)} THEN RAISE EXCEPTION 'refused by the test'; END IF;
      RETURN NEW;
    END $$`.execute(h.db);
  await sql`CREATE TRIGGER a_refuse_events BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION refuse_events()`.execute(
    h.db,
  );
  try {
    const result = await act();
    await h.app.auditAppended!();
    return result;
  } finally {
    await sql`DROP TRIGGER a_refuse_events ON audit_events`.execute(h.db);
    await sql`DROP FUNCTION refuse_events()`.execute(h.db);
  }
}

/** The `requested` events that no later event names, by the query billing's README gives operators (run as written). */
async function unanswered(harness: BillingHarness = h) {
  const readme = await readFile(new URL('../README.md', import.meta.url), 'utf8');
  const query = /an operator lists them with\s+```sql\n([^`]+)```/.exec(readme)?.[1];
  expect(query, 'the query in README.md, "The audit trail"').toBeDefined();
  const { rows } = await sql<{ id: string }>`${sql.raw(query!.trim().replace(/;$/, ''))}`.execute(harness.db);
  return rows;
}

beforeAll(async () => {
  L = await setupLocalnet(6);
  h = await setupBilling({ chain: L.chain });
});
afterAll(() => h?.close());

describe('the audit trail of money going out', () => {
  it('records a withdrawal and a refused one with who, from where, what and the outcome; admins read it', async () => {
    const renter = await h.issuer.user(['renter']);
    const w = await h.fundedWallet('20', 'user', Keypair.generate().publicKey.toBase58(), { ownerId: renter.id });
    const sent = await h.app.inject({
      method: 'POST',
      url: `/api/v1/wallet/${w.id}/withdraw`,
      headers: { ...renter.headers, 'x-request-id': 'req-withdraw-1' },
      remoteAddress: '198.51.100.20',
      payload: { amount: '5' },
    });
    expect(sent.statusCode, sent.body).toBe(200);
    const stranger = await h.issuer.user(['renter']);
    const refused = await h.app.inject({
      method: 'POST',
      url: `/api/v1/wallet/${w.id}/withdraw`,
      headers: stranger.headers,
      payload: { amount: '5', destination: Keypair.generate().publicKey.toBase58() },
    });
    expect(refused.statusCode).toBe(403);

    // Each request is written before its handler acts, and its outcome once its answer is sent: read until the four
    // are there.
    const read = () => h.app.inject({ url: `/api/v1/billing/audit?action=withdrawal&target=wallet:${w.id}` });
    let trail = await read();
    for (let i = 0; i < 400 && trail.json().length < 4; i++) {
      await new Promise((r) => setTimeout(r, 50));
      trail = await read();
    }
    expect(trail.statusCode, trail.body).toBe(200);
    const asked = trail.json().find((e: AuditEvent) => e.request_id === 'req-withdraw-1' && e.outcome === 'requested');
    // What was asked, by whom, before anything moved.
    expect(asked).toMatchObject({ actor_id: renter.id, address: '198.51.100.20', details: { amount: '5' } });
    expect(outcomesOf(trail.json())).toMatchObject([
      {
        outcome: 'succeeded',
        actor_id: renter.id,
        actor_kind: 'user',
        address: '198.51.100.20',
        request_id: 'req-withdraw-1',
        details: { status_code: 200, amount: '5', id: sent.json().id, status: 'confirmed' },
      },
      { outcome: 'refused', actor_id: stranger.id, details: { status_code: 403, code: refused.json().code } },
    ]);
    const asRenter = await h.app.inject({ url: '/api/v1/billing/audit', headers: renter.headers });
    expect(asRenter.statusCode).toBe(403);

    // A machine client acting for the renter (a daemon of theirs) may not take money out: refused, and named with
    // the user it acts for.
    const daemon = await h.issuer.client('daemon', renter.id);
    const byDaemon = await h.app.inject({
      method: 'POST',
      url: `/api/v1/wallet/${w.id}/withdraw`,
      headers: daemon.headers,
      payload: { amount: '1' },
    });
    expect(byDaemon.statusCode).toBe(403);
    const actedFor = () =>
      h.app.inject({ url: `/api/v1/billing/audit?action=withdrawal&actor_id=${encodeURIComponent(daemon.id)}` });
    let acted = await actedFor();
    for (let i = 0; i < 400 && acted.json().length < 1; i++) {
      await new Promise((r) => setTimeout(r, 50));
      acted = await actedFor();
    }
    expect(acted.json()).toMatchObject([
      { outcome: 'refused', actor_kind: 'client', details: { status_code: 403, acting_for: renter.id } },
    ]);
    // Refused by the access check: its handler was never reached, so nothing was requested.
    expect(acted.json()[0].details.requested).toBeUndefined();
  });

  it('records a withdrawal whose client hung up while it was sent, once it is confirmed', async () => {
    // The chain holds the transfer until the client has gone: the money still moves, and so must the record of it.
    const { promise: atSend, resolve: sending } = Promise.withResolvers<void>();
    const { promise: released, resolve: release } = Promise.withResolvers<void>();
    const held = Object.create(L.chain) as typeof L.chain;
    held.sendAndConfirm = async (prepared) => {
      sending();
      await released;
      return L.chain.sendAndConfirm(prepared);
    };
    const harness = await setupBilling({ chain: held });
    try {
      const url = await harness.app.listen({ port: 0, host: '127.0.0.1' });
      const renter = await harness.issuer.user(['renter']);
      const w = await harness.fundedWallet('20', 'user', Keypair.generate().publicKey.toBase58(), {
        ownerId: renter.id,
      });
      const client = new AbortController();
      const asked = fetch(`${url}/api/v1/wallet/${w.id}/withdraw`, {
        method: 'POST',
        headers: { ...renter.headers, 'content-type': 'application/json', 'x-request-id': 'req-hung-up' },
        body: JSON.stringify({ amount: '5' }),
        signal: client.signal,
      });
      await atSend;
      client.abort();
      await expect(asked).rejects.toThrow();
      release();
      const events = await eventually(`action=withdrawal&target=wallet:${w.id}`, 2, harness);
      expect(outcomesOf(events)).toMatchObject([
        {
          outcome: 'succeeded',
          actor_id: renter.id,
          request_id: 'req-hung-up',
          details: { status_code: 200, amount: '5', status: 'confirmed' },
        },
      ]);
      expect(await harness.balanceOf(w.id)).toMatchObject({ available: '15.000000' });
    } finally {
      release();
      await harness.close();
    }
  });

  it('records deposits, and automatic payouts by the service itself, as withdrawals are', async () => {
    const renter = await h.issuer.user(['renter']);
    const kp = await L.user(30n);
    const w = await h.fundedWallet('0', 'user', kp.publicKey.toBase58(), { ownerId: renter.id });
    await h.proveAddress(w.id, kp, renter.headers);
    const signature = await L.transfer(kp, L.treasury.publicKey, 12n * L.unit);
    const deposit = () =>
      h.app.inject({
        method: 'POST',
        url: `/api/v1/wallet/${w.id}/deposit`,
        headers: { ...renter.headers, 'x-request-id': 'req-deposit-1' },
        remoteAddress: '198.51.100.30',
        payload: { signature },
      });
    const credited = await deposit();
    expect(credited.statusCode, credited.body).toBe(201);
    expect((await deposit()).statusCode).toBe(409);
    // Each answer's event is written as it is sent: two requests in a row may land in either order.
    const deposits = outcomesOf(await eventually(`action=deposit&target=wallet:${w.id}`, 4)).sort(
      (a: { outcome: string }, b: { outcome: string }) =>
        a.outcome === 'succeeded' ? -1 : b.outcome === 'succeeded' ? 1 : 0,
    );
    expect(deposits).toMatchObject([
      {
        outcome: 'succeeded',
        actor_id: renter.id,
        address: '198.51.100.30',
        request_id: 'req-deposit-1',
        details: { status_code: 201, signature, id: credited.json().id, status: 'confirmed' },
      },
      { outcome: 'refused', actor_id: renter.id, details: { status_code: 409, code: 'DEPOSIT_ALREADY_CREDITED' } },
    ]);

    // A provider's earnings paid out automatically: by no one but the service, with what was paid and where.
    const machine = crypto.randomUUID();
    const destination = Keypair.generate().publicKey.toBase58();
    const provider = await h.fundedWallet('15', 'provider', destination, { ownerId: machine });
    const setting = await h.app.inject({
      method: 'PUT',
      url: `/api/v1/provider/${machine}/payout-settings`,
      payload: { auto_payout: true },
    });
    expect(setting.statusCode, setting.body).toBe(200);
    await settleAutoPayouts(h.ctx);
    const payouts = await eventually(`action=payout&target=provider:${machine}`, 2);
    const [paid] = await h.db.selectFrom('transactions').select('id').where('wallet_id', '=', provider.id).execute();
    // The request, in the debit's own transaction (with the transaction it made), then its outcome naming it.
    expect(payouts).toMatchObject([
      { outcome: 'requested', actor_id: null, details: { automatic: true, id: paid!.id, amount: '15.000000' } },
      {
        outcome: 'succeeded',
        actor_id: null,
        details: {
          requested: payouts[0].id,
          automatic: true,
          wallet_id: provider.id,
          amount: '15.000000',
          destination,
          status: 'confirmed',
        },
      },
    ]);
    expect(await L.chain.tokenBalance(destination)).toBe('15');
  });

  it('keeps the event of an answer sent while the service stops: its close waits for the append', async () => {
    const renter = await h.issuer.user(['renter']);
    const w = await h.fundedWallet('20', 'user', Keypair.generate().publicKey.toBase58(), { ownerId: renter.id });
    // A machine client of the renter's, which the access check refuses before any handler (nothing is requested).
    const daemon = await h.issuer.client('daemon', renter.id);
    // The chain's head held: the append of the refused withdrawal's event waits for it.
    const appended = await h.db.transaction().execute(async (trx) => {
      await sql`SELECT 1 FROM audit_chain FOR UPDATE`.execute(trx);
      const refused = await h.app.inject({
        method: 'POST',
        url: `/api/v1/wallet/${w.id}/withdraw`,
        headers: daemon.headers,
        payload: { amount: '5', destination: Keypair.generate().publicKey.toBase58() },
      });
      expect(refused.statusCode).toBe(403);
      await lockWaiters(h.db, 1);
      let done = false;
      const settled = h.app.auditAppended!().then(() => {
        done = true;
      });
      await new Promise((r) => setTimeout(r, 200));
      expect(done).toBe(false);
      return { settled };
    });
    await appended.settled;
    const events = await h.db
      .selectFrom('audit_events')
      .select(['action', 'outcome'])
      .where('target', '=', `wallet:${w.id}`)
      .execute();
    expect(events).toEqual([{ action: 'withdrawal', outcome: 'refused' }]);
  });

  it('records what a request answered 503 REQUEST_TIMEOUT did after all, once its handler is done', async () => {
    const slow = await setupBilling({ chain: L.chain, config: { request_timeout: '1s' } });
    try {
      const machine = crypto.randomUUID();
      const wallet = await slow.fundedWallet('0', 'provider', undefined, { ownerId: machine });
      await slow.db.transaction().execute(async (trx) => {
        // The wallet's row held: the change waits for it past the request's time limit.
        await sql`SELECT 1 FROM wallets WHERE id = ${wallet.id} FOR UPDATE`.execute(trx);
        const answer = await slow.app.inject({
          method: 'PUT',
          url: `/api/v1/provider/${machine}/payout-settings`,
          headers: { 'x-request-id': 'req-timed-out' },
          payload: { auto_payout: false },
        });
        expect(answer.statusCode, answer.body).toBe(503);
        expect(answer.json().code).toBe('REQUEST_TIMEOUT');
        await lockWaiters(slow.db, 1);
      });
      // Let go, the change is made: the trail says so beside the answer the caller had.
      // The two are appended side by side (the 503's as its response closes): either may come first in the trail.
      const failedFirst = <E extends { outcome: string }>(events: E[]) =>
        [...events].sort((a, b) => Number(b.outcome === 'failed') - Number(a.outcome === 'failed'));
      const events = failedFirst(
        outcomesOf(await eventually(`action=payout_settings_changed&target=provider:${machine}`, 3, slow)),
      );
      expect(events).toMatchObject([
        { outcome: 'failed', request_id: 'req-timed-out', details: { status_code: 503, code: 'REQUEST_TIMEOUT' } },
        { outcome: 'succeeded', request_id: 'req-timed-out', details: { after_timeout: true, auto_payout: false } },
      ]);
      expect(events).toHaveLength(2);
      // Both name the one request.
      expect(events[0]!.details.requested).toBe(events[1]!.details.requested);

      // A withdrawal (its answer sent by the idempotent path, not returned) held past the limit: its money leaves
      // after the 503, and the trail has the transaction it made.
      const renter = await slow.issuer.user(['renter']);
      const w = await slow.fundedWallet('20', 'user', Keypair.generate().publicKey.toBase58(), { ownerId: renter.id });
      await slow.db.transaction().execute(async (trx) => {
        await sql`LOCK TABLE transactions IN EXCLUSIVE MODE`.execute(trx);
        const answer = await slow.app.inject({
          method: 'POST',
          url: `/api/v1/wallet/${w.id}/withdraw`,
          headers: { ...renter.headers, 'x-request-id': 'req-withdraw-timed-out' },
          payload: { amount: '5' },
        });
        expect(answer.statusCode, answer.body).toBe(503);
        await lockWaiters(slow.db, 1);
      });
      const withdrawals = failedFirst(outcomesOf(await eventually(`action=withdrawal&target=wallet:${w.id}`, 3, slow)));
      const [made] = await slow.db
        .selectFrom('transactions')
        .select(['id'])
        .where('wallet_id', '=', w.id)
        .where('type', '=', 'withdrawal')
        .execute();
      expect(made).toBeDefined();
      expect(withdrawals).toMatchObject([
        { outcome: 'failed', details: { status_code: 503, code: 'REQUEST_TIMEOUT' } },
        {
          outcome: 'succeeded',
          actor_id: renter.id,
          request_id: 'req-withdraw-timed-out',
          details: { after_timeout: true, status_code: 200, amount: '5', id: made!.id, status: 'confirmed' },
        },
      ]);
    } finally {
      await slow.close();
    }
  });

  it('keeps a withdrawal whose outcome was never appended: its request was in the trail before money moved', async () => {
    const renter = await h.issuer.user(['renter']);
    const w = await h.fundedWallet('20', 'user', Keypair.generate().publicKey.toBase58(), { ownerId: renter.id });
    // The database refuses this wallet's outcome events, as a service that died once the money had moved would never
    // have written them.
    const sent = await refusingEvents(`wallet:${w.id}`, "NEW.outcome <> 'requested'", () =>
      h.app.inject({
        method: 'POST',
        url: `/api/v1/wallet/${w.id}/withdraw`,
        headers: { ...renter.headers, 'x-request-id': 'req-outcome-lost' },
        payload: { amount: '5' },
      }),
    );
    expect(sent.statusCode, sent.body).toBe(200);
    expect(await h.balanceOf(w.id)).toMatchObject({ available: '15.000000' });
    const events = await h.db.selectFrom('audit_events').selectAll().where('target', '=', `wallet:${w.id}`).execute();
    expect(events).toMatchObject([
      { outcome: 'requested', actor_id: renter.id, request_id: 'req-outcome-lost', details: { amount: '5' } },
    ]);
    // Found as the README says an operator finds them: a request that no later event names.
    expect(await unanswered()).toContainEqual(expect.objectContaining({ id: events[0]!.id }));
  });

  it('names the request in the answer of one that timed out while its request was being appended', async () => {
    const slow = await setupBilling({ chain: L.chain, config: { request_timeout: '1s' } });
    try {
      const renter = await slow.issuer.user(['renter']);
      const w = await slow.fundedWallet('20', 'user', Keypair.generate().publicKey.toBase58(), { ownerId: renter.id });
      // The trail's lock held past the request's time limit: its `requested` event waits for it, and so its handler.
      await slow.db.transaction().execute(async (trx) => {
        await sql`SELECT 1 FROM audit_chain FOR UPDATE`.execute(trx);
        const answer = await slow.app.inject({
          method: 'POST',
          url: `/api/v1/wallet/${w.id}/withdraw`,
          headers: { ...renter.headers, 'x-request-id': 'req-timed-out-appending' },
          payload: { amount: '5' },
        });
        expect(answer.statusCode, answer.body).toBe(503);
        expect(answer.json().code).toBe('REQUEST_TIMEOUT');
      });
      await slow.app.auditAppended!();
      // The handler never ran (the answer was sent), and the timeout's event names the request: nothing is left for
      // an operator to chase.
      expect(await slow.balanceOf(w.id)).toMatchObject({ available: '20.000000' });
      const events = await eventually(`target=wallet:${w.id}`, 2, slow);
      expect(outcomesOf(events)).toMatchObject([
        { outcome: 'failed', request_id: 'req-timed-out-appending', details: { code: 'REQUEST_TIMEOUT' } },
      ]);
      expect(await unanswered(slow)).toEqual([]);
    } finally {
      await slow.close();
    }
  });

  it('writes an automatic payout whose debit did not commit nowhere, and names no request in its failure', async () => {
    const machine = crypto.randomUUID();
    const provider = await h.fundedWallet('15', 'provider', Keypair.generate().publicKey.toBase58(), {
      ownerId: machine,
    });
    const setting = await h.app.inject({
      method: 'PUT',
      url: `/api/v1/provider/${machine}/payout-settings`,
      payload: { auto_payout: true },
    });
    expect(setting.statusCode, setting.body).toBe(200);
    // The debit's transaction refused at its commit (a deferred check), after its `requested` event was appended in it.
    await sql`
      CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'refused at commit by the test'; END $$`.execute(h.db);
    await sql`
      CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT ON transactions DEFERRABLE INITIALLY DEFERRED
      FOR EACH ROW WHEN (NEW.wallet_id = ${sql.lit(provider.id)}) EXECUTE FUNCTION refuse_commit()`.execute(h.db);
    try {
      await settleAutoPayouts(h.ctx);
    } finally {
      await sql`DROP TRIGGER refuse_commit ON transactions`.execute(h.db);
      await sql`DROP FUNCTION refuse_commit()`.execute(h.db);
    }
    expect(await h.balanceOf(provider.id)).toMatchObject({ available: '15.000000', pending: '0.000000' });
    const events = await eventually(`action=payout&target=provider:${machine}`, 1);
    expect(events).toMatchObject([{ outcome: 'failed', details: { automatic: true } }]);
    expect(events[0].details.requested).toBeUndefined();
  });

  it('acts on nothing the trail did not take: a request whose event cannot be appended moves no money', async () => {
    const renter = await h.issuer.user(['renter']);
    const w = await h.fundedWallet('20', 'user', Keypair.generate().publicKey.toBase58(), { ownerId: renter.id });
    const sent = await refusingEvents(`wallet:${w.id}`, "NEW.outcome = 'requested'", () =>
      h.app.inject({
        method: 'POST',
        url: `/api/v1/wallet/${w.id}/withdraw`,
        headers: renter.headers,
        payload: { amount: '5' },
      }),
    );
    expect(sent.statusCode).toBe(500);
    expect(sent.json()).toMatchObject({ code: 'INTERNAL_ERROR' });
    expect(await h.balanceOf(w.id)).toMatchObject({ available: '20.000000' });
    expect(await h.db.selectFrom('transactions').select('id').where('wallet_id', '=', w.id).execute()).toEqual([]);
    // Its answer is in the trail, with no request to name.
    const events = await eventually(`target=wallet:${w.id}`, 1);
    expect(events).toMatchObject([{ outcome: 'failed', actor_id: renter.id, details: { status_code: 500 } }]);
    expect(events[0].details.requested).toBeUndefined();
  });

  it('keeps no field of a body its schema refused, and records any refused path as text it can store', async () => {
    const renter = await h.issuer.user(['renter']);
    const w = await h.fundedWallet('20', 'user', Keypair.generate().publicKey.toBase58(), { ownerId: renter.id });
    // A body the schema refuses (an amount of 900,000 characters): its text is nobody's to keep, for 400 days.
    const huge = await h.app.inject({
      method: 'POST',
      url: `/api/v1/wallet/${w.id}/withdraw`,
      headers: { ...renter.headers, 'x-request-id': 'req-huge-amount' },
      payload: { amount: '9'.repeat(900_000) },
    });
    expect(huge.statusCode).toBe(400);
    // A path no wallet has, with a NUL (PostgreSQL stores none), and a long one.
    const odd = await h.app.inject({
      method: 'POST',
      url: '/api/v1/wallet/a%00b/withdraw',
      headers: { ...renter.headers, 'x-request-id': 'req-odd-path' },
      payload: { amount: '1' },
    });
    expect(odd.statusCode).toBe(400);
    const long = await h.app.inject({
      method: 'POST',
      url: `/api/v1/wallet/${'w'.repeat(1500)}/withdraw`,
      headers: { ...renter.headers, 'x-request-id': 'req-long-path' },
      payload: { amount: '1' },
    });
    expect(long.statusCode).toBe(400);

    const events = await eventually(`action=withdrawal&actor_id=${renter.id}`, 3);
    const byRequest = Object.fromEntries(
      (events as { request_id: string; target: string; details: Record<string, unknown> }[]).map((e) => [
        e.request_id,
        e,
      ]),
    );
    expect(byRequest['req-huge-amount']).toMatchObject({ outcome: 'refused', target: `wallet:${w.id}` });
    expect(byRequest['req-huge-amount']!.details).toEqual({ status_code: 400, status: 400, code: 'VALIDATION_ERROR' });
    expect(byRequest['req-odd-path']).toMatchObject({ outcome: 'refused', details: { status_code: 400 } });
    expect(byRequest['req-odd-path']!.target).toBe('wallet:a\ufffdb');
    expect(byRequest['req-long-path']).toMatchObject({ outcome: 'refused', details: { status_code: 400 } });
    expect(byRequest['req-long-path']!.target.length).toBeLessThanOrEqual(512);
  });

  it('is refused any update or deletion by the database itself', async () => {
    for (const statement of [sql`UPDATE audit_events SET action = 'nothing'`, sql`DELETE FROM audit_events`]) {
      await expect(statement.execute(h.db)).rejects.toMatchObject({ code: '42501' });
    }
  });
});
