/** Sessions' workloads (`session_workloads`, migration 0016). */
import type { Kysely, Selectable, Transaction, Updateable } from 'kysely';
import type { BillingDB, SessionStatus, SessionWorkloadTable } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export type WorkloadRow = Selectable<SessionWorkloadTable>;

/** Writes a new session's workload, `pending`. */
export async function insertWorkload(trx: Db, sessionId: string, spec: object, now: Date): Promise<WorkloadRow> {
  return trx
    .insertInto('session_workloads')
    .values({
      session_id: sessionId,
      spec: JSON.stringify(spec),
      state: 'pending',
      created_at: now,
      updated_at: now,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** The session's workload, or undefined when it runs none. */
export async function findWorkload(db: Db, sessionId: string): Promise<WorkloadRow | undefined> {
  return db.selectFrom('session_workloads').selectAll().where('session_id', '=', sessionId).executeTakeFirst();
}

/** Writes a change of the workload's state (in the caller's transaction, the session's row locked). */
export async function updateWorkload(
  trx: Transaction<BillingDB>,
  sessionId: string,
  change: Updateable<SessionWorkloadTable>,
): Promise<WorkloadRow> {
  return trx
    .updateTable('session_workloads')
    .set(change)
    .where('session_id', '=', sessionId)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Notes that the ended workload's final checkpoint was said (kept, or none), once. */
export async function markFinalCheckpointSaid(db: Db, sessionId: string, now: Date): Promise<void> {
  await db
    .updateTable('session_workloads')
    .set({ final_checkpoint_at: now })
    .where('session_id', '=', sessionId)
    .where('final_checkpoint_at', 'is', null)
    .execute();
}

/** Up to `limit` running sessions whose workload has waited to run since before `before`, oldest first. */
export async function sessionsWaitingSince(db: Db, before: Date, limit: number): Promise<string[]> {
  const rows = await db
    .selectFrom('session_workloads as w')
    .innerJoin('rental_sessions as s', 's.id', 'w.session_id')
    .select('w.session_id')
    .where('w.state', 'in', ['pending', 'preparing'])
    .where('w.created_at', '<', before)
    .where('s.status', 'in', ['active', 'grace_period'])
    .orderBy('w.created_at')
    .limit(limit)
    .execute();
  return rows.map((r) => r.session_id);
}

/**
 * Records the objects a workload's daemon uploaded from its output directory, and the files it did not keep with why
 * (replacing what it said before).
 */
export async function recordOutputs(
  db: Db,
  sessionId: string,
  outputs: { bucket?: string; key: string; size: number }[],
  refused: { path: string; reason: string }[],
  now: Date,
): Promise<void> {
  await db
    .updateTable('session_workloads')
    .set({ outputs: JSON.stringify(outputs), outputs_refused: JSON.stringify(refused), updated_at: now })
    .where('session_id', '=', sessionId)
    .execute();
}

/** Which of the sessions are in one of `statuses` with their workload running. */
export async function sessionsWithRunningWorkload(
  db: Db,
  ids: readonly string[],
  statuses: readonly SessionStatus[],
): Promise<string[]> {
  const rows = await db
    .selectFrom('rental_sessions as s')
    .innerJoin('session_workloads as w', 'w.session_id', 's.id')
    .select('s.id')
    .where('s.id', 'in', [...ids])
    .where('s.status', 'in', [...statuses])
    .where('w.state', '=', 'running')
    .execute();
  return rows.map((r) => r.id);
}
