/**
 * Tampering with an audit trail as someone holding the database's keys would (a superuser: every trigger set aside),
 * for the tests of its chain (@gpu/common's db/audit-verify.ts), and waiting for events to age past a retention.
 */
import { type Kysely, type RawBuilder, sql } from 'kysely';

/** Runs the statements in one transaction with the triggers off (`session_replication_role = replica`). */
export async function asIntruder<DB>(db: Kysely<DB>, ...statements: RawBuilder<unknown>[]): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await sql`SET LOCAL session_replication_role = replica`.execute(trx);
    for (const statement of statements) await statement.execute(trx);
  });
}

/** Waits until the database's clock says event `seq` is older than `ms` (a generous deadline, then fails). */
export async function untilOlder<DB>(db: Kysely<DB>, seq: number, ms: number, deadlineMs = 30_000): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const { rows } = await sql<{ old: boolean }>`
      SELECT at < now() - ${`${ms} milliseconds`}::interval AS old FROM audit_events WHERE seq = ${seq}`.execute(db);
    if (rows[0]?.old) return;
    if (Date.now() > deadline) throw new Error(`audit event ${seq} did not get ${ms} ms old in time`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
