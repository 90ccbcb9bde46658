/**
 * The audit trail chained by hash (@gpu/common's db/audit-chain.ts): every event carries its place (`seq`), the
 * previous event's hash and its own, set by a trigger as it is inserted; events already there are chained in the
 * order they were written. Nothing updates an event; the database deletes one only past the retention it holds
 * (written by the migration step from `audit.retention`), from the start of the chain; the guard that honoured a
 * setting any session could set is gone. Frozen: never edit, add a new migration.
 */
import { chainAuditTable, unchainAuditTable } from '@gpu/common';
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await chainAuditTable(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await unchainAuditTable(db);
}
