/**
 * The audit trail: security-relevant actions (keys, clients, roles, passwords, sign-outs), appended with who, what,
 * when, the outcome and the request, in `audit_events` (@gpu/common's db/audit-table.ts: append-only in the database,
 * a trigger refusing every UPDATE, TRUNCATE and DELETE but the retention purge's). Frozen: never edit, add a new
 * migration.
 */
import { createAuditTable, dropAuditTable } from '@gpu/common';
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await createAuditTable(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await dropAuditTable(db);
}
