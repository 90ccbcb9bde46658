/**
 * Usage updates from provider daemons (HTTP or NATS): one usage record per
 * message ID and session (a duplicate answers the first record and changes
 * nothing), elapsed time billed (billing.ts), `actual_power_w` taken
 * from the newest report only, so updates may arrive late, twice or out of
 * order. A session that is not running refuses new updates
 * (SESSION_NOT_ACTIVE), a report dated beyond the allowed clock skew in the
 * future or before its session started is refused
 * (USAGE_TIMESTAMP_OUT_OF_RANGE); a session whose grace period is over is
 * terminated.
 *
 * Group commit: updates that arrive together (concurrent HTTP requests, a
 * NATS fetch) are applied in one database transaction: the batch's sessions
 * are locked in one statement (in ID order, so concurrent batches and
 * instances never deadlock on them), de-duplicated, billed and written with a
 * handful of set-based statements, whatever the batch size. An update that is
 * refused (unknown session, ended session) is answered on its own and leaves
 * the rest of the batch alone; should the batch's transaction fail, each of
 * its updates is retried in a transaction of its own, so one bad update never
 * fails another.
 */
import { randomUUID } from 'node:crypto';
import { GroupCommit } from '@gpu/common';
import type { Transaction } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';
import { findSessions } from '../../db/session-repository.ts';
import { isUniqueViolation } from '../../db/unique-violation.ts';
import {
  appliedUsageRecords,
  type Billable,
  type OpenedSession,
  openUsageBatch,
  type UsageRow,
} from '../../db/usage-repository.ts';
import { billingErrors } from '../../errors.ts';
import { mayReportUsage, notSessionProvider } from '../access.ts';
import type { BillingContext } from '../context.ts';
import { stateNotedLeases } from '../leases/index.ts';
import { Dec, formatAmount } from '../ledger/index.ts';
import {
  type BillItem,
  type BillOutcome,
  type BillPlan,
  compareForLocks,
  planBillings,
  recordBillingEvents,
  writeBillings,
} from './billing.ts';
import { finishSession } from './end.ts';
import { isRunning, type SessionRow } from './session.ts';
import type {
  BatchedUsageResult,
  BatchedUsageUpdate,
  UsageOutcome,
  UsageRecord,
  UsageResult,
  UsageUpdate,
} from './usage-message.ts';

export type { BatchedUsageUpdate, UsageOutcome, UsageResult, UsageUpdate } from './usage-message.ts';

/** A usage record from its row (the cost at the token's scale). */
function toUsageRecord(r: UsageRow, scale: number): UsageRecord {
  return {
    id: r.id,
    sessionId: r.session_id,
    messageId: r.message_id,
    reportedAt: new Date(r.reported_at),
    gpuUtilization: Number(r.gpu_utilization),
    powerDrawW: Number(r.power_draw_w),
    metrics: (r.metrics ?? null) as Record<string, unknown> | null,
    billedMinutes: r.billed_minutes,
    cost: formatAmount(r.cost, scale),
    createdAt: new Date(r.created_at),
  };
}

/**
 * One update's outcome. Its usage record takes the answer's form (the cost at the token's scale, dates) only when read:
 * an answer over NATS, a status per report, never reads it.
 */
class Applied implements BatchedUsageResult {
  #usage: UsageRecord | undefined;
  readonly #record: UsageRow;
  readonly #scale: number;
  constructor(
    readonly duplicate: boolean,
    record: UsageRow,
    scale: number,
    readonly session: SessionRow | undefined,
  ) {
    this.#record = record;
    this.#scale = scale;
  }

  get usage(): UsageRecord {
    this.#usage ??= toUsageRecord(this.#record, this.#scale);
    return this.#usage;
  }
}

/**
 * Most updates applied in one transaction; most batches in flight per service instance, and when they are full (a
 * backlog: PostgreSQL works on some while the service prepares the next; with two, the two took turns and a fifth of
 * the machine stood idle, while a light load in four small batches cost more per update than in two).
 */
const MAX_BATCH = 256;
const MAX_IN_FLIGHT = 2;
const MAX_IN_FLIGHT_FULL = 4;

function submit(ctx: BillingContext, u: BatchedUsageUpdate): Promise<BatchedUsageResult> {
  ctx.state.usageBatcher ??= new GroupCommit((updates) => applyUsageBatch(ctx, updates), {
    maxBatch: MAX_BATCH,
    maxInFlight: MAX_IN_FLIGHT,
    maxInFlightFull: MAX_IN_FLIGHT_FULL,
  });
  return ctx.state.usageBatcher.submit(u);
}

/**
 * Applies one usage update exactly once (grouped with concurrent ones); `duplicate` when already applied. Answers the
 * session as the update's transaction left it (HTTP's answer).
 */
export async function applyUsageUpdate(ctx: BillingContext, u: UsageUpdate): Promise<UsageResult> {
  const { duplicate, usage, session } = await submit(ctx, { ...u, withSession: true });
  if (!session) throw new Error(`usage batch answered no session for ${u.sessionId}`);
  return { duplicate, usage, session };
}

/**
 * Applies one usage update as `applyUsageUpdate` does, answering only its outcome (a daemon's status per report over
 * NATS): a batch of such updates reads no session's whole row.
 */
export function applyUsageReport(ctx: BillingContext, u: UsageUpdate): Promise<UsageOutcome> {
  return submit(ctx, u);
}

/**
 * Applies updates in one transaction; one result per update, in order (an Error for a refused one), with the session
 * for an update that asks for it (`withSession`).
 */
export async function applyUsageBatch(
  ctx: BillingContext,
  updates: BatchedUsageUpdate[],
): Promise<(BatchedUsageResult | Error)[]> {
  const apply = () => ctx.db.transaction().execute((trx) => applyInTransaction(ctx, trx, updates));
  try {
    try {
      return await apply();
    } catch (err) {
      // A retry that raced its original in another batch: its record came while this batch waited for the
      // session's lock (`openUsageBatch`). Run again, the batch finds it and answers a duplicate.
      if (!isUniqueViolation(err, 'usage_records_message_unique')) throw err;
      return await apply();
    }
  } catch (err) {
    if (updates.length === 1) return [err as Error];
    ctx.logger.warn(
      { err: (err as Error).message, updates: updates.length },
      'usage batch failed; applying its updates one by one',
    );
    const results: (BatchedUsageResult | Error)[] = [];
    for (const u of updates) results.push(...(await applyUsageBatch(ctx, [u])));
    return results;
  }
}

/** What becomes of one update in its batch. */
type Verdict =
  | { kind: 'refused'; error: Error; ended?: boolean }
  | { kind: 'duplicate'; sessionId: string; record: UsageRow }
  | { kind: 'repeat'; sessionId: string; of: number }
  | { kind: 'new'; sessionId: string };

async function applyInTransaction(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  updates: BatchedUsageUpdate[],
): Promise<(BatchedUsageResult | Error)[]> {
  const opened = await openUsageBatch(trx, [...new Set(updates.map((u) => u.sessionId))], updates);
  const sessions = new Map<string, LockedSession>();
  const applied = new Map<string, UsageRow>();
  // The row stands as the session's billable columns (billing reads none of its extra `held`, `applied` and `at`).
  for (const row of opened) {
    sessions.set(row.id, { row, held: new Dec(row.held) });
    for (const r of row.applied) applied.set(recordKey(r.session_id, r.message_id), r);
  }

  // Classify in arrival order: the first of a repeated message ID is applied, the rest are its duplicates.
  const firstInBatch = new Map<string, number>();
  const verdicts: Verdict[] = updates.map((u, i) => {
    const session = sessions.get(u.sessionId)?.row;
    if (!session) return { kind: 'refused', error: billingErrors.sessionNotFound(u.sessionId) };
    if (!mayReportUsage(u.sender, session)) return { kind: 'refused', error: notSessionProvider(session.id) };
    const key = recordKey(u.sessionId, u.messageId);
    const before = applied.get(key);
    if (before) return { kind: 'duplicate', sessionId: u.sessionId, record: before };
    if (!isRunning(session))
      return { kind: 'refused', error: billingErrors.sessionNotActive(session.id, session.status), ended: true };
    const misdated = timestampProblem(ctx, u, session);
    if (misdated) return { kind: 'refused', error: misdated };
    const of = firstInBatch.get(key);
    if (of !== undefined) return { kind: 'repeat', sessionId: u.sessionId, of };
    firstInBatch.set(key, i);
    return { kind: 'new', sessionId: u.sessionId };
  });

  // Bill each session with new updates once, recording the newest report's power and time.
  const fresh = new Map<string, UsageUpdate[]>();
  updates.forEach((u, i) => {
    if (verdicts[i]!.kind !== 'new') return;
    const list = fresh.get(u.sessionId);
    if (list) list.push(u);
    else fresh.set(u.sessionId, [u]);
  });
  const billItems: BillItem<OpenedSession>[] = [...fresh].map(([id, list]) => {
    const { row: session, held } = sessions.get(id)!;
    const newest = list.reduce((a, b) => (b.timestamp.getTime() >= a.timestamp.getTime() ? b : a));
    const isNewest = !session.last_usage_at || newest.timestamp.getTime() >= new Date(session.last_usage_at).getTime();
    return {
      session,
      held,
      usage: isNewest ? { actualPowerW: String(newest.powerDrawW), lastUsageAt: newest.timestamp } : undefined,
      correlationId: list[0]!.correlationId,
      at: session.at,
    };
  });
  const plans = new Map<string, BillPlan<OpenedSession>>(
    (await planBillings(ctx, trx, billItems)).map((p) => [p.item.session.id, p]),
  );

  // Usage records: the session's first new update carries what this billing charged. A session that billing found
  // over (its grace ran out, its cost reached its cap) is ended by its first new update; its later ones in the batch
  // find it ended. The records are written in the sessions' statement.
  const inserted = new Map<string, UsageRow>();
  const charged = new Set<string>();
  updates.forEach((u, i) => {
    if (verdicts[i]!.kind !== 'new') return;
    const plan = plans.get(u.sessionId)!;
    const first = !charged.has(u.sessionId);
    charged.add(u.sessionId);
    if (!first && plan.end) {
      verdicts[i] = {
        kind: 'refused',
        error: billingErrors.sessionNotActive(u.sessionId, plan.end.status),
        ended: true,
      };
      return;
    }
    const row = usageRow(ctx, u, plan.minutes, first ? plan.billed : ZERO);
    inserted.set(recordKey(u.sessionId, u.messageId), row);
  });
  const outcomes = new Map<string, BillOutcome<OpenedSession>>(
    (await writeBillings(ctx, trx, [...plans.values()], [...inserted.values()])).map((o) => [o.session.id, o]),
  );

  // A report refused because its session has ended may be a retry whose original another batch applied after this
  // batch's first statement took its snapshot (openUsageBatch): read again now, under the lock, it answers as the
  // duplicate it is, as it would have in arrival order.
  const ended = verdicts.flatMap((v, i) => (v.kind === 'refused' && v.ended ? [i] : []));
  if (ended.length > 0) {
    const found = new Map(
      (
        await appliedUsageRecords(
          trx,
          ended.map((i) => updates[i]!),
        )
      ).map((r) => [recordKey(r.session_id, r.message_id), r]),
    );
    for (const i of ended) {
      const u = updates[i]!;
      const record = found.get(recordKey(u.sessionId, u.messageId));
      if (record) verdicts[i] = { kind: 'duplicate', sessionId: u.sessionId, record };
    }
  }

  // The whole rows, read once written (under the batch's locks): of the sessions whose billing raised events or ends
  // them, and of those an update answers with. Most batches need none.
  const whole = new Set<string>();
  for (const [id, outcome] of outcomes) if (outcome.events.length > 0 || outcome.end) whole.add(id);
  for (const u of updates) if (u.withSession && sessions.has(u.sessionId)) whole.add(u.sessionId);
  const rows = new Map((await findSessions(trx, [...whole])).map((r) => [r.id, r]));
  const rowOf = (id: string) => {
    const row = rows.get(id);
    if (!row) throw new Error(`session ${id} vanished from its usage batch`);
    return row;
  };
  for (const outcome of outcomes.values()) {
    if (outcome.events.length > 0) await recordBillingEvents(ctx, trx, outcome, rowOf(outcome.session.id));
  }
  // Final session state: ended as billing found it over, else as written. Ended in wallet order (as the top-ups were
  // planned): an end posts to its renter's wallet accounts, and two batches ending sessions of the same two wallets in
  // their reports' order, opposite ones, deadlocked (PostgreSQL failed one after a second, its updates retried alone).
  const finished = new Map<string, SessionRow>();
  const ends = [...outcomes].filter(([, o]) => o.end).sort(([, a], [, b]) => compareForLocks(a.session, b.session));
  for (const [id, outcome] of ends) {
    const end = await finishSession(ctx, trx, rowOf(id), outcome.end!, fresh.get(id)![0]!.correlationId);
    finished.set(id, end.session);
  }
  // Last in the transaction: the machines whose GPUs the ends freed, in machine order.
  await stateNotedLeases(ctx, trx);
  const sessionOut = (u: BatchedUsageUpdate) =>
    u.withSession ? (finished.get(u.sessionId) ?? rowOf(u.sessionId)) : undefined;

  return updates.map((u, i) => {
    const v = verdicts[i]!;
    if (v.kind === 'refused') return v.error;
    // A repeat within the batch answers as its first did: refused alike, else a duplicate of its record.
    const original = v.kind === 'repeat' ? verdicts[v.of]! : v;
    if (original.kind === 'refused') return original.error;
    const record = original.kind === 'duplicate' ? original.record : inserted.get(recordKey(u.sessionId, u.messageId))!;
    return new Applied(v.kind !== 'new', record, ctx.scale, sessionOut(u));
  });
}

/**
 * Why a report's timestamp cannot be applied to its session, or null: dated later than billing's clock plus
 * `billing.max_clock_skew` (it would stand as the session's last usage time, ahead of every true report after it), or
 * earlier than the session's start less that skew (it measured something else).
 */
function timestampProblem(ctx: BillingContext, u: UsageUpdate, session: Billable): Error | null {
  const skew = ctx.sessions.maxClockSkewMs;
  const window = {
    earliest: new Date(new Date(session.started_at).getTime() - skew),
    latest: new Date(ctx.now().getTime() + skew),
  };
  const at = u.timestamp.getTime();
  if (at > window.latest.getTime()) {
    return billingErrors.usageTimestampOutOfRange(session.id, u.timestamp, 'future', window);
  }
  if (at < window.earliest.getTime()) {
    return billingErrors.usageTimestampOutOfRange(session.id, u.timestamp, 'before_start', window);
  }
  return null;
}

const recordKey = (sessionId: string, messageId: string) => `${sessionId}\n${messageId}`;
const ZERO = new Dec(0);

/** A running session's row as locked (with where it lies), and what its hold still holds (read in the same statement). */
interface LockedSession {
  row: OpenedSession;
  held: Dec;
}

/** The usage record of an update, as it will read back from the table. */
function usageRow(ctx: BillingContext, u: UsageUpdate, billedMinutes: number, billed: Dec): UsageRow {
  return {
    id: randomUUID(),
    session_id: u.sessionId,
    message_id: u.messageId,
    reported_at: u.timestamp,
    gpu_utilization: String(u.gpuUtilization),
    power_draw_w: String(u.powerDrawW),
    metrics: u.metrics ?? null,
    billed_minutes: billedMinutes,
    cost: billed.toFixed(),
    created_at: ctx.now(),
  };
}
