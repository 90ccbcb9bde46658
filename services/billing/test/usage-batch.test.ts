/**
 * Usage updates that arrive together are applied together (group commit): the
 * answers must be exactly those of applying them one at a time, refused ones
 * must not disturb the rest, and every answer must match the documented schema.
 */

import { isAppError, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { lockWaiters } from '@gpu/common/testing';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { writeBilledSessions } from '../src/db/session-repository.ts';
import { openUsageBatch } from '../src/db/usage-repository.ts';
import { Dec } from '../src/domain/ledger/index.ts';
import { applyUsageBatch, type BatchedUsageUpdate, type UsageUpdate } from '../src/domain/sessions/usage-updates.ts';
import { sessionSchema } from '../src/routes/session-schemas.ts';
import { usageRecordSchema } from '../src/routes/usage.ts';
import { end, H100_X1, manualClock, parties, RTX4090_X2, start, startBody } from './support/sessions.ts';
import { useBillingHarness } from './support/setup.ts';

const clock = manualClock();
const h = useBillingHarness({ now: clock.now });

const answerSchema = z.strictObject({
  duplicate: z.boolean(),
  usage: usageRecordSchema.strict(),
  session: sessionSchema.strict(),
});

async function runningSession() {
  const p = await parties(h, '20');
  return (await start(h, startBody(p, H100_X1))).json().session.id as string;
}

const report = (sessionId: string, messageId: string, offsetMs: number, power: number) => ({
  session_id: sessionId,
  message_id: messageId,
  timestamp: new Date(clock.now().getTime() + offsetMs).toISOString(),
  gpu_utilization: 90,
  power_draw_w: power,
});

const post = (body: object) => h.app.inject({ method: 'POST', url: '/api/v1/billing/usage-update', payload: body });

describe('concurrent usage updates', () => {
  it('answer as if applied one by one: once per message, one charge, newest power, refusals alone', async () => {
    const a = await runningSession();
    const ended = await runningSession();
    await end(h, ended);
    clock.advance(150_000); // 2 min 30 s: two full minutes to bill (2 × 0.085)

    const responses = await Promise.all([
      post(report(a, 'a-1', 0, 200)),
      post(report(a, 'a-2', 1000, 250)),
      post(report(a, 'a-1', 0, 999)), // a retry of a-1
      post(report(a, 'a-3', -10_000, 100)), // measured earlier, arrived later
      post(report(crypto.randomUUID(), 'x-1', 0, 100)),
      post(report(ended, 'e-1', 0, 100)),
    ]);
    expect(responses.map((r) => r.statusCode)).toEqual([201, 201, 200, 201, 404, 409]);
    const bodies = responses.slice(0, 4).map((r) => answerSchema.parse(r.json()));
    expect(responses[4]!.json().code).toBe('SESSION_NOT_FOUND');
    expect(responses[5]!.json().code).toBe('SESSION_NOT_ACTIVE');

    expect(bodies[2]!.duplicate).toBe(true);
    expect(bodies[2]!.usage.id).toBe(bodies[0]!.usage.id);
    expect(bodies[2]!.usage.power_draw_w).toBe(200);
    const fresh = [bodies[0]!, bodies[1]!, bodies[3]!];
    expect(fresh.map((b) => b.usage.cost).sort()).toEqual(['0.000000', '0.000000', '0.170000']);
    expect(fresh.every((b) => b.usage.billed_minutes === 2)).toBe(true);

    const session = await h.db.selectFrom('rental_sessions').selectAll().where('id', '=', a).executeTakeFirstOrThrow();
    expect(session).toMatchObject({ billed_minutes: 2, total_cost: '0.170000', actual_power_w: '250' });
    const records = await h.db.selectFrom('usage_records').select('message_id').where('session_id', '=', a).execute();
    expect(records.map((r) => r.message_id).sort()).toEqual(['a-1', 'a-2', 'a-3']);
  });

  it('refuses metrics and message IDs PostgreSQL cannot store (NUL characters) with 400', async () => {
    const a = await runningSession();
    const res = await post({ ...report(a, 'nul', 0, 100), metrics: { note: 'a\u0000b' } });
    expect(res.statusCode).toBe(400);
    const id = await post({ ...report(a, 'nul', 0, 100), message_id: 'a\u0000b' });
    expect(id.statusCode).toBe(400);
    expect(id.json()).toMatchObject({ status: 400, code: 'VALIDATION_ERROR' });
  });
});

describe('POST /api/v1/billing/usage-updates', () => {
  const postMany = (reports: object[]) =>
    h.app.inject({ method: 'POST', url: '/api/v1/billing/usage-updates', payload: { reports } });

  it('applies each report as the single route would and answers one result per report, in order', async () => {
    const a = await runningSession();
    const ended = await runningSession();
    await end(h, ended);
    clock.advance(60_000);
    const res = await postMany([
      report(a, 'r-1', 0, 300),
      report(a, 'r-1', 0, 300),
      report(crypto.randomUUID(), 'r-1', 0, 300),
      report(ended, 'r-1', 0, 300),
      report(a, 'r-2', 500, 310),
    ]);
    expect(res.statusCode).toBe(200);
    type Result = { status: number; usage: { id: string }; session: object; problem: object };
    const { results } = res.json() as { results: Result[] };
    expect(results.map((r) => r.status)).toEqual([201, 200, 404, 409, 201]);
    for (const r of [results[0], results[1], results[4]]) {
      const { status: _status, ...answer } = r!;
      answerSchema.parse(answer);
    }
    expect(results[1]!.usage.id).toBe(results[0]!.usage.id);
    expect(results[2]!.problem).toMatchObject({ status: 404, code: 'SESSION_NOT_FOUND' });
    expect(results[3]!.problem).toMatchObject({ status: 409, code: 'SESSION_NOT_ACTIVE' });
    expect(results[4]!.session).toMatchObject({ billed_minutes: 1, total_cost: '0.085000', actual_power_w: '310' });

    // The same request again: every report is now a duplicate or refused as before; nothing is billed twice.
    const again = (await postMany([report(a, 'r-1', 0, 300), report(a, 'r-2', 500, 310)])).json();
    expect(again.results.map((r: { status: number }) => r.status)).toEqual([200, 200]);
    const records = await h.db.selectFrom('usage_records').select('id').where('session_id', '=', a).execute();
    expect(records).toHaveLength(2);
  });

  it('refuses an empty or oversized list and a bad report with 400, applying nothing', async () => {
    const a = await runningSession();
    expect((await postMany([])).statusCode).toBe(400);
    const tooMany = Array.from({ length: 257 }, (_, i) => report(a, `big-${i}`, 0, 100));
    expect((await postMany(tooMany)).statusCode).toBe(400);
    const bad = await postMany([report(a, 'fine', 0, 100), { ...report(a, 'bad', 0, 100), gpu_utilization: 101 }]);
    expect(bad.statusCode).toBe(400);
    const records = await h.db.selectFrom('usage_records').select('id').where('session_id', '=', a).execute();
    expect(records).toHaveLength(0);
  });
});

describe('applyUsageBatch', () => {
  const update = (sessionId: string, messageId: string, extra: Partial<UsageUpdate> = {}): UsageUpdate => ({
    sender: UNCHECKED_PRINCIPAL,
    sessionId,
    messageId,
    timestamp: clock.now(),
    gpuUtilization: 50,
    powerDrawW: 300,
    ...extra,
  });

  it('answers each update of one batch on its own, in order', async () => {
    const a = await runningSession();
    const b = await runningSession();
    clock.advance(60_000);
    const results = await applyUsageBatch(h.ctx, [
      update(a, 'm-1'),
      update(b, 'm-1'),
      update(a, 'm-1'),
      update(crypto.randomUUID(), 'm-1'),
    ]);
    expect(results.map((r) => (r instanceof Error ? (isAppError(r) ? r.code : r.message) : r.duplicate))).toEqual([
      false,
      false,
      true,
      'SESSION_NOT_FOUND',
    ]);
    const [first, , repeat] = results as { usage: { id: string; cost: string } }[];
    expect(repeat!.usage.id).toBe(first!.usage.id);
    expect(first!.usage.cost).toBe('0.085000');
  });

  it('applies the rest of a batch when one update breaks its transaction', async () => {
    const a = await runningSession();
    const b = await runningSession();
    const results = await applyUsageBatch(h.ctx, [
      update(a, 'ok-1'),
      update(b, 'poison', { metrics: { note: 'a\u0000b' } }), // jsonb refuses NUL: the whole statement fails
      update(b, 'ok-2'),
    ]);
    expect(results[0]).not.toBeInstanceOf(Error);
    expect(results[1]).toBeInstanceOf(Error);
    expect(results[2]).not.toBeInstanceOf(Error);
    const stored = await h.db
      .selectFrom('usage_records')
      .select('message_id')
      .where('session_id', 'in', [a, b])
      .orderBy('message_id')
      .execute();
    expect(stored.map((r) => r.message_id)).toEqual(['ok-1', 'ok-2']);
  });

  it("reads no session's whole row for updates that ask for none, yet raises events and ends sessions with it", async () => {
    // RTX 4090 × 2 at 1.93 tokens an hour: 2.5 tokens pay 77 minutes, then grace. H100 × 1 at 0.085 a minute: a cap
    // of 0.2 is spent in minute 3.
    const poor = (await start(h, startBody(await parties(h, '2.5'), RTX4090_X2))).json().session.id as string;
    const capped = (await start(h, { ...startBody(await parties(h, '20'), H100_X1), spend_cap: '0.2' })).json().session
      .id as string;
    const quiet = await runningSession();
    clock.advance(77 * 60_000 + 1000);
    const results = await applyUsageBatch(h.ctx, [
      update(poor, 'n-1'),
      update(capped, 'n-1'),
      update(quiet, 'n-1'),
      { ...update(quiet, 'n-2'), withSession: true },
    ]);
    for (const r of results) expect(r).not.toBeInstanceOf(Error);
    const answers = results as { session?: { status: string } }[];
    expect(answers.slice(0, 3).map((r) => r.session)).toEqual([undefined, undefined, undefined]);
    expect(answers[3]!.session).toMatchObject({
      id: quiet,
      status: 'active',
      billed_minutes: 77,
      requested_vram_mb: H100_X1.requested_vram_mb,
    });

    const rows = await h.db
      .selectFrom('rental_sessions')
      .select(['id', 'status', 'end_reason', 'total_cost'])
      .where('id', 'in', [poor, capped])
      .execute();
    expect(new Map(rows.map((r) => [r.id, r]))).toEqual(
      new Map([
        [poor, expect.objectContaining({ status: 'grace_period' })],
        [capped, { id: capped, status: 'completed', end_reason: 'spend_cap', total_cost: '0.200000' }],
      ]),
    );
    // The events carry the whole session as written: columns the batch itself never read among them.
    const events = await h.db.selectFrom('outbox_events').select(['kind', 'payload']).execute();
    const of = (id: string, kind: string) =>
      events
        .filter((e) => e.kind === kind && (e.payload as { session?: { id: string } }).session?.id === id)
        .map((e) => (e.payload as { session: object }).session);
    expect(of(poor, 'session.grace_period')).toEqual([
      expect.objectContaining({
        status: 'grace_period',
        requested_vram_mb: RTX4090_X2.requested_vram_mb,
        billed_minutes: 77,
      }),
    ]);
    expect(of(capped, 'session.completed')).toEqual([
      expect.objectContaining({
        status: 'completed',
        requested_vram_mb: H100_X1.requested_vram_mb,
        total_cost: '0.200000',
      }),
    ]);
  });
});

describe('a retry racing its original in another batch', () => {
  /**
   * Another batch holds the session and writes the original's record (and, with `end`, ends the session); the
   * retry's batch opens meanwhile (its snapshot taken before that record commits) and waits for the session's lock.
   */
  async function race(end: boolean) {
    const a = await runningSession();
    clock.advance(60_000);
    const u: BatchedUsageUpdate = {
      withSession: true,
      sender: UNCHECKED_PRINCIPAL,
      sessionId: a,
      messageId: 'raced',
      timestamp: clock.now(),
      gpuUtilization: 50,
      powerDrawW: 300,
    };
    const original = crypto.randomUUID();
    let retry: ReturnType<typeof applyUsageBatch> | undefined;
    await h.db.transaction().execute(async (trx) => {
      await sql`SELECT 1 FROM rental_sessions WHERE id = ${a} FOR UPDATE`.execute(trx);
      retry = applyUsageBatch(h.ctx, [u]);
      await lockWaiters(h.db, 1);
      await sql`INSERT INTO usage_records
        (id, session_id, message_id, reported_at, gpu_utilization, power_draw_w, billed_minutes, cost)
        VALUES (${original}, ${a}, 'raced', ${clock.now().toISOString()}, 50, 300, 1, 0)`.execute(trx);
      if (end) {
        await sql`UPDATE rental_sessions SET status = 'completed', ended_at = now(), end_reason = 'user_request'
          WHERE id = ${a}`.execute(trx);
      }
    });
    const [result] = await retry!;
    const records = await h.db.selectFrom('usage_records').select('id').where('session_id', '=', a).execute();
    return { result, original, records: records.map((r) => r.id) };
  }

  it('is answered as a duplicate of the record written while it waited for the session', async () => {
    const { result, original, records } = await race(false);
    expect(result).not.toBeInstanceOf(Error);
    expect(result).toMatchObject({ duplicate: true, usage: { id: original, billedMinutes: 1 } });
    expect(records).toEqual([original]);
  });

  it('is answered as a duplicate, not refused, when that batch also ended the session', async () => {
    const { result, original, records } = await race(true);
    expect(result).not.toBeInstanceOf(Error);
    expect(result).toMatchObject({ duplicate: true, usage: { id: original }, session: { status: 'completed' } });
    expect(records).toEqual([original]);
  });
});

/**
 * Two renters with two sessions each (`lo` and `hi`: the wallets by ID), `minutes` in: while another transaction holds
 * `hi`'s wallet accounts, one batch reports hi's session, then lo's, and another lo's, then hi's. Taken in report
 * order, the first would hold hi waiting for lo and the second lo waiting for hi once that transaction ends: a deadlock
 * PostgreSQL breaks after a second by failing one of them, whose updates are then retried one by one (a warning).
 */
async function opposedBatches(body: { spend_cap?: string }, minutes: number) {
  const renters = await Promise.all([parties(h, '20'), parties(h, '20')]);
  const pairs = await Promise.all(
    renters.map(async (p) => ({
      wallet: p.renter.id,
      sessions: [
        (await start(h, { ...startBody(p, H100_X1), ...body })).json().session.id as string,
        (await start(h, { ...startBody(p, H100_X1), ...body })).json().session.id as string,
      ],
    })),
  );
  const [lo, hi] = pairs.sort((a, b) => (a.wallet < b.wallet ? -1 : 1)) as [(typeof pairs)[0], (typeof pairs)[0]];
  clock.advance(minutes * 60_000);
  const warned: string[] = [];
  const logger = Object.assign(Object.create(h.ctx.logger), {
    warn: (_: unknown, msg: string) => warned.push(msg),
  }) as typeof h.ctx.logger;
  const ctx = { ...h.ctx, logger };
  const update = (sessionId: string): UsageUpdate => ({
    sender: UNCHECKED_PRINCIPAL,
    sessionId,
    messageId: `at-${minutes}`,
    timestamp: clock.now(),
    gpuUtilization: 50,
    powerDrawW: 300,
  });
  const waiting = (n: number) => lockWaiters(h.db, n);
  let first: ReturnType<typeof applyUsageBatch> | undefined;
  let second: ReturnType<typeof applyUsageBatch> | undefined;
  await h.db.transaction().execute(async (trx) => {
    await sql`SELECT 1 FROM ledger_accounts WHERE wallet_id = ${hi.wallet} FOR UPDATE`.execute(trx);
    first = applyUsageBatch(ctx, [update(hi.sessions[0]!), update(lo.sessions[0]!)]);
    await waiting(1);
    second = applyUsageBatch(ctx, [update(lo.sessions[1]!), update(hi.sessions[1]!)]);
    await waiting(2);
  });
  const results = [...(await first!), ...(await second!)];
  return { sessions: [...lo.sessions, ...hi.sessions], results, warned };
}

describe('concurrent batches reaching the same wallets', () => {
  it('top up holds with the wallets locked in one order, whatever order their reports came in: no deadlock', async () => {
    // 55 minutes in, every hold (an hour's) is due a top-up, which locks the renter's wallet accounts.
    const { sessions, results, warned } = await opposedBatches({}, 55);
    for (const r of results) expect(r).not.toBeInstanceOf(Error);
    expect(warned).toEqual([]);
    const holds = await h.db
      .selectFrom('rental_sessions')
      .innerJoin('holds', 'holds.id', 'rental_sessions.hold_id')
      .select('holds.amount')
      .where('rental_sessions.id', 'in', sessions)
      .execute();
    // Each hold topped up once: the hour and ten minutes' worth of a 5.10/h session, 55 minutes billed.
    expect(holds.map((r) => r.amount)).toEqual(Array(4).fill(holds[0]!.amount));
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('end sessions with the wallets locked in one order too: no deadlock, each paid once', async () => {
    // H100 × 1 at 0.085 a minute under a cap of 0.2: the cap is spent in minute 3, and the report ends the session
    // (its payment posted from the renter's wallet accounts).
    const { sessions, results, warned } = await opposedBatches({ spend_cap: '0.2' }, 3);
    for (const r of results) expect(r).not.toBeInstanceOf(Error);
    expect(warned).toEqual([]);
    const rows = await h.db
      .selectFrom('rental_sessions')
      .select(['status', 'end_reason', 'total_cost'])
      .where('id', 'in', sessions)
      .execute();
    expect(rows).toEqual(Array(4).fill({ status: 'completed', end_reason: 'spend_cap', total_cost: '0.200000' }));
    const payments = await h.db
      .selectFrom('transactions')
      .select(['reference', 'amount'])
      .where('type', '=', 'payment')
      .where(
        'reference',
        'in',
        sessions.map((id) => `session:${id}`),
      )
      .execute();
    // Each session paid once: the renter's payment of the cap and the provider's earnings (less the platform's 5 %).
    expect(
      sessions.map((id) =>
        payments
          .filter((p) => p.reference === `session:${id}`)
          .map((p) => p.amount)
          .sort(),
      ),
    ).toEqual(Array(4).fill(['0.190000', '0.200000']));
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });
});

describe("a batch's session writes", () => {
  it('land where the row lock found each row, and by ID on a row the transaction itself moved since', async () => {
    const [still, moved] = [await runningSession(), await runningSession()];
    const change = (id: string, at: string) => ({
      id,
      minutes: 7,
      cost: new Dec('0.595'),
      status: 'active' as const,
      graceUntil: null,
      lowBalanceAt: null,
      usage: { actualPowerW: '321', lastUsageAt: clock.now() },
      at,
    });
    const written = await h.db.transaction().execute(async (trx) => {
      const opened = new Map((await openUsageBatch(trx, [still, moved], [])).map((s) => [s.id, s]));
      // The same transaction writes one row after locking it: the row's version it locked is no longer the newest.
      await sql`UPDATE rental_sessions SET end_reason = NULL WHERE id = ${moved}`.execute(trx);
      return writeBilledSessions(
        trx,
        [change(still, opened.get(still)!.at), change(moved, opened.get(moved)!.at)],
        clock.now(),
        h.ctx.scale,
      );
    });
    expect([...written.keys()].sort()).toEqual([still, moved].sort());
    const rows = await h.db
      .selectFrom('rental_sessions')
      .select([
        'id',
        'billed_minutes',
        'total_cost',
        'status',
        'grace_until',
        'low_balance_at',
        'updated_at',
        'actual_power_w',
        'last_usage_at',
      ])
      .where('id', 'in', [still, moved])
      .execute();
    for (const r of rows) {
      expect(r.billed_minutes).toBe(7);
      expect(new Dec(r.total_cost).eq('0.595')).toBe(true);
      expect(r.actual_power_w).toBe('321');
      // What the write answers (not read back) is what the table now reads, to the money's padded scale.
      expect(written.get(r.id)).toEqual(r);
    }
  });

  it('answer a session billed without a report with its power and last report as they were', async () => {
    const id = await runningSession();
    await sql`UPDATE rental_sessions SET actual_power_w = 455.5, last_usage_at = ${clock.now()} WHERE id = ${id}`.execute(
      h.db,
    );
    const written = await h.db.transaction().execute((trx) =>
      writeBilledSessions(
        trx,
        [
          {
            id,
            minutes: 3,
            cost: new Dec('0.25'),
            status: 'grace_period',
            graceUntil: clock.now(),
            lowBalanceAt: null,
          },
        ],
        clock.now(),
        h.ctx.scale,
      ),
    );
    const row = await h.db.selectFrom('rental_sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    expect(written.get(id)).toEqual({
      id,
      billed_minutes: 3,
      total_cost: row.total_cost,
      status: 'grace_period',
      grace_until: row.grace_until,
      low_balance_at: null,
      updated_at: row.updated_at,
      actual_power_w: '455.5',
    });
    expect(row.total_cost).toBe(new Dec('0.25').toFixed(h.ctx.scale));
    expect(row.last_usage_at).toEqual(clock.now());
  });
});
