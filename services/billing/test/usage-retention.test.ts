/**
 * Usage records are kept for `billing.usage_retention` after their session ended: then the purge deletes them, and
 * only them (the session, its billing record and its charges stay), never a running session's or a recent one's.
 */
import { describe, expect, it } from 'vitest';
import { purgeOldUsageRecords } from '../src/domain/sessions/index.ts';
import { end, H100_X1, manualClock, parties, start, startBody } from './support/sessions.ts';
import { useBillingHarness } from './support/setup.ts';

const clock = manualClock();
const h = useBillingHarness({ now: clock.now });
const DAY = 24 * 3600_000;
const RETENTION = 90 * DAY;

async function sessionWithUsage(reports: number) {
  const p = await parties(h, '2000');
  const id = (await start(h, startBody(p, H100_X1))).json().session.id as string;
  for (let i = 0; i < reports; i++) {
    clock.advance(60_000);
    const res = await h.app.inject({
      method: 'POST',
      url: '/api/v1/billing/usage-update',
      payload: {
        session_id: id,
        message_id: `m-${i}`,
        timestamp: clock.now().toISOString(),
        gpu_utilization: 90,
        power_draw_w: 300,
      },
    });
    expect(res.statusCode).toBe(201);
  }
  return id;
}

const records = async (sessionId: string) =>
  (await h.db.selectFrom('usage_records').select('id').where('session_id', '=', sessionId).execute()).length;

describe('usage records past their retention', () => {
  it("are deleted once their session ended longer ago than usage_retention; the session's bill stays", async () => {
    const old = await sessionWithUsage(3);
    await end(h, old);
    const billedBefore = await h.db
      .selectFrom('rental_sessions')
      .select(['billed_minutes', 'total_cost', 'status'])
      .where('id', '=', old)
      .executeTakeFirstOrThrow();
    clock.advance(RETENTION - DAY);
    const recent = await sessionWithUsage(2);
    await end(h, recent);
    const running = await sessionWithUsage(2);
    clock.advance(2 * DAY);

    const purged = await purgeOldUsageRecords(h.ctx, RETENTION);
    expect(purged).toEqual({ sessions: 1, records: 3 });
    expect(await records(old)).toBe(0);
    expect(await records(recent)).toBe(2);
    expect(await records(running)).toBe(2);
    const after = await h.db
      .selectFrom('rental_sessions')
      .select(['billed_minutes', 'total_cost', 'status', 'usage_purged'])
      .where('id', '=', old)
      .executeTakeFirstOrThrow();
    expect(after).toEqual({ ...billedBefore, usage_purged: true });
    const bill = await h.db.selectFrom('billing_records').select('total_cost').where('session_id', '=', old).execute();
    expect(bill).toHaveLength(1);

    // Once is all: a second run finds nothing, and the ended session's records go only when their time comes.
    expect(await purgeOldUsageRecords(h.ctx, RETENTION)).toEqual({ sessions: 0, records: 0 });
    clock.advance(RETENTION);
    expect(await purgeOldUsageRecords(h.ctx, RETENTION)).toEqual({ sessions: 1, records: 2 });
    expect(await records(running)).toBe(2);
  });
});
