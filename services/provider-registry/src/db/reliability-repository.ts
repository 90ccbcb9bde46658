/**
 * Reading and keeping a machine's reliability books (`provider_uptime`, `provider_reliability`,
 * `providers.status_since`; the uptime itself is kept by a trigger on status changes, and the books and the score
 * are read by `provider_reliability_of`: see the reliability migration).
 */
import { type Kysely, sql, type Transaction } from 'kysely';
import type { ReliabilityBooks } from '../domain/reliability.ts';
import type { RegistryDB } from './schema.ts';

type Db = Kysely<RegistryDB> | Transaction<RegistryDB>;

/**
 * The machine's books over the last 30 days (at most 31 day rows and the open interval of its current status) and
 * its score; undefined when there is no such machine.
 */
export async function reliabilityBooks(db: Db, providerId: string): Promise<ReliabilityBooks | undefined> {
  const { rows } = await sql<{
    up_seconds: number;
    down_seconds: number;
    sessions_ended: number;
    sessions_failed: number;
    score: number;
  }>`SELECT * FROM provider_reliability_of(${providerId}::uuid)`.execute(db);
  const row = rows[0];
  if (!row) return undefined;
  return {
    upSeconds: Number(row.up_seconds),
    downSeconds: Number(row.down_seconds),
    sessionsEnded: Number(row.sessions_ended),
    sessionsFailed: Number(row.sessions_failed),
    score: Number(row.score),
  };
}

/** Counts one more session ended on the machine, and whether it ended by the machine's fault. */
export async function countSessionEnd(trx: Transaction<RegistryDB>, providerId: string, fault: boolean) {
  await sql`
    INSERT INTO provider_reliability (provider_id, sessions_ended, sessions_failed)
    VALUES (${providerId}, 1, ${fault ? 1 : 0})
    ON CONFLICT (provider_id) DO UPDATE SET
      sessions_ended = provider_reliability.sessions_ended + 1,
      sessions_failed = provider_reliability.sessions_failed + EXCLUDED.sessions_failed`.execute(trx);
}
