/** Renters' jobs and their attempts (`jobs`, `job_attempts`, migration 0028; domain/jobs/). */
import { cursorAt, type KeysetPosition, olderThan } from '@gpu/common';
import {
  type Insertable,
  type Kysely,
  type Selectable,
  type SqlBool,
  sql,
  type Transaction,
  type Updateable,
} from 'kysely';
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

/** How many of the user's jobs have not ended (queued, placing, running or recovering). */
export async function countOpenJobs(db: Db, userId: string): Promise<number> {
  const row = await db
    .selectFrom('jobs')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('user_id', '=', userId)
    .where('ended_at', 'is', null)
    .executeTakeFirst();
  return Number(row?.n ?? 0);
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
 * now (with `waiting`, those waiting out their retry too), queued jobs past their queue timeout, and placements whose
 * placer's time ran out (killed mid-way, or too slow). Renters take turns (`turnOrder`): each renter's first due job,
 * then each one's second, and so on, so that a renter's thousand queued jobs hold back no one else's.
 */
export async function claimJobsToPlace(
  trx: Transaction<BillingDB>,
  now: Date,
  limit: number,
  waiting = false,
): Promise<JobRow[]> {
  const due = (t: 'jobs' | 'd') => {
    const c = (column: string) => sql.ref(`${t}.${column}`);
    return sql<SqlBool>`(
      (${c('state')} IN ('queued', 'recovering')
        ${waiting ? sql`` : sql`AND ${c('place_after')} <= ${now}`}
        -- An ended attempt's final checkpoint still on its way: not even a wake for capacity places it sooner.
        AND (${c('final_checkpoint_until')} IS NULL OR ${c('final_checkpoint_until')} <= ${now}))
      OR (${c('state')} = 'queued' AND ${c('queued_until')} <= ${now})
      OR (${c('state')} = 'placing' AND ${c('placing_until')} < ${now}))`;
  };
  return (
    trx
      .selectFrom('jobs')
      .innerJoin(
        (eb) =>
          eb
            .selectFrom('jobs as d')
            .select(['d.id', turnOrder('d').as('turn')])
            .where(due('d'))
            .as('due'),
        (join) => join.onRef('due.id', '=', 'jobs.id'),
      )
      .selectAll('jobs')
      // Again on the row as locked: a job another placer changed meanwhile is looked at as it is now.
      .where(due('jobs'))
      .orderBy('due.turn')
      .orderBy('jobs.place_after')
      .orderBy('jobs.id')
      .limit(limit)
      .forUpdate('jobs')
      .skipLocked()
      .execute()
  );
}

/** A job's turn among its renter's: 1 for the renter's earliest (by `place_after`), 2 for the next. */
const turnOrder = (t: 'd' | 'q') =>
  sql<number>`row_number() OVER (PARTITION BY ${sql.ref(`${t}.user_id`)} ORDER BY ${sql.ref(`${t}.place_after`)}, ${sql.ref(`${t}.id`)})`;

/**
 * The earliest time still ahead at which a waiting job must be looked at again without a wake: a queued job's queue
 * timeout, or the end of a job's wait for its last attempt's final checkpoint (null: none).
 */
export async function nextQueueTimeout(db: Db, now: Date): Promise<Date | null> {
  // Only times still ahead: one passed is a round's already (every `place_interval` claims it), and a wait that ended
  // unanswered keeps its time on the row, which taken for a deadline woke the placer every 100 ms until placed.
  const ahead = (column: 'queued_until' | 'final_checkpoint_until') =>
    sql<Date | null>`CASE WHEN ${sql.ref(column)} > ${now} THEN ${sql.ref(column)} END`;
  const row = await db
    .selectFrom('jobs')
    .select((eb) =>
      eb.fn
        .min(
          sql<Date>`CASE WHEN state = 'queued' THEN LEAST(${ahead('queued_until')}, ${ahead('final_checkpoint_until')}) ELSE ${ahead('final_checkpoint_until')} END`,
        )
        .as('at'),
    )
    .where('state', 'in', ['queued', 'recovering'])
    .executeTakeFirst();
  return row?.at ? new Date(row.at) : null;
}

/**
 * The job's attempt of `sessionId` kept its final checkpoint: a wait for it ends now. Whether the job was waiting for
 * it (its placer should be woken).
 */
export async function endFinalCheckpointWait(db: Db, jobId: string, sessionId: string, now: Date): Promise<boolean> {
  const updated = await db
    .updateTable('jobs')
    .set({ final_checkpoint_until: null })
    .where('id', '=', jobId)
    .where('session_id', '=', sessionId)
    .where('final_checkpoint_until', 'is not', null)
    .where('final_checkpoint_until', '>', now)
    .executeTakeFirst();
  return updated.numUpdatedRows > 0n;
}

/** The job runs this session of its (placed, or adopted): nothing waits, no placement holds it. */
export async function runJobSession(db: Db, jobId: string, sessionId: string, now: Date): Promise<void> {
  await updateJob(db, jobId, {
    state: 'running',
    reason: null,
    session_id: sessionId,
    placing_until: null,
    updated_at: now,
  });
}

/** The `job_id` of a job's sessions: a name start-session refuses to its callers (routes/sessions.ts). */
export const sessionJobId = (jobId: string) => `job:${jobId}`;

/** The job a session runs for (its `job_id` is `job:<job ID>`), or null for a session of the renter's own. */
export const jobOfSession = (sessionJobIdField: string): string | null =>
  sessionJobIdField.startsWith('job:') ? sessionJobIdField.slice(4) : null;

/**
 * The job's checkpoint is the one its attempt of session `sessionId` kept last (the last said is restored next),
 * unless the job already points at one of a later attempt: a machine taken for dead that says what it kept after the
 * next attempt kept its own never takes the job back to older work. False when it did not.
 */
export async function recordJobCheckpoint(
  db: Db,
  jobId: string,
  sessionId: string,
  size: number,
  at: Date,
): Promise<boolean> {
  const updated = await db
    .updateTable('jobs')
    .set({ checkpoint_session: sessionId, checkpoint_size: size, checkpoint_at: at, updated_at: at })
    .where('id', '=', jobId)
    .where(
      sql<SqlBool>`checkpoint_session IS NULL OR
        (SELECT n FROM job_attempts a WHERE a.job_id = jobs.id AND a.session_id = jobs.checkpoint_session) <=
        (SELECT n FROM job_attempts a WHERE a.job_id = jobs.id AND a.session_id = ${sessionId})`,
    )
    .executeTakeFirst();
  return updated.numUpdatedRows > 0n;
}

/** The job's session that runs now (one at most: `rental_sessions_running_job`), if any. */
export async function runningSessionOfJob(
  db: Db,
  jobId: string,
): Promise<{ id: string; provider_id: string } | undefined> {
  return db
    .selectFrom('rental_sessions')
    .select(['id', 'provider_id'])
    .where('job_id', '=', sessionJobId(jobId))
    .where('status', 'in', ['active', 'grace_period'])
    .executeTakeFirst();
}

/**
 * The number of the job's attempt placed after the one of session `sessionId` (null: none, or not a job's session):
 * the job moved on from that attempt, whose machine was taken for dead or whose end was settled.
 */
export async function laterAttemptThan(db: Db, sessionId: string): Promise<number | null> {
  const row = await db
    .selectFrom('job_attempts as mine')
    .innerJoin('job_attempts as later', (join) =>
      join.onRef('later.job_id', '=', 'mine.job_id').onRef('later.n', '>', 'mine.n'),
    )
    .select((eb) => eb.fn.max('later.n').as('n'))
    .where('mine.session_id', '=', sessionId)
    .executeTakeFirst();
  return row?.n == null ? null : Number(row.n);
}

/** The attempt whose session this is, locked. */
export async function findAttempt(trx: Transaction<BillingDB>, sessionId: string): Promise<JobAttemptRow | undefined> {
  return trx.selectFrom('job_attempts').selectAll().where('session_id', '=', sessionId).forUpdate().executeTakeFirst();
}

/** Writes the next attempt of the job (numbered after its last) and counts it on the job. */
export async function addAttempt(
  trx: Transaction<BillingDB>,
  row: Omit<Insertable<JobAttemptTable>, 'n'>,
): Promise<number> {
  const last = await trx
    .selectFrom('job_attempts')
    .select((eb) => eb.fn.max('n').as('n'))
    .where('job_id', '=', row.job_id)
    .executeTakeFirst();
  const n = Number(last?.n ?? 0) + 1;
  await trx
    .insertInto('job_attempts')
    .values({ ...row, n })
    .execute();
  await countAttempts(trx, row.job_id);
  return n;
}

/** Takes back an attempt whose session was never started, and counts the job's attempts again; false: it started. */
export async function dropAttempt(trx: Transaction<BillingDB>, jobId: string, sessionId: string): Promise<boolean> {
  // The job first, as every writer of its attempts locks it (and the count below then reads what they committed).
  await findJob(trx, jobId, true);
  // Its session started after all (a start's commit whose answer was lost): kept.
  if (await sessionOutcome(trx, sessionId)) return false;
  await trx.deleteFrom('job_attempts').where('session_id', '=', sessionId).where('ended_at', 'is', null).execute();
  await countAttempts(trx, jobId);
  return true;
}

async function countAttempts(trx: Transaction<BillingDB>, jobId: string): Promise<void> {
  await trx
    .updateTable('jobs')
    .set((eb) => ({
      attempts: eb
        .selectFrom('job_attempts')
        .select((c) => c.fn.countAll<number>().as('n'))
        .where('job_id', '=', jobId),
    }))
    .where('id', '=', jobId)
    .execute();
}

/**
 * Attempts the follower has to settle, oldest first: not ended, and their session ended, or running while its job
 * does not follow it (a placer that lost its lease, a job cancelled or failed meanwhile), or never started though
 * begun before `stale` (its placer died before starting it).
 */
export async function attemptsToSettle(
  db: Db,
  now: Date,
  stale: Date,
  limit: number,
): Promise<{ job_id: string; session_id: string }[]> {
  return db
    .selectFrom('job_attempts as a')
    .innerJoin('jobs as j', 'j.id', 'a.job_id')
    .leftJoin('rental_sessions as s', 's.id', 'a.session_id')
    .select(['a.job_id', 'a.session_id'])
    .where('a.ended_at', 'is', null)
    .where((eb) =>
      eb.or([
        eb('s.status', 'in', ['completed', 'terminated']),
        eb.and([
          eb('s.id', 'is not', null),
          eb.not(eb.and([eb('j.state', '=', 'running'), eb('j.session_id', '=', eb.ref('a.session_id'))])),
          eb.not(eb.and([eb('j.state', '=', 'placing'), eb('j.placing_until', '>', now)])),
        ]),
        eb.and([eb('s.id', 'is', null), eb('a.started_at', '<', stale)]),
      ]),
    )
    .orderBy('a.started_at')
    .limit(limit)
    .execute();
}

/** The session's state and, once it ended, its cost and reason and its workload's end; undefined: no such session. */
export async function sessionOutcome(
  db: Db,
  sessionId: string,
): Promise<
  | {
      status: string;
      ended_at: Date | null;
      end_reason: string | null;
      total_cost: string | null;
      workload_state: string | null;
      exit_code: number | null;
      final_checkpoint_at: Date | null;
    }
  | undefined
> {
  return db
    .selectFrom('rental_sessions as s')
    .leftJoin('billing_records as b', 'b.session_id', 's.id')
    .leftJoin('session_workloads as w', 'w.session_id', 's.id')
    .select([
      's.status',
      's.ended_at',
      's.end_reason',
      'b.total_cost',
      'w.state as workload_state',
      'w.exit_code',
      'w.final_checkpoint_at',
    ])
    .where('s.id', '=', sessionId)
    .executeTakeFirst();
}

/**
 * The place of each queued job in the queue (1: next), as the placer takes them: by its turn among its renter's queued
 * jobs (`turnOrder`), then by when it was queued.
 */
export async function queuePositions(db: Db, ids: readonly string[]): Promise<Map<string, number>> {
  if (ids.length === 0) return new Map();
  const { rows } = await sql<{ id: string; position: string }>`
    WITH queue AS (
      SELECT q.id, q.place_after, ${turnOrder('q')} AS turn FROM jobs q WHERE q.state IN ('queued', 'recovering')
    )
    SELECT mine.id,
      (SELECT count(*) FROM queue q WHERE (q.turn, q.place_after, q.id) <= (mine.turn, mine.place_after, mine.id))
        AS position
    FROM queue mine
    WHERE mine.id IN (${sql.join(ids)})`.execute(db);
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
