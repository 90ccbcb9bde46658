/**
 * Interruptible leases at a bid, against the real auth service and provider registry: a machine takes bids at its
 * owner's floor; a start takes free GPUs first, then those of the lowest bids it outbids (an on-demand start outbids
 * every bid), ending them `preempted` in its own transaction, billed to that moment and naming the winner; never a
 * higher or equal bid, never an on-demand lease; a retried start preempts nothing more; and under hundreds of
 * concurrent bids, on-demand starts and ends on one machine, no GPU is held twice and every preemption has exactly
 * one winner that outbid it.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createLogger, OutboxRelay } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registrySessionPublisher } from '../services/billing/src/adapters/registry-sessions.ts';
import { base58Encode } from '../services/billing/src/domain/chain/base58.ts';
import { followJobs, placeJobs } from '../services/billing/src/domain/jobs/index.ts';
import { Dec } from '../services/billing/src/domain/ledger/index.ts';
import { announcePrices } from '../services/billing/src/domain/pricing/provider-rates.ts';
import { endWorkloadsNeverStarted } from '../services/billing/src/domain/workloads/index.ts';
import type { BillingHarness } from '../services/billing/test/support/setup.ts';
import { gpu, providerBody } from '../services/provider-registry/test/helpers.ts';
import { useAuthAndRegistry } from './support/auth-and-registry.ts';
import { billingWithRegistry } from './support/billing-with-registry.ts';

const platform = useAuthAndRegistry();
let billing: BillingHarness;

beforeAll(async () => {
  billing = await billingWithRegistry(platform);
});
afterAll(async () => {
  await billing?.close();
});

type Headers = Record<string, string>;

const call = (method: 'POST' | 'PUT' | 'GET', url: string, headers: Headers, payload?: unknown) =>
  billing.app.inject({ method, url: `/api/v1${url}`, headers, ...(payload ? { payload } : {}) });

const H100 = { model_name: 'NVIDIA H100 80GB HBM3', vram: 81559, power_consumption: 700 };

/** An 8-GPU machine at the real registry (in `location`); its owner sets `floor` (null: it takes no bids). */
async function machine(floor: string | null, location?: string): Promise<string> {
  return (await ownedMachine(floor, location)).id;
}

/** `machine`, with its owner's headers (who may report its workloads as its daemon does). */
async function ownedMachine(floor: string | null, location?: string): Promise<{ id: string; owner: Headers }> {
  const { user, tokens } = await platform.verifiedUser(['provider']);
  const headers = { authorization: `Bearer ${tokens.access_token}` };
  const res = await fetch(`${platform.registryUrl}/providers`, {
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/json' },
    body: JSON.stringify(
      providerBody({
        owner_id: user.id,
        gpus: Array.from({ length: 8 }, () => gpu(H100)),
        ...(location && { location }),
      }),
    ),
  });
  expect(res.status).toBe(201);
  const id = ((await res.json()) as { id: string }).id;
  if (floor !== null) {
    const rates = await call('PUT', `/provider/${id}/rates`, headers, { bid_floor: floor });
    expect(rates.statusCode, rates.body).toBe(200);
    expect(rates.json().bid_floor).toBe(floor);
  }
  return { id, owner: headers };
}

interface Renter {
  userId: string;
  walletId: string;
  headers: Headers;
}

/** A job at a bid of 1 per GPU-hour (on demand at most 100) of `region`'s H100s, submitted by `r`; `terms` override. */
function submitJobAtBid(r: Renter, region: string, terms: Record<string, unknown> = {}) {
  return call('POST', '/billing/jobs', r.headers, {
    wallet_id: r.walletId,
    gpu_count: 4,
    gpu_model: 'H100',
    region,
    max_price_per_gpu_hour: '100',
    bid_per_gpu_hour: '1',
    spend_cap: '50',
    workload: { command: ['true'], max_runtime_seconds: 600 },
    ...terms,
  });
}

/** A renter of the real auth service with a wallet holding `funds` tokens. */
async function renter(funds = '1000'): Promise<Renter> {
  const { user, tokens } = await platform.verifiedUser(['renter']);
  const headers = { authorization: `Bearer ${tokens.access_token}` };
  const wallet = await call('POST', '/wallet', headers, {
    owner_type: 'user',
    owner_id: user.id,
    solana_address: base58Encode(randomBytes(32)),
  });
  expect(wallet.statusCode).toBe(201);
  await billing.credit(wallet.json().id, funds);
  return { userId: user.id, walletId: wallet.json().id, headers };
}

/** Starts a rental of `count` H100s on `machineId` at `bid` (null: on demand); `body` adds to the request's. */
function start(r: Renter, machineId: string, count: number, bid: string | null, extra: Headers = {}, body = {}) {
  return call(
    'POST',
    '/billing/start-session',
    { ...r.headers, ...extra },
    {
      user_id: r.userId,
      wallet_id: r.walletId,
      provider_id: machineId,
      gpu_model: 'H100',
      gpu_count: count,
      accepted_hourly_rate: '1000',
      ...(bid === null ? {} : { bid }),
      ...body,
    },
  );
}

/** A relay of billing's outbox to the real registry without NATS (its prices, its statements of leases). */
function relayToRegistry() {
  const logger = createLogger({ service: 'billing-test', instanceId: 't', level: 'silent' });
  const publisher = registrySessionPublisher({ ...billing.config.provider_registry, timeout: '2s' }, logger);
  return new OutboxRelay(billing.db, publisher!, { subject: 'unused', logger });
}

/** The market's offers in `region`, busy groups too, as a renter's search answers them. */
async function offersIn(region: string) {
  const token = await (await platform.machineClient('service')).get();
  const res = await fetch(`${platform.registryUrl}/offers?region=${region}&availability=any`, {
    headers: { authorization: `Bearer ${token}` },
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { provider_id: string; free_gpus: number; interruptible: unknown }[];
}

async function sessionRow(id: string) {
  return billing.db.selectFrom('rental_sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
}

describe('interruptible leases at a bid', () => {
  it('takes bids only where the owner set a floor, at least the floor, and prices the session at the bid', async () => {
    const r = await renter();
    const noBids = await machine(null);
    const refused = await start(r, noBids, 2, '5');
    expect(refused.statusCode, refused.body).toBe(409);
    expect(refused.json()).toMatchObject({ code: 'BIDS_NOT_ACCEPTED', provider_id: noBids });

    const m = await machine('0.5');
    const low = await start(r, m, 2, '0.4');
    expect(low.statusCode, low.body).toBe(409);
    expect(low.json()).toMatchObject({ code: 'BID_BELOW_FLOOR', bid_floor: '0.5' });
    const zero = await start(r, m, 2, '0');
    expect(zero.statusCode, zero.body).toBe(400);
    // A reservation is of on-demand GPUs.
    const reserved = await call('POST', '/billing/start-session', r.headers, {
      user_id: r.userId,
      wallet_id: r.walletId,
      provider_id: m,
      reservation_id: randomUUID(),
      gpu_count: 1,
      bid: '1',
    });
    expect(reserved.statusCode, reserved.body).toBe(409);
    expect(reserved.json().code).toBe('BIDS_NOT_ACCEPTED');
    const balance = await call('GET', `/wallet/${r.walletId}/balance`, r.headers);
    expect(balance.json()).toMatchObject({ available: '1000.000000', locked: '0.000000' });

    const won = await start(r, m, 2, '0.6');
    expect(won.statusCode, won.body).toBe(201);
    expect(won.json().session).toMatchObject({ bid: '0.600000', preempted_by: null, gpu_indices: [0, 1] });
    expect(won.json().session.rates).toMatchObject({
      rate_source: 'bid',
      base_rate_per_gpu: '0.600000',
      total_hourly_rate: '1.200000',
    });
    // The floor is the owner's to set: a renter may not.
    const notOwner = await call('PUT', `/provider/${m}/rates`, r.headers, { bid_floor: '0.01' });
    expect(notOwner.statusCode).toBe(403);
  });

  it('takes GPUs back from the lowest bids first, never from a higher or equal bid or an on-demand lease; a retried start takes nothing more', async () => {
    const m = await machine('0.5');
    const [a, b, c, d, e, f, g] = await Promise.all(Array.from({ length: 7 }, () => renter()));
    const sa = await start(a!, m, 4, '1');
    const sb = await start(b!, m, 4, '2');
    expect([sa.statusCode, sb.statusCode]).toEqual([201, 201]);
    // Full: a bid of 1.5 takes the four GPUs of the bid of 1, not those of 2.
    const sc = await start(c!, m, 4, '1.5');
    expect(sc.statusCode, sc.body).toBe(201);
    expect(sc.json().session.gpu_indices).toEqual(sa.json().session.gpu_indices);
    const preemptedA = await sessionRow(sa.json().session.id);
    expect(preemptedA).toMatchObject({
      status: 'completed',
      end_reason: 'preempted',
      preempted_by: sc.json().session.id,
    });
    // Billed to the notice: the one minute it started, at its bid (4 GPUs × 1 per hour), its provider paid for it.
    const record = await billing.db
      .selectFrom('billing_records')
      .selectAll()
      .where('session_id', '=', sa.json().session.id)
      .executeTakeFirstOrThrow();
    expect(record).toMatchObject({ end_reason: 'preempted', billed_minutes: 1 });
    expect(Number(record.total_cost)).toBeCloseTo(4 / 60, 6);
    expect(Number(record.provider_earnings) + Number(record.platform_fee)).toBeCloseTo(Number(record.total_cost), 9);
    const renterA = await call('GET', `/wallet/${a!.walletId}/balance`, a!.headers);
    expect(renterA.json().locked).toBe('0.000000');
    // In the audit trail, in the start's own transaction: who took whose session, at what bids, billed what.
    const trail = await billing.db
      .selectFrom('audit_events')
      .selectAll()
      .where('action', '=', 'session_preempted')
      .where('target', '=', `session:${sa.json().session.id}`)
      .execute();
    expect(trail).toHaveLength(1);
    expect(trail[0]).toMatchObject({ actor_id: c!.userId, outcome: 'succeeded' });
    expect(trail[0]!.details).toMatchObject({
      preempted_by: sc.json().session.id,
      bid: '1',
      winning_bid: '1.5',
      billed_minutes: 1,
      total_cost: record.total_cost,
    });

    // A bid of 1.2 outbids nobody now (1.5 and 2 hold everything): refused, nothing taken, nothing charged.
    const sd = await start(d!, m, 2, '1.2');
    expect(sd.statusCode, sd.body).toBe(409);
    expect(sd.json().code).toBe('PROVIDER_NOT_AVAILABLE');
    expect((await sessionRow(sc.json().session.id)).status).toBe('active');
    expect((await sessionRow(sb.json().session.id)).status).toBe('active');

    // A bid of 2 takes the 1.5's GPUs, never the equal bid's.
    const se = await start(e!, m, 4, '2');
    expect(se.statusCode, se.body).toBe(201);
    expect((await sessionRow(sc.json().session.id)).preempted_by).toBe(se.json().session.id);
    expect((await sessionRow(sb.json().session.id)).status).toBe('active');

    // On demand outbids every bid: 6 GPUs take both bids of 2 (a session is taken whole), 2 GPUs stay free.
    const key = { 'idempotency-key': randomUUID() };
    const sf = await start(f!, m, 6, null, key);
    expect(sf.statusCode, sf.body).toBe(201);
    for (const victim of [sb, se]) {
      expect(await sessionRow(victim.json().session.id)).toMatchObject({
        end_reason: 'preempted',
        preempted_by: sf.json().session.id,
      });
    }
    // The same request again answers the same start and takes nothing more.
    const sg = await start(g!, m, 2, '0.6');
    expect(sg.statusCode, sg.body).toBe(201);
    const again = await start(f!, m, 6, null, key);
    expect(again.statusCode).toBe(201);
    expect(again.json().session.id).toBe(sf.json().session.id);
    expect((await sessionRow(sg.json().session.id)).status).toBe('active');
    // A bid of 100 for one GPU takes the 0.6's two (whole), one stays free. On-demand GPUs are never taken back:
    // three more on demand (the free one and the bid's one are all it could take) are refused, and nothing moves.
    const h = await renter();
    const rich = await start(h, m, 1, '100');
    expect(rich.statusCode, rich.body).toBe(201);
    expect((await sessionRow(sg.json().session.id)).preempted_by).toBe(rich.json().session.id);
    const none = await start(h, m, 3, null);
    expect(none.statusCode, none.body).toBe(409);
    expect((await sessionRow(rich.json().session.id)).status).toBe('active');
    expect((await sessionRow(sf.json().session.id)).status).toBe('active');
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('bills a start that takes GPUs back from its start: ending it before its workload runs leaves no eviction free', async () => {
    const [victim, taker] = await Promise.all([renter(), renter()]);
    const workload = { workload: { command: ['true'], max_runtime_seconds: 600 } };
    const m = await machine('0.5');
    expect((await start(victim, m, 8, '1')).statusCode).toBe(201);
    const taking = await start(taker, m, 8, null, {}, workload);
    expect(taking.statusCode, taking.body).toBe(201);
    const taken = taking.json().session;
    // Its clock started with it, not with its workload's `running`.
    expect(taken.billed_from).toBe(taken.started_at);
    const ended = await call('POST', '/billing/end-session', taker.headers, { session_id: taken.id });
    expect(ended.statusCode, ended.body).toBe(200);
    expect(ended.json().billing_record).toMatchObject({ billed_minutes: 1 });
    expect(Number(ended.json().billing_record.total_cost)).toBeGreaterThan(0);
    // A workload session that takes nothing back still pays from its workload's running: ended before, nothing.
    const free = await start(taker, await machine(null), 8, null, {}, workload);
    expect(free.statusCode, free.body).toBe(201);
    expect(free.json().session.billed_from).toBeNull();
    const freeEnd = await call('POST', '/billing/end-session', taker.headers, { session_id: free.json().session.id });
    expect(freeEnd.json().billing_record).toMatchObject({ billed_minutes: 0, total_cost: '0.000000' });
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('bills a start that took GPUs back only its first minute when its machine never runs its workload', async () => {
    const workload = { workload: { command: ['true'], max_runtime_seconds: 600 } };
    /** A session that took a bid's 8 GPUs back, as if started `minutes` ago (its clock, preparation included). */
    const takenBack = async (owned: { id: string }, minutes: number) => {
      const [victim, taker] = await Promise.all([renter(), renter()]);
      expect((await start(victim, owned.id, 8, '1')).statusCode).toBe(201);
      const taking = await start(taker, owned.id, 8, null, {}, workload);
      expect(taking.statusCode, taking.body).toBe(201);
      const id = taking.json().session.id as string;
      const since = new Date(Date.now() - minutes * 60_000);
      await billing.db
        .updateTable('rental_sessions')
        .set({ started_at: since, billed_from: since })
        .where('id', '=', id)
        .execute();
      await billing.db
        .updateTable('session_workloads')
        .set({ created_at: since })
        .where('session_id', '=', id)
        .execute();
      return id;
    };
    const firstMinuteOnly = async (id: string) => {
      const row = await sessionRow(id);
      expect(row).toMatchObject({ end_reason: 'workload_not_started', billed_minutes: 1 });
      // One minute of 8 H100s at the machine's rate: its total hourly rate / 60, no more.
      expect(row.total_cost).toBe(new Dec(row.total_hourly_rate).div(60).toFixed(6));
    };
    // Its daemon says the image could not be pulled (the machine's fault) four and a half minutes in.
    const pulled = await ownedMachine('0.5');
    const failed = await takenBack(pulled, 4.5);
    const report = await call('POST', `/billing/sessions/${failed}/workload/state`, pulled.owner, {
      state: 'failed',
      at: new Date().toISOString(),
      reason: 'image_pull_failed',
    });
    expect(report.statusCode, report.body).toBe(200);
    await firstMinuteOnly(failed);
    // Its daemon never starts it: the start deadline (5 minutes) ends it.
    const silent = await takenBack(await ownedMachine('0.5'), 6);
    expect(await endWorkloadsNeverStarted(billing.ctx)).toBeGreaterThanOrEqual(1);
    await firstMinuteOnly(silent);
    // One that ran and then failed, whatever the reason given, is billed to its end: its 5 started minutes.
    const ranOn = await ownedMachine('0.5');
    const ran = await takenBack(ranOn, 4.5);
    const state = (body: object) => call('POST', `/billing/sessions/${ran}/workload/state`, ranOn.owner, body);
    expect((await state({ state: 'running', at: new Date(Date.now() - 180_000).toISOString() })).statusCode).toBe(200);
    const late = await state({ state: 'failed', at: new Date().toISOString(), reason: 'sandbox_unavailable' });
    expect(late.statusCode, late.body).toBe(200);
    expect((await sessionRow(ran)).billed_minutes).toBe(5);
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('keeps the bid of a session that took GPUs from bids above the highest of them', async () => {
    const m = await machine('0.5');
    const [low, high, taker] = await Promise.all([renter(), renter(), renter()]);
    expect((await start(low, m, 4, '1')).statusCode).toBe(201);
    expect((await start(high, m, 4, '1.5')).statusCode).toBe(201);
    const took = await start(taker, m, 8, '3');
    expect(took.statusCode, took.body).toBe(201);
    const id = took.json().session.id as string;
    const bidOn = (bid: string) => call('POST', `/billing/sessions/${id}/bid`, taker.headers, { bid });
    // Cut to the highest bid it took, or below: it would have evicted that bid at it.
    for (const bid of ['1', '1.5']) {
      const cut = await bidOn(bid);
      expect(cut.statusCode, cut.body).toBe(409);
      expect(cut.json()).toMatchObject({ code: 'BID_NOT_ABOVE_OUTBID', outbid: '1.5' });
    }
    expect(Number((await sessionRow(id)).bid)).toBe(3);
    // Above it, a cut is a cut.
    const cut = await bidOn('1.6');
    expect(cut.statusCode, cut.body).toBe(200);
    expect(cut.json().bid).toBe('1.600000');
  });

  it('takes no session it does not need: the lowest bid is spared when a higher one alone covers the need', async () => {
    const m = await machine('0.5');
    const [a, b, c] = await Promise.all([renter(), renter(), renter()]);
    const one = await start(a, m, 1, '1');
    const seven = await start(b, m, 7, '1.1');
    expect([one.statusCode, seven.statusCode]).toEqual([201, 201]);
    // Seven on demand: the bid of 1 (one GPU) alone is not enough, the bid of 1.1 (seven) is, so only it is taken.
    const won = await start(c, m, 7, null);
    expect(won.statusCode, won.body).toBe(201);
    expect((await sessionRow(seven.json().session.id)).preempted_by).toBe(won.json().session.id);
    expect(await sessionRow(one.json().session.id)).toMatchObject({ status: 'active', preempted_by: null });
    // The taken session ended when the winner's lease began, not a moment later.
    const taken = await sessionRow(seven.json().session.id);
    expect(new Date(taken.ended_at!).getTime()).toBe(new Date(won.json().session.started_at).getTime());
  });

  it('shows the market what a bid gets now: the floor, the GPUs a bid could take, the bid to beat', async () => {
    const relay = relayToRegistry();
    await announcePrices(billing.ctx);
    const region = `bids-${randomUUID().slice(0, 8)}`;
    const noBids = await machine(null, region);
    const m = await machine('0.5', region);
    await relay.flush();
    const market = async () => {
      await relay.flush();
      const offers = await offersIn(region);
      expect(offers.find((o) => o.provider_id === noBids)?.interruptible).toBeNull();
      return offers.find((o) => o.provider_id === m);
    };
    expect((await market())?.interruptible).toEqual({
      bid_floor: '0.5',
      gpus: 8,
      winning_bid: '0.5',
      outbid_above: null,
    });
    const [a, b, c] = await Promise.all([renter(), renter(), renter()]);
    expect((await start(a, m, 4, '1')).statusCode).toBe(201);
    expect((await start(b, m, 4, '2')).statusCode).toBe(201);
    // Full, at bids: no GPU free, all eight to be had by bidding above 1 (then 2).
    expect(await market()).toMatchObject({
      free_gpus: 0,
      interruptible: { bid_floor: '0.5', gpus: 8, winning_bid: null, outbid_above: '1' },
    });
    // On demand takes the bid of 1 (four GPUs) for two: two are free again, four still held at 2.
    expect((await start(c, m, 2, null)).statusCode).toBe(201);
    expect((await market())?.interruptible).toEqual({
      bid_floor: '0.5',
      gpus: 6,
      winning_bid: '0.5',
      outbid_above: '2',
    });
  });

  it('changes a running bid: a raise keeps the GPUs from a bid it now beats, the market moves, each minute is billed at the highest bid in force', async () => {
    const relay = relayToRegistry();
    await announcePrices(billing.ctx);
    const region = `bid-change-${randomUUID().slice(0, 8)}`;
    const m = await machine('0.5', region);
    const [a, b, c] = await Promise.all([renter(), renter(), renter()]);
    const sa = await start(a, m, 4, '1');
    const sb = await start(b, m, 4, '2');
    expect([sa.statusCode, sb.statusCode]).toEqual([201, 201]);
    const aId = sa.json().session.id as string;
    const bidOn = (r: Renter, id: string, bid: string) =>
      call('POST', `/billing/sessions/${id}/bid`, r.headers, { bid });

    // The renter raises 1 to 3: the session now outbids the 2, and the market's bid to beat is 2.
    const raised = await bidOn(a, aId, '3');
    expect(raised.statusCode, raised.body).toBe(200);
    expect(raised.json()).toMatchObject({ id: aId, bid: '3.000000', status: 'active' });
    expect(raised.json().rates).toMatchObject({ base_rate_per_gpu: '3.000000', total_hourly_rate: '12.000000' });
    await relay.flush();
    const offer = (await offersIn(region)).find((o) => o.provider_id === m);
    expect(offer?.interruptible).toMatchObject({ outbid_above: '2' });
    // A bid of 2.5 for four GPUs takes the 2's, not the raised session's.
    const sc = await start(c, m, 4, '2.5');
    expect(sc.statusCode, sc.body).toBe(201);
    expect((await sessionRow(sb.json().session.id)).preempted_by).toBe(sc.json().session.id);
    expect((await sessionRow(aId)).status).toBe('active');

    // Refused, changing nothing: under the floor, zero, an on-demand session, someone else's (the provider's owner
    // included), an ended one (a preemption is final: no raise undoes it).
    const low = await bidOn(a, aId, '0.4');
    expect(low.statusCode, low.body).toBe(409);
    expect(low.json()).toMatchObject({ code: 'BID_BELOW_FLOOR', bid_floor: '0.5' });
    expect((await bidOn(a, aId, '0')).statusCode).toBe(400);
    const onDemand = await start(c, await machine('0.5'), 1, null);
    expect(onDemand.statusCode, onDemand.body).toBe(201);
    const notBid = await bidOn(c, onDemand.json().session.id, '1');
    expect(notBid.statusCode, notBid.body).toBe(409);
    expect(notBid.json().code).toBe('SESSION_NOT_INTERRUPTIBLE');
    expect((await bidOn(b, aId, '9')).statusCode).toBe(403);
    const ended = await bidOn(b, sb.json().session.id, '9');
    expect(ended.statusCode, ended.body).toBe(409);
    expect(ended.json().code).toBe('SESSION_NOT_ACTIVE');
    expect((await sessionRow(aId)).bid).toBe('3');
    // The same bid again changes nothing (no second audit event).
    expect((await bidOn(a, aId, '3')).statusCode).toBe(200);
    const trail = await billing.db
      .selectFrom('audit_events')
      .selectAll()
      .where('action', '=', 'session_bid_changed')
      .where('target', '=', `session:${aId}`)
      .execute();
    expect(trail).toHaveLength(1);
    expect(trail[0]!.details).toMatchObject({ bid: '3', previous_bid: '1', provider_id: m });

    // Billed by minute: 10.5 minutes at 1 per GPU-hour, then raised to 3 (the 11th minute at 3) and ended at once.
    const d = await renter();
    const m2 = await machine('0.5');
    const sd = await start(d, m2, 2, '1');
    const dId = sd.json().session.id as string;
    // As if it had started 10.5 minutes ago (a session without a workload is billed from its start).
    await billing.db
      .updateTable('rental_sessions')
      .set({ started_at: new Date(Date.now() - 10.5 * 60_000) })
      .where('id', '=', dId)
      .execute();
    const up = await bidOn(d, dId, '3');
    expect(up.json().rate_segments).toEqual([
      { from_minute: 0, hourly_rate: '2.000000', bid: '1.000000' },
      { from_minute: 10, hourly_rate: '6.000000', bid: '3.000000' },
    ]);
    const end = await call('POST', '/billing/end-session', d.headers, { session_id: dId });
    expect(end.statusCode, end.body).toBe(200);
    // 10 minutes at 2 an hour (0.333333) and one at 6 (0.1).
    expect(end.json().billing_record).toMatchObject({ billed_minutes: 11, total_cost: '0.433333' });

    // A raise must be paid for: within a spend cap (the cap's rest pays the next minute at the new bid), and from the
    // hold and the wallet (the cost so far and the next billing interval at it).
    const capped = await call('POST', '/billing/start-session', d.headers, {
      user_id: d.userId,
      wallet_id: d.walletId,
      provider_id: m2,
      gpu_model: 'H100',
      gpu_count: 1,
      accepted_hourly_rate: '1000',
      bid: '1',
      spend_cap: '0.05',
    });
    expect(capped.statusCode, capped.body).toBe(201);
    const overCap = await bidOn(d, capped.json().session.id, '3');
    expect(overCap.statusCode, overCap.body).toBe(409);
    expect(overCap.json()).toMatchObject({ code: 'BID_ABOVE_CAP', cap: '0.050000' });
    expect((await bidOn(d, capped.json().session.id, '1.4')).statusCode).toBe(200);
    const poor = await renter('1');
    const thin = await start(poor, m2, 1, '1');
    expect(thin.statusCode, thin.body).toBe(201);
    const unpaid = await bidOn(poor, thin.json().session.id, '100');
    expect(unpaid.statusCode, unpaid.body).toBe(402);
    expect(unpaid.json().code).toBe('INSUFFICIENT_FUNDS');
    expect((await sessionRow(thin.json().session.id)).bid).toBe('1');

    // A session keeps at most 1,000 rates by minute (every billing pass reads them): one more change is refused.
    const e = await start(d, m2, 1, '1');
    const eId = e.json().session.id as string;
    await billing.db
      .updateTable('rental_sessions')
      .set({
        started_at: new Date(Date.now() - 1000.5 * 60_000),
        rate_segments: JSON.stringify(
          Array.from({ length: 1000 }, (_, i) => ({ from_minute: i, hourly_rate: String(1 + (i % 2)), bid: null })),
        ),
      })
      .where('id', '=', eId)
      .execute();
    const exhausted = await bidOn(d, eId, '5');
    expect(exhausted.statusCode, exhausted.body).toBe(409);
    expect(exhausted.json().code).toBe('TOO_MANY_BID_CHANGES');
    expect((await sessionRow(eId)).bid).toBe('1');
    expect((await call('POST', '/billing/end-session', d.headers, { session_id: eId })).statusCode).toBe(200);
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('places a job at a bid on the one machine that takes bids behind a page of cheaper ones that take none', {
    timeout: 60_000,
  }, async () => {
    const relay = relayToRegistry();
    await announcePrices(billing.ctx);
    const region = `bid-page-${randomUUID().slice(0, 8)}`;
    // More machines that take no bids, all cheaper, than the placer reads in a page of the market (50).
    const { user, tokens } = await platform.verifiedUser(['provider']);
    const owner = { authorization: `Bearer ${tokens.access_token}`, 'content-type': 'application/json' };
    const register = async () => {
      const res = await fetch(`${platform.registryUrl}/providers`, {
        method: 'POST',
        headers: owner,
        body: JSON.stringify(providerBody({ owner_id: user.id, gpus: [gpu(H100)], location: region })),
      });
      expect(res.status).toBe(201);
      return ((await res.json()) as { id: string }).id;
    };
    for (let i = 0; i < 55; i++) await register();
    // The one that takes bids, its own H100 rate dearer than any of theirs.
    const taker = await register();
    const rates = await call('PUT', `/provider/${taker}/rates`, owner, {
      base_rates: { H100: '90' },
      bid_floor: '0.5',
    });
    expect(rates.statusCode, rates.body).toBe(200);
    await relay.flush();
    const r = await renter();
    const submitted = await submitJobAtBid(r, region, { gpu_count: 1 });
    expect(submitted.statusCode, submitted.body).toBe(201);
    await placeJobs(billing.ctx, billing.config.jobs, { capacity: true });
    const job = (await call('GET', `/billing/jobs/${submitted.json().id}`, r.headers)).json();
    expect(job.state, JSON.stringify(job)).toBe('running');
    expect(job.attempts.at(-1).provider_id).toBe(taker);
  });

  it('places a job at a bid where it can win GPUs, and again on another machine when its attempt is taken back', async () => {
    const relay = relayToRegistry();
    await announcePrices(billing.ctx);
    const region = `job-bids-${randomUUID().slice(0, 8)}`;
    const first = await machine('0.5', region);
    // A machine that takes no bids, and one whose floor is above the job's bid: never tried at the bid.
    await machine(null, region);
    await machine('5', region);
    await relay.flush();
    const r = await renter();
    // A job of 4 H100s in the region at a bid of 1 (its max price on demand: 100).
    const submitJob = (terms: Record<string, unknown> = {}) => submitJobAtBid(r, region, terms);
    const jobOf = async (id: string) => (await call('GET', `/billing/jobs/${id}`, r.headers)).json();
    // A bid above the job's most per GPU-hour would pay more than the renter allowed: refused.
    const above = await submitJob({ bid_per_gpu_hour: '101' });
    expect(above.statusCode, above.body).toBe(400);
    expect(above.json().code).toBe('BID_ABOVE_MAX_PRICE');
    const submitted = await submitJob();
    expect(submitted.statusCode, submitted.body).toBe(201);
    expect(submitted.json().terms).toMatchObject({ bid_per_gpu_hour: '1' });
    const jobId = submitted.json().id as string;
    const settings = billing.config.jobs;
    const jobNow = () => jobOf(jobId);
    const placedOn = async (machineId: string) => {
      for (let i = 0; i < 50; i++) {
        await relay.flush();
        // A round of the placer as the background runs it: ended attempts settled, then due jobs placed.
        await followJobs(billing.ctx, settings);
        await placeJobs(billing.ctx, settings, { capacity: true });
        const job = await jobNow();
        const attempt = job.attempts.at(-1);
        if (job.state === 'running' && attempt?.provider_id === machineId) return { job, attempt };
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      throw new Error(`job ${jobId} was not placed on ${machineId}: ${JSON.stringify(await jobNow())}`);
    };
    const { attempt } = await placedOn(first);
    expect(await sessionRow(attempt.session_id)).toMatchObject({ bid: '1', rate_source: 'bid' });
    // Its attempt's bid may be raised, never above the job's most per GPU-hour.
    const aboveJob = await call('POST', `/billing/sessions/${attempt.session_id}/bid`, r.headers, { bid: '101' });
    expect(aboveJob.statusCode, aboveJob.body).toBe(409);
    expect(aboveJob.json()).toMatchObject({ code: 'BID_ABOVE_CAP', cap: '100' });

    // An on-demand renter takes the whole first machine: the job's attempt ends preempted, and the job, recovering,
    // is placed at its bid on a second machine that takes bids.
    const taker = await renter();
    expect((await start(taker, first, 8, null)).statusCode).toBe(201);
    expect((await sessionRow(attempt.session_id)).end_reason).toBe('preempted');
    const second = await machine('0.5', region);
    const again = await placedOn(second);
    expect(again.job.attempts.map((a: { end_reason: string | null }) => a.end_reason)).toEqual(['preempted', null]);
    expect(await sessionRow(again.attempt.session_id)).toMatchObject({ bid: '1' });
    // Both machines a bid of 1 could win on are full on demand now: a job at that bid with on_demand_fallback runs on
    // demand (at up to its max price) on a machine with free GPUs; one without it waits.
    expect((await start(taker, second, 4, null)).statusCode).toBe(201);
    const waits = await submitJob({ on_demand_fallback: false });
    const falls = await submitJob({ on_demand_fallback: true });
    await relay.flush();
    await placeJobs(billing.ctx, settings, { capacity: true });
    const fell = await jobOf(falls.json().id);
    expect(fell.state).toBe('running');
    expect([first, second]).not.toContain(fell.attempts[0].provider_id);
    expect(await sessionRow(fell.session_id)).toMatchObject({ bid: null, rate_source: 'platform' });
    expect((await jobOf(waits.json().id)).state).toBe('queued');
  });

  it('never holds a GPU twice and gives every preemption one winner that outbid it, under concurrent bids, on-demand starts and ends', {
    timeout: 120_000,
  }, async () => {
    const m = await machine('0.1');
    const renters = await Promise.all(Array.from({ length: 24 }, () => renter('5000')));
    const started: { id: string; by: Renter; bid: boolean }[] = [];
    let bidChanges = 0;
    /** A raise or a cut of a session's bid (refused once that session was taken back or ended). */
    const changeBid = async (r: Renter, id: string) => {
      const bid = (0.1 + Math.floor(next() * 20) / 10).toFixed(1);
      const changed = await call('POST', `/billing/sessions/${id}/bid`, r.headers, { bid });
      if (changed.statusCode === 200) bidChanges++;
      return changed.statusCode;
    };
    // Rounds of everyone at once: each renter starts 1 to 4 GPUs, on demand or at a bid, changes one of its bids, or
    // ends what it started.
    let seed = 7;
    const next = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let round = 0; round < 12; round++) {
      const live = new Set(
        (
          await billing.db
            .selectFrom('rental_sessions')
            .select('id')
            .where('provider_id', '=', m)
            .where('status', '=', 'active')
            .execute()
        ).map((s) => s.id),
      );
      const answers = await Promise.all(
        renters.map(async (r, i) => {
          const roll = next();
          const mine = started.filter((x) => x.by === r && live.has(x.id));
          // On-demand rentals end sooner than bids (else they fill the machine and nothing is bid for).
          const mineOnDemand = mine.filter((x) => !x.bid);
          if ((roll < 0.2 && mine.length > 0) || (roll < 0.5 && mineOnDemand.length > 0)) {
            const pool = roll < 0.2 ? mine : mineOnDemand;
            const { id } = pool[Math.floor(next() * pool.length)]!;
            const ended = await call('POST', '/billing/end-session', r.headers, { session_id: id });
            return ended.statusCode;
          }
          const mineAtBids = mine.filter((x) => x.bid && live.has(x.id));
          if (roll < 0.7 && mineAtBids.length > 0) {
            return changeBid(r, mineAtBids[Math.floor(next() * mineAtBids.length)]!.id);
          }
          const bid = roll < 0.3 ? null : (0.1 + Math.floor(next() * 20) / 10).toFixed(1);
          const res = await start(r, m, 1 + ((i + round) % 4), bid);
          if (res.statusCode !== 201) return res.statusCode;
          const id = res.json().session.id as string;
          started.push({ id, by: r, bid: bid !== null });
          // Half the bids that won change at once, racing the round's other starts.
          if (bid === null || next() < 0.5) return res.statusCode;
          return changeBid(r, id);
        }),
      );
      // 402: a raise the renter's funds could not hold.
      for (const status of answers) expect([200, 201, 402, 409]).toContain(status);
    }
    const sessions = await billing.db.selectFrom('rental_sessions').selectAll().where('provider_id', '=', m).execute();
    const byId = new Map(sessions.map((s) => [s.id, s]));
    // What runs holds distinct GPUs of the eight, exactly the leases.
    const running = sessions.filter((s) => s.status === 'active');
    const held = running.flatMap((s) => s.gpu_indices ?? []);
    expect(new Set(held).size).toBe(held.length);
    expect(held.every((i) => i >= 0 && i < 8)).toBe(true);
    const leases = await billing.db
      .selectFrom('gpu_leases')
      .select(['gpu_index', 'session_id'])
      .where('provider_id', '=', m)
      .execute();
    expect(leases.map((l) => l.gpu_index).sort()).toEqual([...held].sort());
    // Every preempted session names one winner that started, outbid it (the bids in force then, as the audit trail
    // recorded them: either may have changed before), and needed it.
    const preempted = sessions.filter((s) => s.end_reason === 'preempted');
    expect(preempted.length, 'preemptions').toBeGreaterThan(0);
    expect(bidChanges, 'bid changes').toBeGreaterThan(0);
    const trail = await billing.db
      .selectFrom('audit_events')
      .select(['target', 'details'])
      .where('action', '=', 'session_preempted')
      .where(
        'target',
        'in',
        preempted.map((v) => `session:${v.id}`),
      )
      .execute();
    expect(trail).toHaveLength(preempted.length);
    const bidsAt = new Map(trail.map((t) => [t.target, t.details as { bid: string; winning_bid: string | null }]));
    const victimsOf = new Map<string, typeof sessions>();
    for (const v of preempted) {
      expect(v.bid).not.toBeNull();
      const winner = byId.get(v.preempted_by ?? '');
      expect(winner, `winner of ${v.id}`).toBeDefined();
      const at = bidsAt.get(`session:${v.id}`)!;
      expect(at.bid).toBe(v.bid);
      if (at.winning_bid !== null) expect(Number(at.winning_bid)).toBeGreaterThan(Number(at.bid));
      expect(new Set(v.gpu_indices).size).toBe(v.gpu_count);
      victimsOf.set(winner!.id, [...(victimsOf.get(winner!.id) ?? []), v]);
    }
    for (const [winnerId, victims] of victimsOf) {
      const winner = byId.get(winnerId)!;
      // None was taken for nothing: without any one of them (even the smallest), the rest did not cover the need.
      const gpus = victims.map((v) => v.gpu_count);
      expect(gpus.reduce((x, y) => x + y, 0) - Math.min(...gpus)).toBeLessThan(winner.gpu_count);
      for (const v of victims) {
        expect((v.gpu_indices ?? []).some((i) => (winner.gpu_indices ?? []).includes(i))).toBe(true);
      }
    }
    expect(running.length).toBeGreaterThan(0);
    expect((await billing.assertLedgerConsistent()).problems).toEqual([]);
  });
});
