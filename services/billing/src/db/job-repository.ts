/** Renters' jobs and their attempts (`jobs`, `job_attempts`, migration 0028; domain/jobs/). */
import { cursorAt, type KeysetPosition, olderThan } from '@gpu/common';
import { type Insertable, type Kysely, type Selectable, sql, type Transaction, type Updateable } from 'kysely';
import type { BillingDB, JobAttemptTable, JobState, JobTable } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export type JobRow = Selectable<JobTable>;
export type JobAttemptRow = Selectable<JobAttemptTable>;

export async function insertJob(db: Db, row: Insertable<JobTable>): Promise<JobRow> {
  return db.insertInto('jobs').values(row).returningAll().executeTakeFirstOrThrow();
}

export async function findJob(db: Db, id: string, forUpdate = false): Promise<JobRow | undefined> {
  const q = db.selectFrom('jobs').selectAll().where('id', '=', id);
  return (forUpdate ? q.forUpdate() : q).executeTakeFirst();
}

/** The renter's job submitted with this idempotency key, if any. */
export async function findJobByKey(db: Db, userId: string, key: string): Promise<JobRow | undefined> {
  return db
    .selectFrom('jobs')
    .selectAll()
    .where('user_id', '=', userId)
    .where('idempotency_key', '=', key)
    .executeTakeFirst();
}

export async function updateJob(db: Db, id: string, change: Updateable<JobTable>): Promise<JobRow> {
  return db.updateTable('jobs').set(change).where('id', '=', id).returningAll().executeTakeFirstOrThrow();
}

/** The job's attempts, first first. */
export async function attemptsOf(db: Db, jobIds: readonly string[]): Promise<JobAttemptRow[]> {
  if (jobIds.length === 0) return [];
  return db.selectFrom('job_attempts').selectAll().where('job_id', 'in', jobIds).orderBy('n').execute();
}

export async function insertAttempt(db: Db, row: Insertable<JobAttemptTable>): Promise<void> {
  await db.insertInto('job_attempts').values(row).execute();
}

export async function endAttempt(
  db: Db,
  jobId: string,
  sessionId: string,
  change: { ended_at: Date; cost: string; end_reason: string },
): Promise<void> {
  await db
    .updateTable('job_attempts')
    .set(change)
    .where('job_id', '=', jobId)
    .where('session_id', '=', sessionId)
    .execute();
}

/**
 * Claims up to `limit` jobs to place, locked, skipping those another placer holds: queued and recovering jobs due
 * now, and placements whose placer's time ran out (killed mid-way, or too slow).
 */
export async function claimJobsToPlace(trx: Transaction<BillingDB>, now: Date, limit: number): Promise<JobRow[]> {
  return trx
    .selectFrom('jobs')
    .selectAll()
    .where((eb) =>
      eb.or([
        eb.and([eb('state', 'in', ['queued', 'recovering']), eb('place_after', '<=', now)]),
        eb.and([eb('state', '=', 'placing'), eb('placing_until', '<', now)]),
      ]),
    )
    .orderBy('place_after')
    .limit(limit)
    .forUpdate()
    .skipLocked()
    .execute();
}

/** Running jobs whose session has ended, locked (skipping those another follower holds). */
export async function claimEndedRunningJobs(trx: Transaction<BillingDB>, limit: number): Promise<JobRow[]> {
  return trx
    .selectFrom('jobs')
    .selectAll('jobs')
    .where('jobs.state', '=', 'running')
    .where(({ exists, selectFrom }) =>
      exists(
        selectFrom('rental_sessions as s')
          .select('s.id')
          .whereRef('s.id', '=', 'jobs.session_id')
          .where('s.status', 'in', ['completed', 'terminated']),
      ),
    )
    .limit(limit)
    .forUpdate()
    .skipLocked()
    .execute();
}

/** The job's session that runs now (one at most: `rental_sessions_running_job`), if any. */
export async function runningSessionOfJob(
  db: Db,
  jobId: string,
): Promise<{ id: string; provider_id: string } | undefined> {
  return db
    .selectFrom('rental_sessions')
    .select(['id', 'provider_id'])
    .where('job_id', '=', jobId)
    .where('status', 'in', ['active', 'grace_period'])
    .executeTakeFirst();
}

/** How the session ended: its billing record's cost and reason, and its workload's end. */
export async function sessionOutcome(
  db: Db,
  sessionId: string,
): Promise<{
  ended_at: Date | null;
  end_reason: string | null;
  total_cost: string | null;
  workload_state: string | null;
  exit_code: number | null;
}> {
  const row = await db
    .selectFrom('rental_sessions as s')
    .leftJoin('billing_records as b', 'b.session_id', 's.id')
    .leftJoin('session_workloads as w', 'w.session_id', 's.id')
    .select(['s.ended_at', 's.end_reason', 'b.total_cost', 'w.state as workload_state', 'w.exit_code'])
    .where('s.id', '=', sessionId)
    .executeTakeFirstOrThrow();
  return row;
}

/** The place of each queued job among all queued jobs (1: next), by when it was queued. */
export async function queuePositions(db: Db, ids: readonly string[]): Promise<Map<string, number>> {
  if (ids.length === 0) return new Map();
  const rows = await db
    .selectFrom('jobs as j')
    .select([
      'j.id',
      sql<string>`(SELECT count(*) FROM jobs q WHERE q.state IN ('queued', 'recovering')
        AND (q.place_after, q.id) <= (j.place_after, j.id))`.as('position'),
    ])
    .where('j.id', 'in', ids)
    .where('j.state', 'in', ['queued', 'recovering'])
    .execute();
  return new Map(rows.map((r) => [r.id, Number(r.position)]));
}

/** The user's jobs, newest first (keyset paging on `created_at`), optionally of some states. */
export async function listJobs(
  db: Db,
  f: { userId?: string; states?: readonly JobState[]; after?: KeysetPosition; limit: number },
): Promise<(JobRow & { cursor_at: string })[]> {
  let q = db.selectFrom('jobs').selectAll().select(cursorAt('created_at').as('cursor_at'));
  if (f.userId) q = q.where('user_id', '=', f.userId);
  if (f.states && f.states.length > 0) q = q.where('state', 'in', f.states);
  if (f.after) q = q.where(olderThan('created_at', f.after));
  return q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(f.limit).execute();
}
